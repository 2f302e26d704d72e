//! SNS's subscription actions: `Subscribe`, `Unsubscribe`, `ListSubscriptions`,
//! `ListSubscriptionsByTopic`, `GetSubscriptionAttributes`, `SetSubscriptionAttributes`, on the
//! topic services.
//!
//! Only the `sqs` protocol is served, with a queue ARN of the caller's account as endpoint;
//! subscriptions are confirmed at once. `FilterPolicy`, `FilterPolicyScope`,
//! `RawMessageDelivery` and `RedrivePolicy` are the subscription's settings; the texts of
//! `FilterPolicy` and `RedrivePolicy` are also kept as written, and echoed while they still
//! say what the settings are (a change over REST makes the echo the settings' own JSON).

use super::error::SnsError;
use super::input::{SetAttribute, Subscribe};
use super::{write_attributes, Context};
use crate::aws::query::{Params, XmlAnswer};
use serde_json::Value;
use sluice_services::{ServiceError, SubscribeRequest, SubscriptionPatch, SubscriptionView};
use std::collections::BTreeMap;

/// The page size of the listings, as SNS's.
const PAGE: u32 = 100;

/// Subscription attributes stored as written, without effect in Sluice.
const STORED: [&str; 3] = ["DeliveryPolicy", "SubscriptionRoleArn", "ReplayPolicy"];

/// Subscription settings as attributes set them; `None` leaves a setting as it is.
#[derive(Debug, Default)]
struct Settings {
    filter_policy: Option<Option<Value>>,
    filter_policy_scope: Option<String>,
    raw_delivery: Option<bool>,
    dead_letter_queue: Option<Option<String>>,
    aws_attributes: BTreeMap<String, Option<String>>,
}

impl Settings {
    /// Applies the attribute `name` = `value` (empty removes the setting), named as
    /// `parameter` in errors.
    fn set(
        &mut self,
        cx: &Context<'_>,
        parameter: &str,
        name: &str,
        value: &str,
    ) -> Result<(), SnsError> {
        let text = (!value.is_empty()).then(|| value.to_owned());
        match name {
            "FilterPolicy" => {
                let policy = match &text {
                    Some(text) => Some(serde_json::from_str::<Value>(text).map_err(|e| {
                        SnsError::invalid("FilterPolicy", format!("failed to parse JSON: {e}"))
                    })?),
                    None => None,
                };
                self.filter_policy = Some(policy);
                self.aws_attributes.insert(name.to_owned(), text);
            }
            "FilterPolicyScope" => {
                self.filter_policy_scope = Some(match value {
                    "MessageAttributes" => "attributes".to_owned(),
                    "MessageBody" => "body".to_owned(),
                    other => {
                        return Err(SnsError::invalid(
                            "FilterPolicyScope",
                            format!("must be MessageAttributes or MessageBody, got {other:?}"),
                        ))
                    }
                });
            }
            "RawMessageDelivery" => {
                self.raw_delivery = Some(match value.to_ascii_lowercase().as_str() {
                    "true" => true,
                    "false" => false,
                    _ => {
                        return Err(SnsError::invalid(
                            "RawMessageDelivery",
                            format!("{value:?} is not true or false"),
                        ))
                    }
                });
            }
            "RedrivePolicy" => {
                let queue = match &text {
                    Some(text) => Some(dead_letter_queue(cx, text)?),
                    None => None,
                };
                self.dead_letter_queue = Some(queue);
                self.aws_attributes.insert(name.to_owned(), text);
            }
            stored if STORED.contains(&stored) => {
                self.aws_attributes.insert(stored.to_owned(), text);
            }
            other => {
                return Err(SnsError::invalid(
                    parameter,
                    format!("Unknown attribute {other}"),
                ))
            }
        }
        Ok(())
    }
}

/// The queue a `RedrivePolicy` names: `{"deadLetterTargetArn": "<queue ARN>"}`.
fn dead_letter_queue(cx: &Context<'_>, text: &str) -> Result<String, SnsError> {
    let policy: Value = serde_json::from_str(text)
        .map_err(|e| SnsError::invalid("RedrivePolicy", format!("failed to parse JSON: {e}")))?;
    let arn = policy
        .get("deadLetterTargetArn")
        .and_then(Value::as_str)
        .ok_or_else(|| {
            SnsError::invalid(
                "RedrivePolicy",
                "must be a JSON object with the queue ARN deadLetterTargetArn",
            )
        })?;
    Ok(cx
        .home
        .queue_name("RedrivePolicy: deadLetterTargetArn", arn)?
        .to_owned())
}

/// `Subscribe`: a queue of the caller's account, by its ARN; subscribing it again with the
/// same attributes answers the same ARN.
pub async fn subscribe(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let input = Subscribe::parse(params)?;
    let topic = cx.home.topic_name("TopicArn", &input.topic_arn)?;
    if input.protocol != "sqs" {
        return Err(SnsError::invalid(
            "Protocol",
            format!(
                "the protocol {:?} is not served; Sluice delivers to queues only (protocol sqs)",
                input.protocol
            ),
        ));
    }
    let endpoint = input
        .endpoint
        .as_deref()
        .filter(|e| !e.is_empty())
        .ok_or_else(|| SnsError::invalid("Endpoint", "the sqs protocol needs a queue ARN"))?;
    let queue = cx.home.queue_name("Endpoint", endpoint)?;
    let mut settings = Settings::default();
    for (name, value) in &input.attributes {
        settings.set(cx, "Attributes", name, value)?;
    }
    let request = SubscribeRequest {
        queue: queue.to_owned(),
        filter_policy: settings.filter_policy.flatten(),
        filter_policy_scope: settings.filter_policy_scope,
        raw_delivery: settings.raw_delivery,
        dead_letter_queue: settings.dead_letter_queue.flatten(),
        aws_attributes: settings
            .aws_attributes
            .into_iter()
            .filter_map(|(k, v)| v.map(|v| (k, v)))
            .collect(),
    };
    let (view, _) = cx
        .services
        .subscribe(cx.tenant, topic, request)
        .await
        .map_err(SnsError::of_subscribe)?;
    let mut answer = XmlAnswer::new("sns", action);
    answer.element("SubscriptionArn", &cx.home.subscription(&view.id));
    Ok(answer)
}

/// `Unsubscribe`: a subscription that does not exist (any more) is no error.
pub async fn unsubscribe(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let id = cx
        .home
        .subscription_id("SubscriptionArn", params.required("SubscriptionArn")?)?;
    match cx.services.unsubscribe(cx.tenant, &id).await {
        Ok(()) | Err(ServiceError::SubscriptionNotFound) => Ok(XmlAnswer::new("sns", action)),
        Err(other) => Err(other.into()),
    }
}

fn write_subscriptions(
    cx: &Context<'_>,
    answer: &mut XmlAnswer,
    subscriptions: &[SubscriptionView],
    next_token: Option<&str>,
) {
    answer.open("Subscriptions");
    for subscription in subscriptions {
        answer
            .open("member")
            .element("SubscriptionArn", &cx.home.subscription(&subscription.id))
            .element("Owner", cx.home.account)
            .element("Protocol", "sqs")
            .element("Endpoint", &cx.home.queue(subscription.queue.as_str()))
            .element("TopicArn", &cx.home.topic(subscription.topic.as_str()))
            .close();
    }
    answer.close();
    if let Some(token) = next_token {
        answer.element("NextToken", token);
    }
}

/// `ListSubscriptions`: every topic's, 100 a page.
pub async fn list_subscriptions(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let page = cx
        .services
        .list_tenant_subscriptions(cx.tenant, Some(PAGE), params.get("NextToken"))
        .await?;
    let mut answer = XmlAnswer::new("sns", action);
    write_subscriptions(
        cx,
        &mut answer,
        &page.subscriptions,
        page.next_token.as_deref(),
    );
    Ok(answer)
}

/// `ListSubscriptionsByTopic`: 100 a page.
pub async fn list_subscriptions_by_topic(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let topic = cx
        .home
        .topic_name("TopicArn", params.required("TopicArn")?)?;
    let page = cx
        .services
        .list_subscriptions(cx.tenant, topic, Some(PAGE), params.get("NextToken"))
        .await?;
    let mut answer = XmlAnswer::new("sns", action);
    write_subscriptions(
        cx,
        &mut answer,
        &page.subscriptions,
        page.next_token.as_deref(),
    );
    Ok(answer)
}

/// `GetSubscriptionAttributes`.
pub async fn get_subscription_attributes(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let id = cx
        .home
        .subscription_id("SubscriptionArn", params.required("SubscriptionArn")?)?;
    let view = cx.services.get_subscription(cx.tenant, &id).await?;
    let attributes = subscription_attributes(cx, &view);
    let mut answer = XmlAnswer::new("sns", action);
    write_attributes(
        &mut answer,
        attributes.iter().map(|(k, v)| (k.as_str(), v.as_str())),
    );
    Ok(answer)
}

/// Every attribute of a subscription.
fn subscription_attributes(cx: &Context<'_>, view: &SubscriptionView) -> BTreeMap<String, String> {
    let mut attributes: BTreeMap<String, String> = view
        .aws_attributes
        .iter()
        .filter(|(k, _)| STORED.contains(&k.as_str()))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    let mut put = |key: &str, value: String| {
        attributes.insert(key.to_owned(), value);
    };
    put("SubscriptionArn", cx.home.subscription(&view.id));
    put("TopicArn", cx.home.topic(view.topic.as_str()));
    put("Owner", cx.home.account.to_owned());
    put("Protocol", "sqs".into());
    put("Endpoint", cx.home.queue(view.queue.as_str()));
    put("ConfirmationWasAuthenticated", "true".into());
    put("PendingConfirmation", "false".into());
    put("RawMessageDelivery", view.raw_delivery.to_string());
    if let Some(policy) = &view.filter_policy {
        let written = view
            .aws_attributes
            .get("FilterPolicy")
            .filter(|text| serde_json::from_str::<Value>(text).ok().as_ref() == Some(policy));
        put(
            "FilterPolicy",
            written.cloned().unwrap_or_else(|| policy.to_string()),
        );
        put(
            "FilterPolicyScope",
            match view.filter_policy_scope {
                sluice_services::FilterScope::Attributes => "MessageAttributes",
                sluice_services::FilterScope::Body => "MessageBody",
            }
            .into(),
        );
    }
    if let Some(queue) = &view.dead_letter_queue {
        let arn = cx.home.queue(queue.as_str());
        let written = view.aws_attributes.get("RedrivePolicy").filter(|text| {
            serde_json::from_str::<Value>(text)
                .ok()
                .and_then(|p| p.get("deadLetterTargetArn").cloned())
                == Some(Value::String(arn.clone()))
        });
        put(
            "RedrivePolicy",
            written
                .cloned()
                .unwrap_or_else(|| serde_json::json!({ "deadLetterTargetArn": arn }).to_string()),
        );
    }
    attributes
}

/// `SetSubscriptionAttributes`: one attribute; an empty `FilterPolicy` or `RedrivePolicy`
/// removes it.
pub async fn set_subscription_attributes(
    cx: &Context<'_>,
    action: &str,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    let input = SetAttribute::parse(params, "SubscriptionArn")?;
    let id = cx.home.subscription_id("SubscriptionArn", &input.arn)?;
    let mut settings = Settings::default();
    settings.set(cx, "AttributeName", &input.name, &input.value)?;
    let patch = SubscriptionPatch {
        filter_policy: settings.filter_policy,
        filter_policy_scope: settings.filter_policy_scope,
        raw_delivery: settings.raw_delivery,
        dead_letter_queue: settings.dead_letter_queue,
        aws_attributes: settings.aws_attributes,
    };
    cx.services
        .patch_subscription(cx.tenant, &id, patch)
        .await?;
    Ok(XmlAnswer::new("sns", action))
}
