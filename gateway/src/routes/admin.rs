//! `/v1/admin/*`: tenants and token minting (scope `admin`).

use crate::auth::Scope;
use crate::caller::Caller;
use crate::dto::responses::{
    BadRequest, Forbidden, PayloadTooLarge, TenantNotFound, Unauthenticated, UnsupportedMediaType,
};
use crate::dto::{
    rfc3339, CreateTenant, MintToken, MintedToken, PageQuery, Tenant, TenantList, UpdateTenant,
};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Json, PathParams, Query};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use sluice_services::ServiceError;

/// Creates a tenant.
#[utoipa::path(post, path = "/v1/admin/tenants", tag = "admin", operation_id = "create_tenant", request_body = CreateTenant,
    responses(
        (status = 201, description = "Created", body = Tenant),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 409, description = "`Conflict`: a tenant with this id exists", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType)),
    security(("bearer" = [])))]
pub async fn create_tenant(
    caller: Caller,
    State(state): State<AppState>,
    Json(body, ..): Json<CreateTenant>,
) -> Result<(StatusCode, axum::Json<Tenant>), ApiError> {
    caller.require_admin()?;
    let record = state
        .services
        .create_tenant(&body.id, body.quotas.into())
        .await?;
    Ok((StatusCode::CREATED, axum::Json(record.into())))
}

/// Lists tenants by id, including tenants only tokens have named.
#[utoipa::path(get, path = "/v1/admin/tenants", tag = "admin", operation_id = "list_tenants", params(PageQuery),
    responses(
        (status = 200, description = "One page of tenants, ordered by id", body = TenantList),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden)),
    security(("bearer" = [])))]
pub async fn list_tenants(
    caller: Caller,
    State(state): State<AppState>,
    Query(query): Query<PageQuery>,
) -> Result<axum::Json<TenantList>, ApiError> {
    caller.require_admin()?;
    let page = state
        .services
        .list_tenants(query.limit, query.next_token.as_deref())
        .await?;
    Ok(axum::Json(TenantList {
        tenants: page.tenants.into_iter().map(Tenant::from).collect(),
        next_token: page.next_token,
    }))
}

/// One tenant.
#[utoipa::path(get, path = "/v1/admin/tenants/{id}", tag = "admin", operation_id = "get_tenant",
    params(("id" = String, Path, description = "Tenant id: 1-64 of [a-z0-9_-]", pattern = "^[a-z0-9_-]{1,64}$")),
    responses(
        (status = 200, description = "The tenant", body = Tenant),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TenantNotFound)),
    security(("bearer" = [])))]
pub async fn get_tenant(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(id): PathParams<String>,
) -> Result<axum::Json<Tenant>, ApiError> {
    caller.require_admin()?;
    Ok(axum::Json(state.services.get_tenant(&id).await?.into()))
}

/// Replaces a tenant's quotas.
#[utoipa::path(patch, path = "/v1/admin/tenants/{id}", tag = "admin", operation_id = "update_tenant",
    params(("id" = String, Path, description = "Tenant id: 1-64 of [a-z0-9_-]", pattern = "^[a-z0-9_-]{1,64}$")), request_body = UpdateTenant,
    responses(
        (status = 200, description = "The tenant with its new quotas", body = Tenant),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TenantNotFound),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType)),
    security(("bearer" = [])))]
pub async fn update_tenant(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(id): PathParams<String>,
    Json(body, ..): Json<UpdateTenant>,
) -> Result<axum::Json<Tenant>, ApiError> {
    caller.require_admin()?;
    Ok(axum::Json(
        state
            .services
            .update_tenant(&id, body.quotas.into())
            .await?
            .into(),
    ))
}

/// Deletes a tenant and all its resources.
#[utoipa::path(delete, path = "/v1/admin/tenants/{id}", tag = "admin", operation_id = "delete_tenant",
    params(("id" = String, Path, description = "Tenant id: 1-64 of [a-z0-9_-]", pattern = "^[a-z0-9_-]{1,64}$")),
    responses(
        (status = 204, description = "Deleted, with its queues and messages"),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TenantNotFound)),
    security(("bearer" = [])))]
pub async fn delete_tenant(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(id): PathParams<String>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    state.services.delete_tenant(&id).await?;
    Ok(StatusCode::NO_CONTENT)
}

/// Mints a token for a tenant (never with `admin`).
#[utoipa::path(post, path = "/v1/admin/tenants/{id}/tokens", tag = "admin", operation_id = "mint_tenant_token",
    params(("id" = String, Path, description = "Tenant id: 1-64 of [a-z0-9_-]", pattern = "^[a-z0-9_-]{1,64}$")), request_body = MintToken,
    responses(
        (status = 201, description = "The token; it is not stored and cannot be shown again", body = MintedToken),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TenantNotFound),
        (status = 409, description = "`Conflict`: this server verifies tokens with a public key and holds no signing key", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType)),
    security(("bearer" = [])))]
pub async fn mint_token(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(id): PathParams<String>,
    Json(body, ..): Json<MintToken>,
) -> Result<(StatusCode, axum::Json<MintedToken>), ApiError> {
    caller.require_admin()?;
    let tenant = state.services.get_tenant(&id).await?;
    let mut scopes = Vec::new();
    for (index, name) in body.scopes.iter().enumerate() {
        let field = format!("scopes[{index}]");
        match Scope::parse(name) {
            Some(Scope::Admin) => {
                return Err(
                    ServiceError::invalid(field, "a minted token cannot carry admin").into(),
                )
            }
            Some(scope) => scopes.push(scope),
            None => {
                return Err(ServiceError::invalid(field, format!("unknown scope {name:?}")).into())
            }
        }
    }
    if scopes.is_empty() {
        return Err(ServiceError::invalid("scopes", "name at least one scope").into());
    }
    let ttl = body.ttl_seconds.unwrap_or(3600);
    if !(60..=31_536_000).contains(&ttl) {
        return Err(ServiceError::invalid(
            "ttl_seconds",
            format!("must be between 60 and 31536000, got {ttl}"),
        )
        .into());
    }
    if !state.auth.can_mint() {
        return Err(ServiceError::Conflict(
            "this server verifies tokens with a public key and holds no signing key".into(),
        )
        .into());
    }
    let mut now_seconds = state.services.clock().now() / 1000;
    // A tenant deleted within this second refuses tokens issued in it (token times are whole
    // seconds): issue this one at the next second, so a tenant re-created and given a token
    // right after a deletion can use it at once.
    if let Some(first) = state.services.first_valid_issue_second(&tenant.id).await? {
        now_seconds = now_seconds.max(first);
    }
    let token = state
        .auth
        .mint(Some(&tenant.id), &scopes, now_seconds, ttl)
        .map_err(ServiceError::Internal)?;
    Ok((
        StatusCode::CREATED,
        axum::Json(MintedToken {
            token,
            expires_at: rfc3339((now_seconds + ttl) * 1000),
        }),
    ))
}
