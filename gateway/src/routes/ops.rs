//! Operations endpoints (no auth): liveness and readiness.

use crate::dto::Health;
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;

/// The process is alive.
#[utoipa::path(get, path = "/healthz", tag = "operations", operation_id = "check_health",
    responses((status = 200, description = "Alive: `status` is `ok`", body = Health)),
    security(()))]
pub async fn healthz() -> axum::Json<Health> {
    axum::Json(Health {
        status: "ok".into(),
    })
}

/// The store is reachable and taking writes, and the gateway is not stopping.
#[utoipa::path(get, path = "/readyz", tag = "operations", operation_id = "check_readiness",
    responses(
        (status = 200, description = "Ready: `status` is `ok`", body = Health),
        (status = 503, description = "The store is unreachable, its disk refuses writes, or the gateway is stopping: `status` says why", body = Health)),
    security(()))]
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, axum::Json<Health>) {
    match state.services.ready().await {
        Ok(()) => (
            StatusCode::OK,
            axum::Json(Health {
                status: "ok".into(),
            }),
        ),
        Err(error) => (
            StatusCode::SERVICE_UNAVAILABLE,
            axum::Json(Health {
                status: error.to_string(),
            }),
        ),
    }
}
