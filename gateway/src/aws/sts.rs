//! STS over the Query protocol (`Version=2011-06-15`): `GetCallerIdentity`, which tools call
//! to learn the account id, answered with the signing key's tenant account.

use super::{xml_escape, xml_response, AwsCaller, AwsError};
use crate::error::current_request_id;
use axum::http::StatusCode;
use axum::response::Response;

/// The STS API version of the Query protocol.
pub const VERSION: &str = "2011-06-15";

/// The STS actions served.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// Who the caller is.
    GetCallerIdentity,
}

impl Operation {
    /// The operation an `Action` names, if it is served.
    pub fn parse(action: &str) -> Option<Self> {
        match action {
            "GetCallerIdentity" => Some(Self::GetCallerIdentity),
            _ => None,
        }
    }
}

/// Answers one authenticated STS request.
pub fn handle(caller: &AwsCaller, action: &str, version: Option<&str>) -> Response {
    let operation = match (Operation::parse(action), version) {
        (Some(operation), None) => operation,
        (Some(operation), Some(v)) if v == VERSION => operation,
        _ => {
            return AwsError::InvalidAction(format!(
                "Could not find operation {action} for version {}",
                version.unwrap_or("(none)")
            ))
            .query_response("sts")
        }
    };
    match operation {
        Operation::GetCallerIdentity => get_caller_identity(caller),
    }
}

/// The ARN of an access key's identity: `arn:aws:iam::<account>:user/<access key id>`.
pub fn caller_arn(caller: &AwsCaller) -> String {
    format!(
        "arn:aws:iam::{}:user/{}",
        caller.account_id, caller.key.access_key_id
    )
}

fn get_caller_identity(caller: &AwsCaller) -> Response {
    let request_id = current_request_id();
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n\
         <GetCallerIdentityResponse xmlns=\"https://sts.amazonaws.com/doc/2011-06-15/\">\
         <GetCallerIdentityResult><Arn>{}</Arn><UserId>{}</UserId><Account>{}</Account>\
         </GetCallerIdentityResult><ResponseMetadata><RequestId>{}</RequestId>\
         </ResponseMetadata></GetCallerIdentityResponse>",
        xml_escape(&caller_arn(caller)),
        xml_escape(&caller.key.access_key_id),
        xml_escape(&caller.account_id),
        xml_escape(&request_id),
    );
    xml_response(StatusCode::OK, body, &request_id)
}
