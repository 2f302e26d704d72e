//! `/v1/queues/{queue}/messages...`: send, receive, delete, change visibility, peek.

use super::failure_output;
use crate::auth::Scope;
use crate::caller::Caller;
use crate::dto::responses::{
    BadRequest, Forbidden, PayloadTooLarge, QueueNotFound, RateLimited, Unauthenticated,
    UnsupportedMediaType,
};
use crate::dto::{
    BatchOutput, BatchSuccess, DeadLetterInput, DeleteBatch, Message, MessageList, PeekQuery,
    PeekState, ReceiveInput, SendBatch, SendBatchOutput, SendBatchSuccess, SendMessage, SendOutput,
    VisibilityBatch, VisibilityInput,
};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{BatchLimit, Json, PathParams, Query, SendLimit, SmallLimit};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use sluice_engine::MessageState;
use sluice_services::{BatchOutcome, ChangeVisibilityEntry, DeleteEntry, ReceiveRequest};

/// Sends one message; answered once it is durable.
#[utoipa::path(post, path = "/v1/queues/{queue}/messages", tag = "messages", operation_id = "send_message",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body = SendMessage,
    responses(
        (status = 201, description = "Stored durably", body = SendOutput),
        (status = 200, description = "FIFO deduplication hit: the original message, `duplicate: true`; nothing was stored", body = SendOutput),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound),
        (status = 413, description = "`PayloadTooLarge`: the message exceeds the queue's `max_message_bytes`, or the body what this operation reads", body = ErrorBody),
        (status = 415, response = UnsupportedMediaType),
        (status = 429, description = "`QueueFull`: the queue holds `max_depth` messages; or `QuotaExceeded`: the message would take the tenant's stored bytes past its `max_stored_bytes`; or `RateLimited`: the tenant's `requests_per_second` and `burst` admit no more requests for now (every authenticated `/v1` request outside `/v1/admin` spends one, refused ones too)", body = ErrorBody,
            headers(("retry-after" = u32, description = "Seconds to wait before retrying")))),
    security(("bearer" = [])))]
pub async fn send(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(queue): PathParams<String>,
    Json(message, ..): Json<SendMessage, SendLimit>,
) -> Result<(StatusCode, axum::Json<SendOutput>), ApiError> {
    let tenant = caller.tenant_with(Scope::MessagesSend)?;
    let result = state.services.send(tenant, &queue, message.into()).await?;
    // A FIFO deduplication hit is not a creation: 200 with the original message.
    let status = if result.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, axum::Json(result.into())))
}

/// Sends up to ten messages; each entry succeeds or fails on its own.
#[utoipa::path(post, path = "/v1/queues/{queue}/messages/batch", tag = "messages", operation_id = "send_message_batch",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body = SendBatch,
    responses(
        (status = 200, description = "Each entry stored or refused on its own (entries are admitted against the tenant's `max_stored_bytes` in order: those past it fail with `QuotaExceeded`)", body = SendBatchOutput),
        (status = 400, description = "`ValidationError` or `MalformedRequest`: entry count, malformed or duplicate entry ids, or an invalid body", body = ErrorBody),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType)),
    security(("bearer" = [])))]
pub async fn send_batch(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(queue): PathParams<String>,
    Json(batch, ..): Json<SendBatch, BatchLimit>,
) -> Result<axum::Json<SendBatchOutput>, ApiError> {
    let tenant = caller.tenant_with(Scope::MessagesSend)?;
    let entries = batch.entries.into_iter().map(Into::into).collect();
    let outcome = state.services.send_batch(tenant, &queue, entries).await?;
    Ok(axum::Json(SendBatchOutput {
        successful: outcome
            .successful
            .into_iter()
            .map(|(id, result)| SendBatchSuccess {
                id,
                result: result.into(),
            })
            .collect(),
        failed: outcome.failed.into_iter().map(failure_output).collect(),
    }))
}

/// Receives up to `max_messages`, long-polling up to `wait_seconds`.
#[utoipa::path(post, path = "/v1/queues/{queue}/messages/receive", tag = "messages", operation_id = "receive_messages",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body(content = Option<ReceiveInput>, description = "All fields optional; an empty body receives one message"),
    responses(
        (status = 200, description = "The messages received (possibly none), each with its receipt handle", body = MessageList),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType)),
    security(("bearer" = [])))]
pub async fn receive(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(queue): PathParams<String>,
    Json(input, ..): Json<ReceiveInput, SmallLimit, true>,
) -> Result<axum::Json<MessageList>, ApiError> {
    let tenant = caller.tenant_with(Scope::MessagesConsume)?;
    let request = ReceiveRequest {
        max_messages: input.max_messages,
        visibility_timeout_seconds: input.visibility_timeout_seconds,
        wait_seconds: input.wait_seconds,
        request_attempt_id: input.request_attempt_id,
    };
    let messages = state.services.receive(tenant, &queue, request).await?;
    Ok(axum::Json(MessageList {
        messages: messages.into_iter().map(Message::from).collect(),
    }))
}

/// Deletes a message by receipt handle. Deleting an already deleted message with its latest
/// handle answers 204, so retries are safe.
#[utoipa::path(delete, path = "/v1/queues/{queue}/messages/{receipt_handle}", tag = "messages", operation_id = "delete_message",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$"), ("receipt_handle" = String, Path, description = "The receipt handle of the latest receive of the message")),
    responses(
        (status = 204, description = "Deleted (or already deleted with this handle)"),
        (status = 400, description = "`ReceiptHandleInvalid` or `ValidationError`: the handle or queue name is malformed, or names another queue", body = ErrorBody),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound),
        (status = 410, description = "`ReceiptHandleStale`: the message was delivered again; delete with the newer handle", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_message(
    caller: Caller,
    State(state): State<AppState>,
    PathParams((queue, handle)): PathParams<(String, String)>,
) -> Result<StatusCode, ApiError> {
    let tenant = caller.tenant_with(Scope::MessagesConsume)?;
    state
        .services
        .delete_message(tenant, &queue, &handle)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

fn batch_output(outcome: BatchOutcome<()>) -> BatchOutput {
    BatchOutput {
        successful: outcome
            .successful
            .into_iter()
            .map(|(id, ())| BatchSuccess { id })
            .collect(),
        failed: outcome.failed.into_iter().map(failure_output).collect(),
    }
}

/// Moves a received message to the queue's dead-letter queue at once, with a reason: a
/// permanent failure needs no more retries.
#[utoipa::path(post, path = "/v1/queues/{queue}/messages/{receipt_handle}/dead-letter", tag = "messages", operation_id = "dead_letter_message",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$"), ("receipt_handle" = String, Path, description = "The receipt handle of the latest receive of the message")),
    request_body = DeadLetterInput,
    responses(
        (status = 204, description = "Moved: the message is now in the dead-letter queue, with `dead_letter.reason` set"),
        (status = 400, description = "`ReceiptHandleInvalid`, `ValidationError` or `MalformedRequest`: the handle, queue name or reason is invalid", body = ErrorBody),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound),
        (status = 409, description = "`Conflict`: the queue has no `redrive_policy` (or its dead-letter queue is gone)", body = ErrorBody),
        (status = 410, description = "`ReceiptHandleStale`: the message was delivered again, or is already gone", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType)),
    security(("bearer" = [])))]
pub async fn dead_letter(
    caller: Caller,
    State(state): State<AppState>,
    PathParams((queue, handle)): PathParams<(String, String)>,
    Json(input, ..): Json<DeadLetterInput>,
) -> Result<StatusCode, ApiError> {
    let tenant = caller.tenant_with(Scope::MessagesConsume)?;
    state
        .services
        .dead_letter_message(tenant, &queue, &handle, &input.reason)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Deletes up to ten messages; each entry succeeds or fails on its own.
#[utoipa::path(post, path = "/v1/queues/{queue}/messages/delete", tag = "messages", operation_id = "delete_message_batch",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body = DeleteBatch,
    responses(
        (status = 200, description = "Each entry deleted or refused on its own", body = BatchOutput),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType)),
    security(("bearer" = [])))]
pub async fn delete_batch(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(queue): PathParams<String>,
    Json(batch, ..): Json<DeleteBatch>,
) -> Result<axum::Json<BatchOutput>, ApiError> {
    let tenant = caller.tenant_with(Scope::MessagesConsume)?;
    let entries = batch
        .entries
        .into_iter()
        .map(|e| DeleteEntry {
            id: e.id,
            receipt_handle: e.receipt_handle,
        })
        .collect();
    let outcome = state.services.delete_batch(tenant, &queue, entries).await?;
    Ok(axum::Json(batch_output(outcome)))
}

/// Changes a message's visibility timeout; 0 makes it visible now.
#[utoipa::path(patch, path = "/v1/queues/{queue}/messages/{receipt_handle}", tag = "messages", operation_id = "change_message_visibility",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$"), ("receipt_handle" = String, Path, description = "The receipt handle of the latest receive of the message")),
    request_body = VisibilityInput,
    responses(
        (status = 204, description = "Changed"),
        (status = 400, description = "`ReceiptHandleInvalid`, `ValidationError` or `MalformedRequest`: the handle, queue name or body is invalid", body = ErrorBody),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound),
        (status = 410, description = "`ReceiptHandleStale`: the message was delivered again", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType)),
    security(("bearer" = [])))]
pub async fn change_visibility(
    caller: Caller,
    State(state): State<AppState>,
    PathParams((queue, handle)): PathParams<(String, String)>,
    Json(input, ..): Json<VisibilityInput>,
) -> Result<StatusCode, ApiError> {
    let tenant = caller.tenant_with(Scope::MessagesConsume)?;
    state
        .services
        .change_visibility(tenant, &queue, &handle, input.visibility_timeout_seconds)
        .await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Changes up to ten messages' visibility; each entry succeeds or fails on its own.
#[utoipa::path(post, path = "/v1/queues/{queue}/messages/visibility", tag = "messages", operation_id = "change_message_visibility_batch",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body = VisibilityBatch,
    responses(
        (status = 200, description = "Each entry changed or refused on its own", body = BatchOutput),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType)),
    security(("bearer" = [])))]
pub async fn change_visibility_batch(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(queue): PathParams<String>,
    Json(batch, ..): Json<VisibilityBatch>,
) -> Result<axum::Json<BatchOutput>, ApiError> {
    let tenant = caller.tenant_with(Scope::MessagesConsume)?;
    let entries = batch
        .entries
        .into_iter()
        .map(|e| ChangeVisibilityEntry {
            id: e.id,
            receipt_handle: e.receipt_handle,
            visibility_timeout_seconds: e.visibility_timeout_seconds,
        })
        .collect();
    let outcome = state
        .services
        .change_visibility_batch(tenant, &queue, entries)
        .await?;
    Ok(axum::Json(batch_output(outcome)))
}

/// Shows messages in one state without receiving them: nothing changes.
#[utoipa::path(get, path = "/v1/queues/{queue}/messages", tag = "messages", operation_id = "peek_messages",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$"), PeekQuery),
    responses(
        (status = 200, description = "Messages in the state asked for, without receipt handles", body = MessageList),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound)),
    security(("bearer" = [])))]
pub async fn peek(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(queue): PathParams<String>,
    Query(query): Query<PeekQuery>,
) -> Result<axum::Json<MessageList>, ApiError> {
    let tenant = caller.tenant_with(Scope::MessagesConsume)?;
    let message_state = match query.state.unwrap_or(PeekState::Visible) {
        PeekState::Visible => MessageState::Visible,
        PeekState::InFlight => MessageState::InFlight,
        PeekState::Delayed => MessageState::Delayed,
    };
    let messages = state
        .services
        .peek(tenant, &queue, message_state, query.limit)
        .await?;
    Ok(axum::Json(MessageList {
        messages: messages.into_iter().map(Message::from).collect(),
    }))
}
