//! `/v1/topics...` and `/v1/subscriptions/{id}`: topics, their subscriptions, and publishing
//! (scopes `topics:manage` and `topics:publish`).

use super::failure_output;
use crate::auth::Scope;
use crate::caller::Caller;
use crate::dto::responses::{
    BadRequest, Forbidden, PayloadTooLarge, RateLimited, SubscriptionNotFound, TopicNotFound,
    Unauthenticated, UnsupportedMediaType,
};
use crate::dto::{
    PageQuery, PublishBatch, PublishBatchOutput, PublishBatchSuccess, PublishMessage,
    PublishOutput, SubscribeInput, Subscription, SubscriptionList, SubscriptionPatchInput, Topic,
    TopicInput, TopicList,
};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{BatchLimit, Json, PathParams, PolicyLimit, Query, SendLimit, SmallLimit};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::IntoResponse;

const READ_SCOPES: [Scope; 2] = [Scope::TopicsManage, Scope::TopicsPublish];

fn created_or_ok(created: bool) -> StatusCode {
    if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    }
}

/// Creates a topic, or replaces its configuration (its subscriptions stay).
#[utoipa::path(put, path = "/v1/topics/{topic}", tag = "topics", operation_id = "put_topic",
    params(("topic" = String, Path, description = "Topic name: 1-80 of [A-Za-z0-9_-]; the suffix .fifo (counted in the 80) makes it a FIFO topic", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body(content = Option<TopicInput>, description = "All fields optional; an empty body creates a topic with the defaults"),
    responses(
        (status = 201, description = "Created", body = Topic),
        (status = 200, description = "Configuration replaced; subscriptions and `created_at` kept", body = Topic),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 429, description = "`QuotaExceeded`: the tenant owns `max_topics` topics; or `RateLimited`: the tenant's `requests_per_second` and `burst` admit no more requests for now", body = ErrorBody,
            headers(("retry-after" = u32, description = "Seconds to wait before retrying")))),
    security(("bearer" = [])))]
pub async fn put_topic(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(topic): PathParams<String>,
    Json(input, ..): Json<TopicInput, SmallLimit, true>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = caller.tenant_with(Scope::TopicsManage)?;
    let (view, created) = state
        .services
        .put_topic(tenant, &topic, input.into())
        .await?;
    Ok((created_or_ok(created), axum::Json(Topic::from(view))))
}

/// One topic.
#[utoipa::path(get, path = "/v1/topics/{topic}", tag = "topics", operation_id = "get_topic",
    params(("topic" = String, Path, description = "Topic name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    responses(
        (status = 200, description = "The topic", body = Topic),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TopicNotFound),
        (status = 429, response = RateLimited)),
    security(("bearer" = [])))]
pub async fn get_topic(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(topic): PathParams<String>,
) -> Result<axum::Json<Topic>, ApiError> {
    let tenant = caller.tenant_with_any(&READ_SCOPES)?;
    Ok(axum::Json(
        state.services.get_topic(tenant, &topic).await?.into(),
    ))
}

/// The tenant's topics, by name.
#[utoipa::path(get, path = "/v1/topics", tag = "topics", operation_id = "list_topics", params(PageQuery),
    responses(
        (status = 200, description = "One page of topics, ordered by name", body = TopicList),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 429, response = RateLimited)),
    security(("bearer" = [])))]
pub async fn list_topics(
    caller: Caller,
    State(state): State<AppState>,
    Query(query): Query<PageQuery>,
) -> Result<axum::Json<TopicList>, ApiError> {
    let tenant = caller.tenant_with_any(&READ_SCOPES)?;
    let page = state
        .services
        .list_topics(tenant, query.limit, query.next_token.as_deref())
        .await?;
    Ok(axum::Json(TopicList {
        topics: page.topics.into_iter().map(Into::into).collect(),
        next_token: page.next_token,
    }))
}

/// Deletes a topic and its subscriptions; copies already delivered stay in their queues.
#[utoipa::path(delete, path = "/v1/topics/{topic}", tag = "topics", operation_id = "delete_topic",
    params(("topic" = String, Path, description = "Topic name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    responses(
        (status = 204, description = "Deleted"),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TopicNotFound),
        (status = 429, response = RateLimited)),
    security(("bearer" = [])))]
pub async fn delete_topic(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(topic): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let tenant = caller.tenant_with(Scope::TopicsManage)?;
    state.services.delete_topic(tenant, &topic).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Subscribes a queue to the topic.
#[utoipa::path(post, path = "/v1/topics/{topic}/subscriptions", tag = "topics", operation_id = "subscribe",
    params(("topic" = String, Path, description = "Topic name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body = SubscribeInput,
    responses(
        (status = 201, description = "Subscribed", body = Subscription),
        (status = 200, description = "The queue was already subscribed with these settings: the existing subscription", body = Subscription),
        (status = 400, description = "`ValidationError` (an invalid filter policy's message starts `filter_policy:`; a queue of the other kind names `queue`) or `MalformedRequest`", body = ErrorBody),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, description = "`TopicNotFound` or `QueueNotFound`", body = ErrorBody),
        (status = 409, description = "`Conflict`: the queue is already subscribed with other settings", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 429, description = "`QuotaExceeded`: the topic has 1,000 subscriptions; or `RateLimited`", body = ErrorBody,
            headers(("retry-after" = u32, description = "Seconds to wait before retrying")))),
    security(("bearer" = [])))]
pub async fn subscribe(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(topic): PathParams<String>,
    Json(input, ..): Json<SubscribeInput, PolicyLimit>,
) -> Result<impl IntoResponse, ApiError> {
    let tenant = caller.tenant_with(Scope::TopicsManage)?;
    let (view, created) = state
        .services
        .subscribe(tenant, &topic, input.into())
        .await?;
    Ok((created_or_ok(created), axum::Json(Subscription::from(view))))
}

/// The topic's subscriptions, by id, with their counters.
#[utoipa::path(get, path = "/v1/topics/{topic}/subscriptions", tag = "topics", operation_id = "list_subscriptions",
    params(("topic" = String, Path, description = "Topic name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$"), PageQuery),
    responses(
        (status = 200, description = "One page of subscriptions", body = SubscriptionList),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TopicNotFound),
        (status = 429, response = RateLimited)),
    security(("bearer" = [])))]
pub async fn list_subscriptions(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(topic): PathParams<String>,
    Query(query): Query<PageQuery>,
) -> Result<axum::Json<SubscriptionList>, ApiError> {
    let tenant = caller.tenant_with(Scope::TopicsManage)?;
    let page = state
        .services
        .list_subscriptions(tenant, &topic, query.limit, query.next_token.as_deref())
        .await?;
    Ok(axum::Json(SubscriptionList {
        subscriptions: page.subscriptions.into_iter().map(Into::into).collect(),
        next_token: page.next_token,
    }))
}

/// One subscription with its counters.
#[utoipa::path(get, path = "/v1/subscriptions/{id}", tag = "topics", operation_id = "get_subscription",
    params(("id" = String, Path, description = "Subscription id")),
    responses(
        (status = 200, description = "The subscription", body = Subscription),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = SubscriptionNotFound),
        (status = 429, response = RateLimited)),
    security(("bearer" = [])))]
pub async fn get_subscription(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(id): PathParams<String>,
) -> Result<axum::Json<Subscription>, ApiError> {
    let tenant = caller.tenant_with(Scope::TopicsManage)?;
    Ok(axum::Json(
        state.services.get_subscription(tenant, &id).await?.into(),
    ))
}

/// Changes a subscription's filter policy, its scope, raw delivery or dead-letter queue.
#[utoipa::path(patch, path = "/v1/subscriptions/{id}", tag = "topics", operation_id = "patch_subscription",
    params(("id" = String, Path, description = "Subscription id")),
    request_body(content = Option<SubscriptionPatchInput>, description = "Only the fields to change"),
    responses(
        (status = 200, description = "The subscription with its new settings", body = Subscription),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = SubscriptionNotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 429, response = RateLimited)),
    security(("bearer" = [])))]
pub async fn patch_subscription(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(id): PathParams<String>,
    Json(input, ..): Json<SubscriptionPatchInput, PolicyLimit, true>,
) -> Result<axum::Json<Subscription>, ApiError> {
    let tenant = caller.tenant_with(Scope::TopicsManage)?;
    Ok(axum::Json(
        state
            .services
            .patch_subscription(tenant, &id, input.into())
            .await?
            .into(),
    ))
}

/// Removes a subscription; copies already delivered stay in the queue.
#[utoipa::path(delete, path = "/v1/subscriptions/{id}", tag = "topics", operation_id = "unsubscribe",
    params(("id" = String, Path, description = "Subscription id")),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = SubscriptionNotFound),
        (status = 429, response = RateLimited)),
    security(("bearer" = [])))]
pub async fn unsubscribe(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    let tenant = caller.tenant_with(Scope::TopicsManage)?;
    state.services.unsubscribe(tenant, &id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Publishes one message: answered once it is durable; every subscription whose filter policy
/// matches gets exactly one copy.
#[utoipa::path(post, path = "/v1/topics/{topic}/messages", tag = "topics", operation_id = "publish_message",
    params(("topic" = String, Path, description = "Topic name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body = PublishMessage,
    responses(
        (status = 201, description = "Published durably (also when no subscription matched)", body = PublishOutput),
        (status = 200, description = "FIFO deduplication hit: the original publication, `duplicate: true`; nothing new was delivered", body = PublishOutput),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TopicNotFound),
        (status = 413, description = "`PayloadTooLarge`: the message exceeds the server's `max_message_bytes`", body = ErrorBody),
        (status = 415, response = UnsupportedMediaType),
        (status = 429, description = "`QuotaExceeded`: the copies the matching subscriptions would get would take the tenant's stored bytes past its `max_stored_bytes` (nothing is delivered); or `RateLimited`: the tenant's `requests_per_second` and `burst` admit no more requests for now", body = ErrorBody,
            headers(("retry-after" = u32, description = "Seconds to wait before retrying")))),
    security(("bearer" = [])))]
pub async fn publish(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(topic): PathParams<String>,
    Json(message, ..): Json<PublishMessage, SendLimit>,
) -> Result<(StatusCode, axum::Json<PublishOutput>), ApiError> {
    let tenant = caller.tenant_with(Scope::TopicsPublish)?;
    let result = state
        .services
        .publish(tenant, &topic, message.into())
        .await?;
    let status = if result.duplicate {
        StatusCode::OK
    } else {
        StatusCode::CREATED
    };
    Ok((status, axum::Json(result.into())))
}

/// Publishes up to ten messages; each entry succeeds or fails on its own.
#[utoipa::path(post, path = "/v1/topics/{topic}/messages/batch", tag = "topics", operation_id = "publish_message_batch",
    params(("topic" = String, Path, description = "Topic name", pattern = r"^([A-Za-z0-9_-]{1,80}|[A-Za-z0-9_-]{1,75}\.fifo)$")),
    request_body = PublishBatch,
    responses(
        (status = 200, description = "Each entry published or refused on its own (entries are admitted against the tenant's `max_stored_bytes` in order, by the size of their copies: those past it fail with `QuotaExceeded`)", body = PublishBatchOutput),
        (status = 400, description = "`ValidationError` or `MalformedRequest`: entry count, malformed or duplicate entry ids, or an invalid body", body = ErrorBody),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TopicNotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType),
        (status = 429, response = RateLimited)),
    security(("bearer" = [])))]
pub async fn publish_batch(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(topic): PathParams<String>,
    Json(batch, ..): Json<PublishBatch, BatchLimit>,
) -> Result<axum::Json<PublishBatchOutput>, ApiError> {
    let tenant = caller.tenant_with(Scope::TopicsPublish)?;
    let entries = batch.entries.into_iter().map(Into::into).collect();
    let outcome = state
        .services
        .publish_batch(tenant, &topic, entries)
        .await?;
    Ok(axum::Json(PublishBatchOutput {
        successful: outcome
            .successful
            .into_iter()
            .map(|(id, result)| PublishBatchSuccess {
                id,
                result: result.into(),
            })
            .collect(),
        failed: outcome.failed.into_iter().map(failure_output).collect(),
    }))
}
