//! `/v1/queues` and `/v1/queues/{queue}`: create, replace, patch, read, list, delete, purge.

use crate::auth::Scope;
use crate::caller::Caller;
use crate::dto::responses::{
    BadRequest, Forbidden, PayloadTooLarge, QueueNotFound, RateLimited, Unauthenticated,
    UnsupportedMediaType,
};
use crate::dto::{ListQueuesQuery, Queue, QueueConfigInput, QueueList};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Json, PathParams, Query, SmallLimit};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

const READ_SCOPES: [Scope; 3] = [
    Scope::QueuesManage,
    Scope::MessagesSend,
    Scope::MessagesConsume,
];

/// Creates a queue, or replaces its whole configuration (omitted fields reset to defaults).
#[utoipa::path(put, path = "/v1/queues/{queue}", tag = "queues", operation_id = "put_queue",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body(content = Option<QueueConfigInput>, description = "All fields optional; an empty body creates a queue with the defaults"),
    responses(
        (status = 201, description = "Created", body = Queue),
        (status = 200, description = "Configuration replaced; messages and `created_at` kept", body = Queue),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 429, description = "`QuotaExceeded`: the tenant owns `max_queues` queues; or `RateLimited`: the tenant's `requests_per_second` and `burst` admit no more requests for now (every authenticated `/v1` request outside `/v1/admin` spends one, refused ones too)", body = ErrorBody,
            headers(("retry-after" = u32, description = "Seconds to wait before retrying")))),
    security(("bearer" = [])))]
pub async fn put_queue(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(queue): PathParams<String>,
    Json(input, ..): Json<QueueConfigInput, SmallLimit, true>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = caller.tenant_with(Scope::QueuesManage)?;
    let (view, created) = state
        .services
        .put_queue(tenant, &queue, input.into())
        .await?;
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    Ok((status, axum::Json(Queue::from(view))))
}

/// Changes only the configuration fields given.
#[utoipa::path(patch, path = "/v1/queues/{queue}", tag = "queues", operation_id = "patch_queue",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body(content = Option<QueueConfigInput>, description = "Only the fields to change"),
    responses(
        (status = 200, description = "The queue with its new configuration", body = Queue),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType)),
    security(("bearer" = [])))]
pub async fn patch_queue(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(queue): PathParams<String>,
    Json(input, ..): Json<QueueConfigInput, SmallLimit, true>,
) -> Result<axum::Json<Queue>, ApiError> {
    let tenant = caller.tenant_with(Scope::QueuesManage)?;
    let view = state
        .services
        .patch_queue(tenant, &queue, input.into())
        .await?;
    Ok(axum::Json(view.into()))
}

/// A queue with its stats.
#[utoipa::path(get, path = "/v1/queues/{queue}", tag = "queues", operation_id = "get_queue",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    responses(
        (status = 200, description = "The queue, its configuration and its message counts", body = Queue),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound)),
    security(("bearer" = [])))]
pub async fn get_queue(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(queue): PathParams<String>,
) -> Result<axum::Json<Queue>, ApiError> {
    let tenant = caller.tenant_with_any(&READ_SCOPES)?;
    Ok(axum::Json(
        state.services.get_queue(tenant, &queue).await?.into(),
    ))
}

/// The tenant's queues, by name.
#[utoipa::path(get, path = "/v1/queues", tag = "queues", operation_id = "list_queues", params(ListQueuesQuery),
    responses(
        (status = 200, description = "One page of queues, ordered by name", body = QueueList),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden)),
    security(("bearer" = [])))]
pub async fn list_queues(
    caller: Caller,
    State(state): State<AppState>,
    Query(query): Query<ListQueuesQuery>,
) -> Result<axum::Json<QueueList>, ApiError> {
    let tenant = caller.tenant_with_any(&READ_SCOPES)?;
    let page = state
        .services
        .list_queues(
            tenant,
            query.prefix.as_deref().unwrap_or(""),
            query.limit,
            query.next_token.as_deref(),
        )
        .await?;
    Ok(axum::Json(QueueList {
        queues: page.queues.into_iter().map(Queue::from).collect(),
        next_token: page.next_token,
    }))
}

/// Deletes a queue with its messages.
#[utoipa::path(delete, path = "/v1/queues/{queue}", tag = "queues", operation_id = "delete_queue",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    responses(
        (status = 204, description = "Deleted, with its messages"),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound)),
    security(("bearer" = [])))]
pub async fn delete_queue(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(queue): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let tenant = caller.tenant_with(Scope::QueuesManage)?;
    state.services.delete_queue(tenant, &queue).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Removes every message: visible, in flight and delayed.
#[utoipa::path(post, path = "/v1/queues/{queue}/purge", tag = "queues", operation_id = "purge_queue",
    params(("queue" = String, Path, description = "Queue name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    responses(
        (status = 204, description = "Purged: the queue holds no message"),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 429, response = RateLimited),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound)),
    security(("bearer" = [])))]
pub async fn purge_queue(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(queue): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let tenant = caller.tenant_with(Scope::QueuesManage)?;
    state.services.purge_queue(tenant, &queue).await?;
    Ok(StatusCode::NO_CONTENT)
}
