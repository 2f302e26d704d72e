//! The [`Caller`] extractor: who sent a request, read from its bearer token, and the checks
//! handlers use to demand a tenant and a scope. It also records the tenant and spends the
//! request's rate-limit token, once per request.

use crate::auth::{parse_scopes, Scope};
use crate::error::ApiError;
use crate::state::AppState;
use axum::extract::FromRequestParts;
use axum::http::{header, request::Parts};
use sluice_engine::TenantId;

/// The authenticated caller of a request.
#[derive(Debug, Clone)]
pub struct Caller {
    tenant: Option<TenantId>,
    scopes: Vec<Scope>,
}

impl Caller {
    /// The caller's tenant, if it holds any of `scopes`; 403 otherwise.
    pub fn tenant_with_any(&self, scopes: &[Scope]) -> Result<&TenantId, ApiError> {
        let tenant = self.tenant.as_ref().ok_or_else(|| {
            ApiError::Forbidden("this token names no tenant; it grants /v1/admin only".into())
        })?;
        if scopes.iter().any(|s| self.scopes.contains(s)) {
            Ok(tenant)
        } else {
            let names: Vec<&str> = scopes.iter().map(|s| s.as_str()).collect();
            Err(ApiError::Forbidden(format!(
                "this endpoint needs the scope {}",
                names.join(" or ")
            )))
        }
    }

    /// The caller's tenant, if it holds `scope`; 403 otherwise.
    pub fn tenant_with(&self, scope: Scope) -> Result<&TenantId, ApiError> {
        self.tenant_with_any(&[scope])
    }

    /// Succeeds for admin tokens; 403 otherwise.
    pub fn require_admin(&self) -> Result<(), ApiError> {
        if self.scopes.contains(&Scope::Admin) {
            Ok(())
        } else {
            Err(ApiError::Forbidden(
                "this endpoint needs the scope admin".into(),
            ))
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let header_value = parts.headers.get(header::AUTHORIZATION).ok_or_else(|| {
            ApiError::Unauthenticated("missing Authorization: Bearer <token>".into())
        })?;
        let token = header_value
            .to_str()
            .ok()
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .map(str::trim)
            .ok_or_else(|| {
                ApiError::Unauthenticated(
                    "the Authorization header must be 'Bearer <token>'".into(),
                )
            })?;
        let claims = state.auth.verify(token)?;
        let scopes = parse_scopes(&claims.scope);
        let tenant = match claims.tenant.as_deref() {
            Some(id) => Some(TenantId::parse(id).map_err(|e| {
                ApiError::Unauthenticated(format!("the token's tenant claim is invalid: {e}"))
            })?),
            None => None,
        };
        if tenant.is_none() && !scopes.contains(&Scope::Admin) {
            return Err(ApiError::Unauthenticated(
                "the token has neither a tenant claim nor the admin scope".into(),
            ));
        }
        if let Some(tenant) = &tenant {
            let quotas = state.services.ensure_tenant(tenant, claims.iat).await?;
            // Once per request, now that a tenant is known (a bad token spends nothing) and
            // before the handler looks at anything else, so refused requests spend a token
            // too. The admin API is never limited, whatever the token names.
            if !is_admin_path(parts.uri.path()) {
                state.services.admit_request(tenant, &quotas).await?;
            }
        }
        Ok(Caller { tenant, scopes })
    }
}

/// Whether `path` is under `/v1/admin`, which tenants' rate limits do not apply to.
fn is_admin_path(path: &str) -> bool {
    path.strip_prefix("/v1/admin")
        .is_some_and(|rest| rest.is_empty() || rest.starts_with('/'))
}
