//! SNS's topic actions: `CreateTopic`, `GetTopicAttributes`, `SetTopicAttributes`,
//! `ListTopics`, `DeleteTopic` and the tagging actions, on the topic services.
//!
//! Of a topic's attributes, `FifoTopic` is the name's `.fifo` suffix and
//! `ContentBasedDeduplication` the topic's setting; every other settable attribute is stored
//! as written and echoed back, with SNS's defaults for `Policy`, `DisplayName` and
//! `EffectiveDeliveryPolicy` when none was set.

use super::error::SnsError;
use super::input::{tags, CreateTopic, SetAttribute};
use super::{write_attributes, Context};
use crate::aws::query::{Params, XmlAnswer};
use sluice_services::{ServiceError, TopicChange, TopicConfigInput, TopicView};
use std::collections::BTreeMap;

/// The page size of `ListTopics`, as SNS's.
const PAGE: u32 = 100;

/// Topic attributes stored as written, without effect in Sluice.
const STORED: [&str; 24] = [
    "DisplayName",
    "Policy",
    "DeliveryPolicy",
    "KmsMasterKeyId",
    "SignatureVersion",
    "TracingConfig",
    "ArchivePolicy",
    "FifoThroughputScope",
    "DataProtectionPolicy",
    "ApplicationSuccessFeedbackRoleArn",
    "ApplicationSuccessFeedbackSampleRate",
    "ApplicationFailureFeedbackRoleArn",
    "HTTPSuccessFeedbackRoleArn",
    "HTTPSuccessFeedbackSampleRate",
    "HTTPFailureFeedbackRoleArn",
    "LambdaSuccessFeedbackRoleArn",
    "LambdaFailureFeedbackRoleArn",
    "SQSSuccessFeedbackRoleArn",
    "SQSFailureFeedbackRoleArn",
    "LambdaSuccessFeedbackSampleRate",
    "SQSSuccessFeedbackSampleRate",
    "FirehoseSuccessFeedbackRoleArn",
    "FirehoseSuccessFeedbackSampleRate",
    "FirehoseFailureFeedbackRoleArn",
];

fn is_stored(name: &str) -> bool {
    STORED.contains(&name)
}

/// SNS's delivery policy when a topic has none of its own.
const DEFAULT_DELIVERY_POLICY: &str = r#"{"http":{"defaultHealthyRetryPolicy":{"minDelayTarget":20,"maxDelayTarget":20,"numRetries":3,"numMaxDelayRetries":0,"numNoDelayRetries":0,"numMinDelayRetries":0,"backoffFunction":"linear"},"disableSubscriptionOverrides":false,"defaultRequestPolicy":{"headerContentType":"text/plain; charset=UTF-8"}}}"#;

/// SNS's access policy when a topic has none of its own: the owner may do everything.
fn default_policy(arn: &str, account: &str) -> String {
    serde_json::json!({
        "Version": "2008-10-17",
        "Id": "__default_policy_ID",
        "Statement": [{
            "Sid": "__default_statement_ID",
            "Effect": "Allow",
            "Principal": {"AWS": "*"},
            "Action": [
                "SNS:GetTopicAttributes", "SNS:SetTopicAttributes", "SNS:AddPermission",
                "SNS:RemovePermission", "SNS:DeleteTopic", "SNS:Subscribe",
                "SNS:ListSubscriptionsByTopic", "SNS:Publish"
            ],
            "Resource": arn,
            "Condition": {"StringEquals": {"AWS:SourceOwner": account}}
        }]
    })
    .to_string()
}

fn boolean(parameter: &str, value: &str) -> Result<bool, SnsError> {
    match value.to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(SnsError::invalid(
            parameter,
            format!("{value:?} is not true or false"),
        )),
    }
}

/// A topic's name from a `TopicArn` (or `ResourceArn`) parameter.
fn topic_name<'p>(
    cx: &Context<'_>,
    params: &'p Params,
    parameter: &str,
) -> Result<&'p str, SnsError> {
    cx.home.topic_name(parameter, params.required(parameter)?)
}

/// `CreateTopic`: idempotent as SNS's: the same name with the same attributes and tags
/// answers the same ARN; with others, `InvalidParameter`.
pub async fn create_topic(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let input = CreateTopic::parse(params)?;
    let fifo_name = input.name.ends_with(".fifo");
    let mut content_based_deduplication = None;
    let mut stored = BTreeMap::new();
    for (name, value) in &input.attributes {
        match name.as_str() {
            "FifoTopic" => {
                if boolean("Attributes.FifoTopic", value)? != fifo_name {
                    return Err(SnsError::invalid(
                        "Topic Name",
                        "FIFO topic names must end with .fifo and standard topic names must not",
                    ));
                }
            }
            "ContentBasedDeduplication" => {
                let on = boolean("Attributes.ContentBasedDeduplication", value)?;
                // `false` is every standard topic's state, so tools that always send it work.
                content_based_deduplication = (on || fifo_name).then_some(on);
            }
            name if is_stored(name) => {
                stored.insert(name.to_owned(), value.clone());
            }
            other => {
                return Err(SnsError::invalid(
                    "Attributes",
                    format!("Unknown attribute {other}"),
                ))
            }
        }
    }
    if fifo_name && !input.attributes.contains_key("FifoTopic") {
        return Err(SnsError::invalid(
            "Topic Name",
            "a FIFO topic (a name ending in .fifo) needs the attribute FifoTopic=true",
        ));
    }
    let config = TopicConfigInput {
        content_based_deduplication,
        tags: (!input.tags.is_empty()).then(|| input.tags.clone()),
    };
    let (view, created) = cx
        .services
        .create_topic(cx.tenant, &input.name, config, stored.clone())
        .await?;
    if !created {
        let same_attributes = stored
            .iter()
            .all(|(name, value)| view.aws_attributes.get(name) == Some(value))
            && content_based_deduplication
                .is_none_or(|on| on == view.config.content_based_deduplication);
        if !same_attributes {
            return Err(SnsError::invalid(
                "Attributes",
                "Topic already exists with different attributes",
            ));
        }
        if !input.tags.is_empty() && input.tags != view.config.tags {
            return Err(SnsError::invalid(
                "Tags",
                "Topic already exists with different tags",
            ));
        }
    }
    let mut answer = XmlAnswer::new("sns", action);
    answer.element("TopicArn", &cx.home.topic(view.name.as_str()));
    Ok(answer)
}

/// `GetTopicAttributes`.
pub async fn get_topic_attributes(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let name = topic_name(cx, params, "TopicArn")?;
    let view = cx.services.get_topic(cx.tenant, name).await?;
    let mut answer = XmlAnswer::new("sns", action);
    let attributes = topic_attributes(cx, &view);
    write_attributes(
        &mut answer,
        attributes.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    Ok(answer)
}

/// Every attribute of a topic, SNS's defaults filled in.
fn topic_attributes(cx: &Context<'_>, view: &TopicView) -> BTreeMap<String, String> {
    let arn = cx.home.topic(view.name.as_str());
    let mut attributes: BTreeMap<String, String> = view.aws_attributes.clone();
    let mut put = |key: &str, value: String| {
        attributes.insert(key.to_owned(), value);
    };
    put("TopicArn", arn.clone());
    put("Owner", cx.home.account.to_owned());
    put(
        "SubscriptionsConfirmed",
        view.subscription_count.to_string(),
    );
    put("SubscriptionsPending", "0".into());
    put("SubscriptionsDeleted", "0".into());
    if view.name.is_fifo() {
        put("FifoTopic", "true".into());
        put(
            "ContentBasedDeduplication",
            view.config.content_based_deduplication.to_string(),
        );
    }
    put(
        "EffectiveDeliveryPolicy",
        view.aws_attributes
            .get("DeliveryPolicy")
            .cloned()
            .unwrap_or_else(|| DEFAULT_DELIVERY_POLICY.to_owned()),
    );
    attributes
        .entry("Policy".into())
        .or_insert_with(|| default_policy(&arn, cx.home.account));
    attributes.entry("DisplayName".into()).or_default();
    attributes
}

/// `SetTopicAttributes`: one attribute; an empty value removes a stored one.
pub async fn set_topic_attributes(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let input = SetAttribute::parse(params, "TopicArn")?;
    let name = cx.home.topic_name("TopicArn", &input.arn)?;
    let mut change = TopicChange::default();
    match input.name.as_str() {
        "ContentBasedDeduplication" => {
            let on = boolean("AttributeValue", &input.value)?;
            change.content_based_deduplication = (on || name.ends_with(".fifo")).then_some(on);
        }
        "FifoTopic" => {
            return Err(SnsError::invalid(
                "AttributeName",
                "FifoTopic cannot be changed after the topic is created",
            ))
        }
        stored if is_stored(stored) => {
            let value = (!input.value.is_empty()).then(|| input.value.clone());
            change.aws_attributes.insert(stored.to_owned(), value);
        }
        other => {
            return Err(SnsError::invalid(
                "AttributeName",
                format!("Unknown attribute {other}"),
            ))
        }
    }
    cx.services.change_topic(cx.tenant, name, change).await?;
    Ok(XmlAnswer::new("sns", action))
}

/// `ListTopics`: 100 a page, by name.
pub async fn list_topics(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let page = cx
        .services
        .list_topics(cx.tenant, Some(PAGE), params.get("NextToken"))
        .await?;
    let mut answer = XmlAnswer::new("sns", action);
    answer.open("Topics");
    for topic in &page.topics {
        answer
            .open("member")
            .element("TopicArn", &cx.home.topic(topic.name.as_str()))
            .close();
    }
    answer.close();
    if let Some(token) = &page.next_token {
        answer.element("NextToken", token);
    }
    Ok(answer)
}

/// `DeleteTopic`: a topic that does not exist (any more) is no error, as in SNS.
pub async fn delete_topic(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let name = topic_name(cx, params, "TopicArn")?;
    match cx.services.delete_topic(cx.tenant, name).await {
        Ok(()) | Err(ServiceError::TopicNotFound) => Ok(XmlAnswer::new("sns", action)),
        Err(other) => Err(other.into()),
    }
}

/// `TagResource`.
pub async fn tag_resource(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let name = topic_name(cx, params, "ResourceArn")?;
    let add_tags = tags(params, "Tags")?;
    if add_tags.is_empty() {
        return Err(SnsError::invalid("Tags", "at least one tag is required"));
    }
    let change = TopicChange {
        add_tags,
        ..TopicChange::default()
    };
    change_tags(cx, action, name, change).await
}

/// `UntagResource`.
pub async fn untag_resource(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let name = topic_name(cx, params, "ResourceArn")?;
    let remove_tags: Vec<String> = params
        .list("TagKeys")?
        .into_iter()
        .map(str::to_owned)
        .collect();
    let change = TopicChange {
        remove_tags,
        ..TopicChange::default()
    };
    change_tags(cx, action, name, change).await
}

/// Applies a tagging change (SNS answers tagging errors with their own codes) and answers with
/// the empty result element SDKs expect.
async fn change_tags(
    cx: &Context<'_>,
    action: &str,
    name: &str,
    change: TopicChange,
) -> Result<XmlAnswer, SnsError> {
    cx.services
        .change_topic(cx.tenant, name, change)
        .await
        .map_err(SnsError::of_tagging)?;
    Ok(XmlAnswer::new("sns", action).with_result())
}

/// `ListTagsForResource`.
pub async fn list_tags_for_resource(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let name = topic_name(cx, params, "ResourceArn")?;
    let view = cx
        .services
        .get_topic(cx.tenant, name)
        .await
        .map_err(SnsError::of_tagging)?;
    let mut answer = XmlAnswer::new("sns", action);
    answer.open("Tags");
    for (key, value) in &view.config.tags {
        answer
            .open("member")
            .element("Key", key)
            .element("Value", value)
            .close();
    }
    answer.close();
    Ok(answer)
}
