//! The router: every route of REST v1, the fallbacks that answer unknown routes and methods in
//! our error shape, the request-id middleware, and the OpenAPI document built from the handlers.

use crate::dto::responses;
use crate::error::{ApiError, REQUEST_ID};
use crate::routes::{admin, messages, ops, queues, redrive, topics};
use crate::state::AppState;
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Uri};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use axum::Router;
use std::sync::Arc;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};
use utoipa_swagger_ui::SwaggerUi;

/// The OpenAPI document of REST v1. Operation ids are part of the contract: generated clients
/// name their methods after them, so they are spelled out here rather than taken from the
/// handlers' names (tests/e2e/openapi.rs pins the list).
#[derive(OpenApi)]
#[openapi(
    info(
        title = "Sluice",
        description = "Multi-tenant message queues: REST API v1. Every `/v1` operation takes a \
            bearer JWT; errors answer with one JSON shape, `ErrorBody`, whose `code` is stable."
    ),
    servers((url = "/", description = "The server that serves this document")),
    paths(
        queues::put_queue, queues::patch_queue, queues::get_queue, queues::list_queues,
        queues::delete_queue, queues::purge_queue,
        messages::send, messages::send_batch, messages::receive, messages::delete_message,
        messages::delete_batch, messages::change_visibility, messages::change_visibility_batch,
        messages::peek, messages::dead_letter,
        redrive::start_redrive, redrive::list_redrive_tasks, redrive::get_redrive_task,
        redrive::cancel_redrive_task,
        topics::put_topic, topics::get_topic, topics::list_topics, topics::delete_topic,
        topics::subscribe, topics::list_subscriptions, topics::get_subscription,
        topics::patch_subscription, topics::unsubscribe, topics::publish, topics::publish_batch,
        admin::create_tenant, admin::list_tenants, admin::get_tenant, admin::update_tenant,
        admin::delete_tenant, admin::mint_token,
        admin::create_access_key, admin::list_access_keys, admin::delete_access_key,
        ops::healthz, ops::readyz, crate::metrics::render,
    ),
    components(
        schemas(crate::dto::PeekState),
        responses(
            responses::BadRequest, responses::Unauthenticated, responses::Forbidden,
            responses::QueueNotFound, responses::TenantNotFound, responses::TaskNotFound,
            responses::TopicNotFound, responses::SubscriptionNotFound,
            responses::PayloadTooLarge,
            responses::UnsupportedMediaType, responses::RateLimited,
        )
    ),
    modifiers(&BearerAuth),
    tags(
        (name = "queues", description = "Create, configure, list, purge and delete queues (scope `queues:manage`; reads also with `messages:send` or `messages:consume`)"),
        (name = "messages", description = "Send (scope `messages:send`), receive, delete, change visibility and peek (scope `messages:consume`)"),
        (name = "redrive", description = "Move a dead-letter queue's messages back to their source queues, or to another queue, at a bounded rate (scope `queues:manage`)"),
        (name = "topics", description = "Topics fanning out to one queue per subscription, with SNS filter policies: topics and subscriptions (scope `topics:manage`; reading topics also with `topics:publish`), publishing (scope `topics:publish`)"),
        (name = "admin", description = "Tenants, their quotas and AWS account ids, and tokens and AWS access keys for them (scope `admin`)"),
        (name = "operations", description = "Liveness and readiness probes, and Prometheus metrics (no auth)"),
    )
)]
pub struct ApiDoc;

struct BearerAuth;

impl Modify for BearerAuth {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .bearer_format("JWT")
                    .build(),
            ),
        );
    }
}

/// The whole application, ready to serve or to call in-process.
pub fn router(state: AppState) -> Router {
    let in_flight = state.in_flight.clone();
    let dashboard_state = state.clone();
    let api = Router::new()
        .route("/v1/queues", get(queues::list_queues))
        .route(
            "/v1/queues/{queue}",
            put(queues::put_queue)
                .patch(queues::patch_queue)
                .get(queues::get_queue)
                .delete(queues::delete_queue),
        )
        .route("/v1/queues/{queue}/purge", post(queues::purge_queue))
        .route(
            "/v1/queues/{queue}/messages",
            post(messages::send).get(messages::peek),
        )
        .route(
            "/v1/queues/{queue}/messages/batch",
            post(messages::send_batch),
        )
        .route(
            "/v1/queues/{queue}/messages/receive",
            post(messages::receive),
        )
        .route(
            "/v1/queues/{queue}/messages/delete",
            post(messages::delete_batch),
        )
        .route(
            "/v1/queues/{queue}/messages/visibility",
            post(messages::change_visibility_batch),
        )
        .route(
            "/v1/queues/{queue}/messages/{receipt_handle}",
            axum::routing::delete(messages::delete_message).patch(messages::change_visibility),
        )
        .route(
            "/v1/queues/{queue}/messages/{receipt_handle}/dead-letter",
            post(messages::dead_letter),
        )
        .route("/v1/queues/{queue}/redrive", post(redrive::start_redrive))
        .route("/v1/redrive-tasks", get(redrive::list_redrive_tasks))
        .route(
            "/v1/redrive-tasks/{id}",
            get(redrive::get_redrive_task).delete(redrive::cancel_redrive_task),
        )
        .route("/v1/topics", get(topics::list_topics))
        .route(
            "/v1/topics/{topic}",
            put(topics::put_topic)
                .get(topics::get_topic)
                .delete(topics::delete_topic),
        )
        .route(
            "/v1/topics/{topic}/subscriptions",
            post(topics::subscribe).get(topics::list_subscriptions),
        )
        .route("/v1/topics/{topic}/messages", post(topics::publish))
        .route(
            "/v1/topics/{topic}/messages/batch",
            post(topics::publish_batch),
        )
        .route(
            "/v1/subscriptions/{id}",
            get(topics::get_subscription)
                .patch(topics::patch_subscription)
                .delete(topics::unsubscribe),
        )
        .route(
            "/v1/admin/tenants",
            post(admin::create_tenant).get(admin::list_tenants),
        )
        .route(
            "/v1/admin/tenants/{id}",
            get(admin::get_tenant)
                .patch(admin::update_tenant)
                .delete(admin::delete_tenant),
        )
        .route("/v1/admin/tenants/{id}/tokens", post(admin::mint_token))
        .route(
            "/v1/admin/tenants/{id}/access-keys",
            post(admin::create_access_key).get(admin::list_access_keys),
        )
        .route(
            "/v1/admin/tenants/{id}/access-keys/{access_key_id}",
            axum::routing::delete(admin::delete_access_key),
        )
        // The AWS-compatible endpoint; requests that are not AWS ones answer as any unknown
        // route does.
        .route("/", post(crate::aws::entry).fallback(no_route))
        // SQS clients may post to a queue URL, `/{account id}/{queue}`.
        .route(
            "/{account}/{queue}",
            post(crate::aws::entry).fallback(no_route),
        )
        .route("/healthz", get(ops::healthz))
        .route("/readyz", get(ops::readyz))
        .route("/metrics", get(crate::metrics::render))
        .with_state(state);
    Router::new()
        .merge(SwaggerUi::new("/docs").url("/openapi.json", ApiDoc::openapi()))
        .merge(api)
        .merge(crate::dashboard::router(dashboard_state))
        .fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        // Keeps the body budget's charge of each request until its answer is made.
        .layer(axum::middleware::from_fn(crate::body_budget::hold))
        .layer(axum::middleware::from_fn_with_state(
            in_flight,
            bound_in_flight,
        ))
        // After the fallbacks, so unmatched requests are counted too.
        .layer(axum::middleware::from_fn(crate::metrics::track))
        .layer(tower_http::trace::TraceLayer::new_for_http())
        .layer(axum::middleware::from_fn(request_id))
}

async fn no_route(uri: Uri) -> ApiError {
    ApiError::NoRoute(uri.path().to_owned())
}

async fn method_not_allowed() -> ApiError {
    ApiError::MethodNotAllowed
}

static X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// Serves at most `max_in_flight_requests` `/v1` and AWS requests at once: one more is refused at once
/// with 503 `Unavailable` and `Retry-After` rather than queued, so overload costs the gateway
/// little. The probes and `/metrics` are never refused.
async fn bound_in_flight(
    axum::extract::State(in_flight): axum::extract::State<Arc<tokio::sync::Semaphore>>,
    request: Request,
    next: Next,
) -> Response {
    // `/` and queue URLs (`/{12-digit account id}/{queue}`) are the AWS-compatible endpoint:
    // bounded like `/v1` (SDKs retry a 503 whatever its body says).
    let path = request.uri().path();
    let queue_url = path
        .strip_prefix('/')
        .and_then(|rest| rest.split_once('/'))
        .is_some_and(|(account, queue)| {
            account.len() == 12
                && account.bytes().all(|b| b.is_ascii_digit())
                && !queue.contains('/')
        });
    if !(path.starts_with("/v1/") || path == "/" || queue_url) {
        return next.run(request).await;
    }
    match in_flight.try_acquire_owned() {
        Ok(_permit) => next.run(request).await,
        Err(_) => {
            metrics::counter!("sluice_overload_rejections_total", "reason" => "in_flight")
                .increment(1);
            ApiError::Service(sluice_services::ServiceError::Overloaded(
                "this gateway is serving its max_in_flight_requests already; retry shortly".into(),
            ))
            .into_response()
        }
    }
}

/// Echoes a caller's request id of at most 128 visible ASCII characters, otherwise makes one;
/// errors raised while serving read it from the task-local.
async fn request_id(request: Request, next: Next) -> Response {
    let id = request
        .headers()
        .get(&X_REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
    let mut response = REQUEST_ID.scope(id.clone(), next.run(request)).await;
    if let Ok(value) = HeaderValue::from_str(&id) {
        response.headers_mut().insert(X_REQUEST_ID.clone(), value);
    }
    response
}
