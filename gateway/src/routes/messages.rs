//! `/v1/queues/{queue}/messages...`: send, receive, delete, change visibility, peek.

use super::failure_output;
use crate::auth::{Caller, Scope};
use crate::dto::{
    BatchOutput, BatchSuccess, DeleteBatch, Message, MessageList, PeekQuery, PeekState,
    ReceiveInput, SendBatch, SendBatchOutput, SendBatchSuccess, SendMessage, SendOutput,
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
#[utoipa::path(post, path = "/v1/queues/{queue}/messages", tag = "messages",
    params(("queue" = String, Path, description = "Queue name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body = SendMessage,
    responses((status = 201, body = SendOutput),
        (status = 200, description = "FIFO deduplication hit: the original message, `duplicate: true`", body = SendOutput), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 413, description = "The message exceeds the queue's max_message_bytes", body = ErrorBody),
        (status = 415, body = ErrorBody),
        (status = 429, description = "QueueFull: the queue holds max_depth messages", body = ErrorBody)),
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
#[utoipa::path(post, path = "/v1/queues/{queue}/messages/batch", tag = "messages",
    params(("queue" = String, Path, description = "Queue name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body = SendBatch,
    responses((status = 415, description = "The body is not application/json", body = ErrorBody), (status = 200, body = SendBatchOutput),
        (status = 400, description = "Malformed batch: entry count, malformed or duplicate ids", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 413, body = ErrorBody)),
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
#[utoipa::path(post, path = "/v1/queues/{queue}/messages/receive", tag = "messages",
    params(("queue" = String, Path, description = "Queue name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body(content = Option<ReceiveInput>, description = "All fields optional; an empty body receives one message"),
    responses((status = 415, description = "The body is not application/json", body = ErrorBody), (status = 200, body = MessageList), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
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
#[utoipa::path(delete, path = "/v1/queues/{queue}/messages/{receipt_handle}", tag = "messages",
    params(("queue" = String, Path, description = "Queue name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$"),
        ("receipt_handle" = String, Path, description = "From a receive")),
    responses((status = 204, description = "Deleted"),
        (status = 400, description = "ReceiptHandleInvalid", body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 410, description = "ReceiptHandleStale: the message was delivered again", body = ErrorBody)),
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

/// Deletes up to ten messages; each entry succeeds or fails on its own.
#[utoipa::path(post, path = "/v1/queues/{queue}/messages/delete", tag = "messages",
    params(("queue" = String, Path, description = "Queue name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body = DeleteBatch,
    responses((status = 415, description = "The body is not application/json", body = ErrorBody), (status = 200, body = BatchOutput), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
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
#[utoipa::path(patch, path = "/v1/queues/{queue}/messages/{receipt_handle}", tag = "messages",
    params(("queue" = String, Path, description = "Queue name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$"),
        ("receipt_handle" = String, Path, description = "From a receive")),
    request_body = VisibilityInput,
    responses((status = 415, description = "The body is not application/json", body = ErrorBody), (status = 204, description = "Changed"), (status = 400, body = ErrorBody),
        (status = 401, body = ErrorBody), (status = 403, body = ErrorBody), (status = 404, body = ErrorBody),
        (status = 410, description = "ReceiptHandleStale", body = ErrorBody)),
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
#[utoipa::path(post, path = "/v1/queues/{queue}/messages/visibility", tag = "messages",
    params(("queue" = String, Path, description = "Queue name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body = VisibilityBatch,
    responses((status = 415, description = "The body is not application/json", body = ErrorBody), (status = 200, body = BatchOutput), (status = 400, body = ErrorBody), (status = 401, body = ErrorBody),
        (status = 403, body = ErrorBody), (status = 404, body = ErrorBody)),
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
#[utoipa::path(get, path = "/v1/queues/{queue}/messages", tag = "messages",
    params(("queue" = String, Path, description = "Queue name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$"), PeekQuery),
    responses((status = 200, description = "Messages without receipt handles", body = MessageList),
        (status = 400, body = ErrorBody), (status = 401, body = ErrorBody), (status = 403, body = ErrorBody),
        (status = 404, body = ErrorBody)),
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
