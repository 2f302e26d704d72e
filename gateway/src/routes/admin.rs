//! `/v1/admin/*`: tenants, token minting and AWS access keys (scope `admin`).

use crate::auth::Scope;
use crate::caller::Caller;
use crate::dto::responses::{
    BadRequest, Forbidden, PayloadTooLarge, TenantNotFound, Unauthenticated, UnsupportedMediaType,
};
use crate::dto::{
    rfc3339, AccessKeyCreated, AccessKeyList, AccessKeySummary, CreateAccessKey, CreateTenant,
    MintToken, MintedToken, PageQuery, Tenant, TenantList, UpdateTenant,
};
use crate::error::{ApiError, ErrorBody};
use crate::extract::{Json, PathParams, Query};
use crate::state::AppState;
use axum::extract::State;
use axum::http::StatusCode;
use rand::Rng;
use sluice_services::{ServiceError, TenantPage};

/// Creates a tenant.
#[utoipa::path(post, path = "/v1/admin/tenants", tag = "admin", operation_id = "create_tenant", request_body = CreateTenant,
    responses(
        (status = 201, description = "Created", body = Tenant),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 409, description = "`Conflict`: a tenant with this id exists, or another tenant has this `aws_account_id`", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType)),
    security(("bearer" = [])))]
pub async fn create_tenant(
    caller: Caller,
    State(state): State<AppState>,
    Json(body, ..): Json<CreateTenant>,
) -> Result<(StatusCode, axum::Json<Tenant>), ApiError> {
    caller.require_admin()?;
    let (record, account) = state
        .services
        .create_tenant_with_account(&body.id, body.quotas.into(), body.aws_account_id.as_deref())
        .await?;
    Ok((
        StatusCode::CREATED,
        axum::Json(Tenant::new(record, account)),
    ))
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
    let TenantPage {
        tenants: records,
        next_token,
    } = state
        .services
        .list_tenants(query.limit, query.next_token.as_deref())
        .await?;
    let mut tenants = Vec::with_capacity(records.len());
    for record in records {
        tenants.push(tenant_view(&state, record).await?);
    }
    Ok(axum::Json(TenantList {
        tenants,
        next_token,
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
    let record = state.services.get_tenant(&id).await?;
    Ok(axum::Json(tenant_view(&state, record).await?))
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
    let record = state
        .services
        .update_tenant(&id, body.quotas.into())
        .await?;
    Ok(axum::Json(tenant_view(&state, record).await?))
}

/// Deletes a tenant and all its resources.
#[utoipa::path(delete, path = "/v1/admin/tenants/{id}", tag = "admin", operation_id = "delete_tenant",
    params(("id" = String, Path, description = "Tenant id: 1-64 of [a-z0-9_-]", pattern = "^[a-z0-9_-]{1,64}$")),
    responses(
        (status = 204, description = "Deleted, with its queues, messages, topics and access keys; its AWS account id is released"),
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
    let scopes = parse_scopes(&body.scopes, "a minted token")?;
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

/// The tenant as answered: its record and its AWS account id (assigned now to a tenant that
/// has none yet, such as one only tokens named).
async fn tenant_view(
    state: &AppState,
    record: sluice_engine::TenantRecord,
) -> Result<Tenant, ApiError> {
    let account = state.services.tenant_account_id(&record.id).await?;
    Ok(Tenant::new(record, account))
}

/// Parses the scopes a token or access key is to carry: at least one, known, never `admin`
/// (`what` names the credential in the message).
fn parse_scopes(names: &[String], what: &str) -> Result<Vec<Scope>, ApiError> {
    let mut scopes = Vec::new();
    for (index, name) in names.iter().enumerate() {
        let field = format!("scopes[{index}]");
        match Scope::parse(name) {
            Some(Scope::Admin) => {
                return Err(
                    ServiceError::invalid(field, format!("{what} cannot carry admin")).into(),
                )
            }
            Some(scope) => {
                if !scopes.contains(&scope) {
                    scopes.push(scope);
                }
            }
            None => {
                return Err(ServiceError::invalid(field, format!("unknown scope {name:?}")).into())
            }
        }
    }
    if scopes.is_empty() {
        return Err(ServiceError::invalid("scopes", "name at least one scope").into());
    }
    Ok(scopes)
}

/// `count` characters drawn uniformly from `alphabet`.
fn random_chars(alphabet: &[u8], count: usize) -> String {
    let mut rng = rand::thread_rng();
    (0..count)
        .map(|_| alphabet[rng.gen_range(0..alphabet.len())] as char)
        .collect()
}

/// A new key id shaped like AWS's: `AKIA` and 16 of `[A-Z2-7]`.
fn new_access_key_id() -> String {
    format!(
        "AKIA{}",
        random_chars(b"ABCDEFGHIJKLMNOPQRSTUVWXYZ234567", 16)
    )
}

/// A new secret shaped like AWS's: 40 of `[A-Za-z0-9+/]` (240 random bits).
fn new_secret() -> String {
    random_chars(
        b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/",
        40,
    )
}

/// Creates an AWS access key for a tenant, or imports a known pair (never with `admin`).
#[utoipa::path(post, path = "/v1/admin/tenants/{id}/access-keys", tag = "admin", operation_id = "create_access_key",
    params(("id" = String, Path, description = "Tenant id: 1-64 of [a-z0-9_-]", pattern = "^[a-z0-9_-]{1,64}$")), request_body = CreateAccessKey,
    responses(
        (status = 201, description = "The key with its secret; the secret is stored (SigV4 verification needs it) but never shown again", body = AccessKeyCreated),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TenantNotFound),
        (status = 409, description = "`Conflict`: a key with this id exists, or the tenant holds 100 keys", body = ErrorBody),
        (status = 413, response = PayloadTooLarge),
        (status = 415, response = UnsupportedMediaType)),
    security(("bearer" = [])))]
pub async fn create_access_key(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(id): PathParams<String>,
    Json(body, ..): Json<CreateAccessKey>,
) -> Result<(StatusCode, axum::Json<AccessKeyCreated>), ApiError> {
    caller.require_admin()?;
    let scopes = parse_scopes(&body.scopes, "an access key")?;
    let (key_id, secret) = match (body.access_key_id, body.secret_access_key) {
        (Some(key_id), Some(secret)) => (key_id, secret),
        (None, None) => (new_access_key_id(), new_secret()),
        (Some(_), None) => {
            return Err(ServiceError::invalid(
                "secret_access_key",
                "is required with access_key_id (both import a known pair; neither makes a new one)",
            )
            .into())
        }
        (None, Some(_)) => {
            return Err(ServiceError::invalid(
                "access_key_id",
                "is required with secret_access_key (both import a known pair; neither makes a new one)",
            )
            .into())
        }
    };
    let key = state
        .services
        .create_access_key(
            &id,
            &key_id,
            &secret,
            scopes.iter().map(|s| s.as_str().to_owned()).collect(),
        )
        .await?;
    Ok((StatusCode::CREATED, axum::Json(key.into())))
}

/// Lists a tenant's AWS access keys, without their secrets.
#[utoipa::path(get, path = "/v1/admin/tenants/{id}/access-keys", tag = "admin", operation_id = "list_access_keys",
    params(("id" = String, Path, description = "Tenant id: 1-64 of [a-z0-9_-]", pattern = "^[a-z0-9_-]{1,64}$")),
    responses(
        (status = 200, description = "The tenant's keys by id, without secrets", body = AccessKeyList),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, response = TenantNotFound)),
    security(("bearer" = [])))]
pub async fn list_access_keys(
    caller: Caller,
    State(state): State<AppState>,
    PathParams(id): PathParams<String>,
) -> Result<axum::Json<AccessKeyList>, ApiError> {
    caller.require_admin()?;
    let keys = state.services.list_access_keys(&id).await?;
    Ok(axum::Json(AccessKeyList {
        access_keys: keys.into_iter().map(AccessKeySummary::from).collect(),
    }))
}

/// Revokes one of a tenant's AWS access keys.
#[utoipa::path(delete, path = "/v1/admin/tenants/{id}/access-keys/{access_key_id}", tag = "admin", operation_id = "delete_access_key",
    params(
        ("id" = String, Path, description = "Tenant id: 1-64 of [a-z0-9_-]", pattern = "^[a-z0-9_-]{1,64}$"),
        ("access_key_id" = String, Path, description = "The key id")),
    responses(
        (status = 204, description = "Revoked: requests signed with it now answer `InvalidClientTokenId`"),
        (status = 400, response = BadRequest),
        (status = 401, response = Unauthenticated),
        (status = 403, response = Forbidden),
        (status = 404, description = "`AccessKeyNotFound`: the tenant holds no key with this id", body = ErrorBody)),
    security(("bearer" = [])))]
pub async fn delete_access_key(
    caller: Caller,
    State(state): State<AppState>,
    PathParams((id, key_id)): PathParams<(String, String)>,
) -> Result<StatusCode, ApiError> {
    caller.require_admin()?;
    state.services.delete_access_key(&id, &key_id).await?;
    Ok(StatusCode::NO_CONTENT)
}
