//! SQS over both of its protocols: AWS JSON 1.0 (`X-Amz-Target: AmazonSQS.<Action>`, current
//! SDKs) and the Query protocol (`Action=<Action>&Version=2012-11-05`, XML answers; older SDKs).
//!
//! A request is decoded by its protocol's codec ([`codec`]) into one JSON value of AWS's JSON
//! shape (the Query codec translates its flattened names), run by [`actions`] as one
//! [`Operation`] with typed input and output, and the output encoded back by the same codec.
//! Actions call the same services as the REST API and hold no queue semantics; [`attributes`]
//! translates queue attributes to and from the queue configuration; [`error`] is the one
//! table of SQS's errors.

pub mod actions;
pub mod attributes;
pub mod codec;
pub mod error;

use super::query::Params;
use super::AwsCaller;
use crate::auth::Scope;
use crate::state::AppState;
use axum::body::Bytes;
use axum::response::Response;
pub use error::SqsError;

/// The Query protocol's API version.
pub const VERSION: &str = "2012-11-05";
/// The `X-Amz-Target` prefix of JSON requests.
pub const TARGET_PREFIX: &str = "AmazonSQS.";

/// Defines [`Operation`] from one list, so names and parsing cannot drift apart.
macro_rules! operations {
    ($($name:ident),* $(,)?) => {
        /// The SQS actions served, named as AWS names them.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        #[allow(missing_docs)]
        pub enum Operation { $($name),* }

        impl Operation {
            /// The operation an action name names, if it is served.
            pub fn parse(action: &str) -> Option<Self> {
                match action {
                    $(stringify!($name) => Some(Self::$name),)*
                    _ => None,
                }
            }

            /// AWS's name of the action.
            pub fn name(self) -> &'static str {
                match self { $(Self::$name => stringify!($name)),* }
            }
        }
    };
}

operations!(
    CreateQueue,
    GetQueueUrl,
    ListQueues,
    GetQueueAttributes,
    SetQueueAttributes,
    DeleteQueue,
    PurgeQueue,
    SendMessage,
    SendMessageBatch,
    ReceiveMessage,
    DeleteMessage,
    DeleteMessageBatch,
    ChangeMessageVisibility,
    ChangeMessageVisibilityBatch,
    TagQueue,
    UntagQueue,
    ListQueueTags,
    ListDeadLetterSourceQueues,
    AddPermission,
    RemovePermission,
    StartMessageMoveTask,
    ListMessageMoveTasks,
    CancelMessageMoveTask,
);

impl Operation {
    /// The scopes of which the signing key must hold one, as the REST routes demand them.
    pub fn scopes(self) -> &'static [Scope] {
        use Operation as O;
        const READ: &[Scope] = &[
            Scope::QueuesManage,
            Scope::MessagesSend,
            Scope::MessagesConsume,
        ];
        match self {
            O::GetQueueUrl
            | O::ListQueues
            | O::GetQueueAttributes
            | O::ListQueueTags
            | O::ListDeadLetterSourceQueues => READ,
            O::SendMessage | O::SendMessageBatch => &[Scope::MessagesSend],
            O::ReceiveMessage
            | O::DeleteMessage
            | O::DeleteMessageBatch
            | O::ChangeMessageVisibility
            | O::ChangeMessageVisibilityBatch => &[Scope::MessagesConsume],
            O::CreateQueue
            | O::SetQueueAttributes
            | O::DeleteQueue
            | O::PurgeQueue
            | O::TagQueue
            | O::UntagQueue
            | O::AddPermission
            | O::RemovePermission
            | O::StartMessageMoveTask
            | O::ListMessageMoveTasks
            | O::CancelMessageMoveTask => &[Scope::QueuesManage],
        }
    }
}

impl Operation {
    /// Whether the action has an output (AWS then answers a result element even when it is
    /// empty).
    pub fn has_output(self) -> bool {
        use Operation as O;
        !matches!(
            self,
            O::SetQueueAttributes
                | O::DeleteQueue
                | O::PurgeQueue
                | O::DeleteMessage
                | O::ChangeMessageVisibility
                | O::TagQueue
                | O::UntagQueue
                | O::AddPermission
                | O::RemovePermission
        )
    }
}

/// Which protocol a request speaks, and so how it is decoded and answered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    /// AWS JSON 1.0.
    Json,
    /// The Query protocol.
    Query,
}

/// One authenticated SQS request, as `aws::entry` hands it over.
pub struct Call {
    /// How it is encoded.
    pub protocol: Protocol,
    /// The action named by `X-Amz-Target` or `Action`.
    pub action: Option<String>,
    /// `Version` (Query protocol).
    pub version: Option<String>,
    /// The JSON body (JSON protocol).
    pub body: Bytes,
    /// The parameters (Query protocol).
    pub params: Params,
    /// The request path: a queue URL's path names the queue when `QueueUrl` is absent.
    pub path: String,
}

/// Answers one authenticated SQS request.
pub async fn handle(state: &AppState, caller: &AwsCaller, call: Call) -> Response {
    let protocol = call.protocol;
    let operation = match call.action.as_deref().and_then(Operation::parse) {
        Some(operation) => operation,
        None => {
            let error = match &call.action {
                None => super::AwsError::MissingAction,
                Some(action) => super::AwsError::InvalidAction(format!(
                    "An invalid action or version was given: {action}"
                )),
            };
            return codec::error_response(protocol, &error.into());
        }
    };
    let result = match codec::decode(&call, operation) {
        Ok(input) => actions::run(state, caller, operation, input).await,
        Err(error) => Err(error),
    };
    match result {
        Ok(output) => codec::answer(protocol, operation, output),
        Err(error) => codec::error_response(protocol, &error),
    }
}
