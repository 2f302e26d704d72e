//! SNS over the Query protocol (`Action=…&Version=2010-03-31`, XML answers in SNS's
//! namespace): the [`Operation`]s served, the scope each needs, and one `match` dispatching
//! them to handlers that call the topic services ([`topics`], [`subscriptions`], [`publish`])
//! and hold no topic semantics of their own.
//!
//! [`input`] reads the typed inputs, [`arn`] maps ARNs onto Sluice's names, [`error`] is the
//! table of SNS's error codes. Attributes Sluice stores without acting on them are kept in the
//! services' `aws_attributes` of the topic or subscription and echoed as written.

pub mod arn;
pub mod error;
pub mod input;
pub mod publish;
pub mod subscriptions;
pub mod topics;

use super::query::{Params, XmlAnswer};
use super::{sts, AwsCaller, AwsError};
use crate::auth::Scope;
use crate::state::AppState;
use arn::Home;
use axum::response::Response;
use error::SnsError;
use sluice_engine::TenantId;
use sluice_services::Services;

/// The SNS API version of the Query protocol.
pub const VERSION: &str = "2010-03-31";

/// The SNS actions served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Creates a topic, or answers the existing one with the same attributes.
    CreateTopic,
    /// A topic's attributes.
    GetTopicAttributes,
    /// Sets one attribute of a topic.
    SetTopicAttributes,
    /// The caller's topics, 100 a page.
    ListTopics,
    /// Deletes a topic (a missing one is no error).
    DeleteTopic,
    /// Subscribes a queue.
    Subscribe,
    /// Removes a subscription (a missing one is no error).
    Unsubscribe,
    /// The caller's subscriptions, 100 a page.
    ListSubscriptions,
    /// A topic's subscriptions, 100 a page.
    ListSubscriptionsByTopic,
    /// A subscription's attributes.
    GetSubscriptionAttributes,
    /// Sets one attribute of a subscription.
    SetSubscriptionAttributes,
    /// Publishes a message.
    Publish,
    /// Publishes up to ten messages.
    PublishBatch,
    /// Adds tags to a topic.
    TagResource,
    /// Removes tags from a topic.
    UntagResource,
    /// A topic's tags.
    ListTagsForResource,
}

impl Operation {
    /// Every operation served.
    pub const ALL: [Operation; 16] = [
        Self::CreateTopic,
        Self::GetTopicAttributes,
        Self::SetTopicAttributes,
        Self::ListTopics,
        Self::DeleteTopic,
        Self::Subscribe,
        Self::Unsubscribe,
        Self::ListSubscriptions,
        Self::ListSubscriptionsByTopic,
        Self::GetSubscriptionAttributes,
        Self::SetSubscriptionAttributes,
        Self::Publish,
        Self::PublishBatch,
        Self::TagResource,
        Self::UntagResource,
        Self::ListTagsForResource,
    ];

    /// The action's AWS name.
    pub fn name(self) -> &'static str {
        match self {
            Self::CreateTopic => "CreateTopic",
            Self::GetTopicAttributes => "GetTopicAttributes",
            Self::SetTopicAttributes => "SetTopicAttributes",
            Self::ListTopics => "ListTopics",
            Self::DeleteTopic => "DeleteTopic",
            Self::Subscribe => "Subscribe",
            Self::Unsubscribe => "Unsubscribe",
            Self::ListSubscriptions => "ListSubscriptions",
            Self::ListSubscriptionsByTopic => "ListSubscriptionsByTopic",
            Self::GetSubscriptionAttributes => "GetSubscriptionAttributes",
            Self::SetSubscriptionAttributes => "SetSubscriptionAttributes",
            Self::Publish => "Publish",
            Self::PublishBatch => "PublishBatch",
            Self::TagResource => "TagResource",
            Self::UntagResource => "UntagResource",
            Self::ListTagsForResource => "ListTagsForResource",
        }
    }

    /// The operation an `Action` names, if it is served.
    pub fn parse(action: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|op| op.name() == action)
    }

    /// The scopes of which the key needs one, as the REST routes of the same resources ask:
    /// reading topics takes either topic scope, publishing `topics:publish`, everything
    /// else `topics:manage`.
    pub fn scopes(self) -> &'static [Scope] {
        match self {
            Self::Publish | Self::PublishBatch => &[Scope::TopicsPublish],
            Self::GetTopicAttributes | Self::ListTopics | Self::ListTagsForResource => {
                &[Scope::TopicsManage, Scope::TopicsPublish]
            }
            _ => &[Scope::TopicsManage],
        }
    }
}

/// What a handler works with: the services, the caller's tenant and where its resources live.
pub struct Context<'a> {
    /// The services.
    pub services: &'a Services,
    /// The caller's tenant.
    pub tenant: &'a TenantId,
    /// The server's region and the caller's account.
    pub home: Home<'a>,
}

/// Answers one authenticated SNS request.
pub async fn handle(state: &AppState, caller: &AwsCaller, params: &[(String, String)]) -> Response {
    let params = Params::new(params.iter().cloned());
    let context = Context {
        services: &state.services,
        tenant: &caller.key.tenant,
        home: Home {
            region: state.services.aws_region(),
            account: &caller.account_id,
        },
    };
    let answer = async {
        let operation = operation(&params)?;
        authorize(caller, operation)?;
        dispatch(&context, operation, &params).await
    }
    .await;
    match answer {
        Ok(answer) => answer.finish(),
        Err(error) => error.response(),
    }
}

fn operation(params: &Params) -> Result<Operation, SnsError> {
    let action = params.get("Action").ok_or(AwsError::MissingAction)?;
    let version = params.get("Version");
    match (Operation::parse(action), version) {
        (Some(operation), None) => Ok(operation),
        (Some(operation), Some(v)) if v == VERSION => Ok(operation),
        _ => Err(AwsError::InvalidAction(format!(
            "Could not find operation {action} for version {}",
            version.unwrap_or("(none)")
        ))
        .into()),
    }
}

/// Refuses an action whose scopes the key has none of, as SNS refuses an IAM user.
fn authorize(caller: &AwsCaller, operation: Operation) -> Result<(), SnsError> {
    let scopes = operation.scopes();
    if caller
        .key
        .scopes
        .iter()
        .any(|held| scopes.iter().any(|needed| needed.as_str() == held))
    {
        return Ok(());
    }
    let names: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
    Err(SnsError::AuthorizationError(format!(
        "User: {} is not authorized to perform: SNS:{}: the access key needs the scope {}",
        sts::caller_arn(caller),
        operation.name(),
        names.join(" or ")
    )))
}

async fn dispatch(
    cx: &Context<'_>,
    operation: Operation,
    params: &Params,
) -> Result<XmlAnswer, SnsError> {
    use Operation as O;
    let name = operation.name();
    match operation {
        O::CreateTopic => topics::create_topic(cx, name, params).await,
        O::GetTopicAttributes => topics::get_topic_attributes(cx, name, params).await,
        O::SetTopicAttributes => topics::set_topic_attributes(cx, name, params).await,
        O::ListTopics => topics::list_topics(cx, name, params).await,
        O::DeleteTopic => topics::delete_topic(cx, name, params).await,
        O::TagResource => topics::tag_resource(cx, name, params).await,
        O::UntagResource => topics::untag_resource(cx, name, params).await,
        O::ListTagsForResource => topics::list_tags_for_resource(cx, name, params).await,
        O::Subscribe => subscriptions::subscribe(cx, name, params).await,
        O::Unsubscribe => subscriptions::unsubscribe(cx, name, params).await,
        O::ListSubscriptions => subscriptions::list_subscriptions(cx, name, params).await,
        O::ListSubscriptionsByTopic => {
            subscriptions::list_subscriptions_by_topic(cx, name, params).await
        }
        O::GetSubscriptionAttributes => {
            subscriptions::get_subscription_attributes(cx, name, params).await
        }
        O::SetSubscriptionAttributes => {
            subscriptions::set_subscription_attributes(cx, name, params).await
        }
        O::Publish => publish::publish(cx, name, params).await,
        O::PublishBatch => publish::publish_batch(cx, name, params).await,
    }
}

/// Writes `<Attributes><entry><key>…</key><value>…</value></entry>…</Attributes>`.
pub fn write_attributes<'a>(
    answer: &mut XmlAnswer,
    attributes: impl IntoIterator<Item = (&'a str, &'a str)>,
) {
    answer.open("Attributes");
    for (key, value) in attributes {
        answer
            .open("entry")
            .element("key", key)
            .element("value", value)
            .close();
    }
    answer.close();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_operation_parses_from_its_name() {
        for op in Operation::ALL {
            assert_eq!(Operation::parse(op.name()), Some(op));
        }
        assert_eq!(Operation::parse("CreatePlatformApplication"), None);
    }
}
