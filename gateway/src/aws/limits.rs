//! How large each AWS action's request body may be: the REST API's bounds (`extract.rs`) for
//! the same work, so `--max-message-bytes` (up to 64 MiB with a payload store) sets them as it
//! sets REST's, and an action that carries no message reads no more than REST's small bodies.
//! A batch is bounded as a single send (plus its framing), since SQS and SNS bound a batch's
//! messages together by the largest message, where REST bounds each entry.
//!
//! Both AWS encodings stay within REST's factor of three: JSON escaping writes at most three
//! bytes per byte of UTF-8 (as REST's JSON), form encoding at most three (`%XX`).
//!
//! The JSON protocol names its action in `X-Amz-Target`, so its body is read up to that
//! action's bound. The Query protocol names it in the body (`Action=…`): its body is read up to
//! the largest bound of the credential scope's service — only once the headers have named a
//! known key, so an unauthenticated client reads nothing — and checked against its action's
//! bound once the action is known.

use crate::extract::{BodyLimit, SendLimit, SmallLimit};
use crate::state::AppState;
use sluice_services::{MAX_OPAQUE_ATTRIBUTES, MAX_OPAQUE_VALUE_BYTES};

/// What a body carries, and so how large it may be.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyClass {
    /// One message: REST's single send.
    Send,
    /// Up to ten messages whose bodies and attributes together are at most the largest
    /// message (SQS's and SNS's rule for batches): a single send plus 64 KiB for the entries'
    /// ids and framing.
    Batch,
    /// Attributes and policies: a queue's opaque attributes (32 of 20 KiB) or a filter policy
    /// (256 KiB), encoded.
    Config,
    /// Names, handles and small settings: REST's small bodies (64 KiB).
    Small,
}

impl BodyClass {
    /// The bound, in bytes, under the server's configuration.
    pub fn bytes(self, state: &AppState) -> usize {
        match self {
            Self::Send => SendLimit::limit(state),
            Self::Batch => SendLimit::limit(state) + SmallLimit::limit(state),
            Self::Config => {
                let largest = (MAX_OPAQUE_ATTRIBUTES * MAX_OPAQUE_VALUE_BYTES).max(256 * 1024);
                3 * largest + SmallLimit::limit(state)
            }
            Self::Small => SmallLimit::limit(state),
        }
    }
}

/// The class of an action of `service` (`sqs`, `sns`, `sts`, …); actions not served are small.
pub fn action_class(service: &str, action: &str) -> BodyClass {
    match (service, action) {
        ("sqs", "SendMessage") | ("sns", "Publish") => BodyClass::Send,
        ("sqs", "SendMessageBatch") | ("sns", "PublishBatch") => BodyClass::Batch,
        ("sqs", "CreateQueue" | "SetQueueAttributes" | "AddPermission" | "TagQueue")
        | (
            "sns",
            "CreateTopic"
            | "SetTopicAttributes"
            | "Subscribe"
            | "SetSubscriptionAttributes"
            | "TagResource"
            | "AddPermission"
            | "PutDataProtectionPolicy",
        ) => BodyClass::Config,
        _ => BodyClass::Small,
    }
}

/// The largest class of any action of `service`: what a body whose action is not yet known
/// may need.
pub fn service_class(service: &str) -> BodyClass {
    match service {
        "sqs" | "sns" => BodyClass::Batch,
        _ => BodyClass::Small,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_message_carrying_actions_read_large_bodies() {
        assert_eq!(action_class("sqs", "SendMessage"), BodyClass::Send);
        assert_eq!(action_class("sqs", "SendMessageBatch"), BodyClass::Batch);
        assert_eq!(action_class("sns", "PublishBatch"), BodyClass::Batch);
        assert_eq!(action_class("sqs", "SetQueueAttributes"), BodyClass::Config);
        assert_eq!(action_class("sns", "Subscribe"), BodyClass::Config);
        for (service, action) in [
            ("sqs", "GetQueueAttributes"),
            ("sqs", "ReceiveMessage"),
            ("sqs", "DeleteMessageBatch"),
            ("sns", "ListTopics"),
            ("sts", "GetCallerIdentity"),
            ("sqs", "NoSuchAction"),
            ("s3", "SendMessage"),
        ] {
            assert_eq!(action_class(service, action), BodyClass::Small, "{action}");
        }
        assert_eq!(service_class("sqs"), BodyClass::Batch);
        assert_eq!(service_class("sts"), BodyClass::Small);
    }
}
