//! `/v1/queues/{dlq}/redrive` and `/v1/redrive-tasks`: start, read, list and cancel the tasks
//! that move a dead-letter queue's messages back out (scope `queues:manage`).

use crate::auth::Scope;
use crate::caller::Caller;
use crate::dto::responses::{
    BadRequest, Forbidden, PayloadTooLarge, QueueNotFound, RateLimited, TaskNotFound,
    Unauthenticated, UnsupportedMediaType,
};
use crate::dto::{ListRedriveTasksQuery, RedriveInput, RedriveTaskList, RedriveTaskOutput};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Json, PathParams, Query, SmallLimit};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

/// Starts moving a dead-letter queue's messages (oldest first) to their source queues, or to one destination.
#[utoipa::path(post, path = "/v1/queues/{queue}/redrive", tag = "redrive", operation_id = "start_redrive",
    params(("queue" = String, Path, description = "The dead-letter queue to empty: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO queue", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body(content = Option<RedriveInput>, description = "All fields optional; an empty body moves every message back to its source queue at up to 500 per second"),
    responses(
        (status = 202, description = "Started; the task moves messages in the background", body = RedriveTaskOutput),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = QueueNotFound),
        (status = 409, description = "`Conflict`: a redrive task is already running on this queue", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 429, response = RateLimited)),
    security(("bearer" = [])))]
pub async fn start_redrive(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(queue): PathParams<String>,
    Json(input, ..): Json<RedriveInput, SmallLimit, true>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = caller.tenant_with(Scope::QueuesManage)?;
    let task = state
        .services
        .start_redrive(
            tenant,
            &queue,
            input.destination.as_deref(),
            input.max_messages_per_second,
        )
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        axum::Json(RedriveTaskOutput::from(task)),
    ))
}

/// The tenant's redrive tasks, oldest first; finished ones included.
#[utoipa::path(get, path = "/v1/redrive-tasks", tag = "redrive", operation_id = "list_redrive_tasks", params(ListRedriveTasksQuery),
    responses(
        (status = 200, description = "One page of tasks", body = RedriveTaskList),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 429, response = RateLimited)),
    security(("bearer" = [])))]
pub async fn list_redrive_tasks(
    caller: Caller,
    State(state): State<AppState>,
    Query(query): Query<ListRedriveTasksQuery>,
) -> Result<axum::Json<RedriveTaskList>, ApiError> {
    let tenant = caller.tenant_with(Scope::QueuesManage)?;
    let page = state
        .services
        .list_redrive_tasks(
            tenant,
            query.queue.as_deref(),
            query.limit,
            query.next_token.as_deref(),
        )
        .await?;
    Ok(axum::Json(RedriveTaskList {
        tasks: page.tasks.into_iter().map(Into::into).collect(),
        next_token: page.next_token,
    }))
}

/// One redrive task with its progress.
#[utoipa::path(get, path = "/v1/redrive-tasks/{id}", tag = "redrive", operation_id = "get_redrive_task",
    params(("id" = String, Path, description = "The task's id")),
    responses(
        (status = 200, description = "The task", body = RedriveTaskOutput),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TaskNotFound),
        (status = 429, response = RateLimited)),
    security(("bearer" = [])))]
pub async fn get_redrive_task(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(id): PathParams<String>,
) -> Result<axum::Json<RedriveTaskOutput>, ApiError> {
    let tenant = caller.tenant_with(Scope::QueuesManage)?;
    Ok(axum::Json(
        state.services.get_redrive_task(tenant, &id).await?.into(),
    ))
}

/// Cancels a running redrive task; the messages it moved stay moved.
#[utoipa::path(delete, path = "/v1/redrive-tasks/{id}", tag = "redrive", operation_id = "cancel_redrive_task",
    params(("id" = String, Path, description = "The task's id")),
    responses(
        (status = 204, description = "Cancelled (or already cancelled)"),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TaskNotFound),
        (status = 409, description = "`Conflict`: the task has already completed or failed", body = ErrorBody),
        (status = 429, response = RateLimited)),
    security(("bearer" = [])))]
pub async fn cancel_redrive_task(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let tenant = caller.tenant_with(Scope::QueuesManage)?;
    state.services.cancel_redrive_task(tenant, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}
