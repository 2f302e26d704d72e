//! The REST v1 handlers, one module per resource. Each handler authorises, calls one service
//! function and maps the answer; no queue semantics live here.

pub mod admin;
pub mod messages;
pub mod ops;
pub mod queues;
pub mod redrive;
pub mod topics;

use crate::dto::BatchFailureOutput;
use crate::error::{current_request_id, ApiError};
use sluice_services::BatchFailure;

/// A failed batch entry as the client sees it: an internal error's text is logged, not sent.
pub(crate) fn failure_output(failure: BatchFailure) -> BatchFailureOutput {
    let error = ApiError::Service(failure.error);
    error.log(&current_request_id());
    BatchFailureOutput {
        id: failure.id,
        code: error.code().to_owned(),
        message: error.public_message(),
    }
}
