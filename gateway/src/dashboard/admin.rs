//! The administrator's page: tenants with their quotas and usage against them, creating a
//! tenant, minting a token for one. Everything through the `/v1/admin` handlers, so it needs
//! the `admin` scope exactly as they do.

use super::fields::Fields;
use super::layout::{self, count, csrf_field, notice, outcome, Section};
use super::{Answer, DashState, Session};
use crate::auth::Scope;
use crate::dto::{CreateTenant, MintToken, PageQuery, QuotasBody};
use crate::extract::{Json, PathParams, Query as ApiQuery};
use crate::routes::admin;
use axum::extract::{Query, State};
use axum::http::{HeaderValue, StatusCode};
use maud::html;
use serde::Deserialize;
use std::marker::PhantomData;

/// The admin page's query string.
#[derive(Deserialize, Default)]
pub(super) struct AdminQuery {
    /// The API's list token of this page.
    page: Option<String>,
}

/// The scopes a minted tenant token may carry (every one but `admin`).
const TENANT_SCOPES: [Scope; 5] = [
    Scope::QueuesManage,
    Scope::MessagesSend,
    Scope::MessagesConsume,
    Scope::TopicsManage,
    Scope::TopicsPublish,
];

fn limit(value: Option<u64>) -> String {
    value.map(count).unwrap_or_else(|| "unlimited".into())
}

/// `GET /dashboard/admin`.
pub(super) async fn page(
    session: Session,
    State(state): State<DashState>,
    Query(query): Query<AdminQuery>,
) -> Answer {
    let tenants = admin::list_tenants(
        session.caller(),
        State(state.app.clone()),
        ApiQuery(PageQuery {
            limit: Some(100),
            next_token: query.page.clone(),
        }),
    )
    .await?
    .0;
    let mut usage = Vec::with_capacity(tenants.tenants.len());
    for tenant in &tenants.tenants {
        usage.push(state.app.services.tenant_usage(&tenant.id).await.ok());
    }
    let body = html! {
        section aria-labelledby="tenants-h" {
            h2 #tenants-h { "Tenants" }
            div.table-wrap {
                table #tenants {
                    thead { tr {
                        th scope="col" { "Tenant" }
                        th.num scope="col" { "Queues (used / max)" }
                        th.num scope="col" { "Max topics" }
                        th.num scope="col" { "Requests/s (burst)" }
                        th scope="col" { "AWS account" }
                        th scope="col" { "Created" }
                    } }
                    tbody {
                        @for (tenant, used) in tenants.tenants.iter().zip(&usage) {
                            @let q = &tenant.quotas;
                            @let full = match (used, q.max_queues) { (Some(u), Some(max)) => u.queues >= max, _ => false };
                            tr {
                                th scope="row" { code { (tenant.id) } }
                                td.num.full[full] {
                                    @match used { Some(u) => (count(u.queues)), None => "?" }
                                    " / " (limit(q.max_queues))
                                    @if let (Some(u), Some(max)) = (used, q.max_queues) {
                                        " " meter min="0" max=(max.max(1)) value=(u.queues.min(max)) aria-label={ "Queues of " (tenant.id) } {}
                                    }
                                }
                                td.num { (limit(q.max_topics)) }
                                td.num {
                                    (limit(q.requests_per_second))
                                    @if let Some(burst) = q.burst { " (" (count(burst)) ")" }
                                }
                                td { code { (tenant.aws_account_id) } }
                                td { (tenant.created_at) }
                            }
                        }
                    }
                }
            }
            @if let Some(next) = &tenants.next_token {
                nav.pager aria-label="Pages" {
                    a rel="next" href={ "/dashboard/admin?page=" (form_urlencoded::byte_serialize(next.as_bytes()).collect::<String>()) } { "Next page" }
                }
            }
        }
        section aria-labelledby="mint-h" {
            h2 #mint-h { "Mint a token" }
            form.card #mint hx-post="/dashboard/admin/tokens" hx-target="#mint-result"
                method="post" action="/dashboard/admin/tokens" {
                (csrf_field(&session))
                label for="mint-tenant" { "Tenant" }
                input #mint-tenant name="tenant" required spellcheck="false" list="tenant-ids";
                datalist #tenant-ids { @for tenant in &tenants.tenants { option value=(tenant.id) {} } }
                fieldset {
                    legend { "Scopes" }
                    @for scope in TENANT_SCOPES {
                        label.check {
                            input type="checkbox" name={ "scope." (scope.as_str()) };
                            " " code { (scope.as_str()) }
                        }
                    }
                }
                label for="mint-ttl" { "Valid for (seconds, 60–31536000)" }
                input #mint-ttl name="ttl_seconds" inputmode="numeric" value="3600";
                button type="submit" { "Mint token" }
            }
            div #mint-result aria-live="polite" {}
        }
        section aria-labelledby="create-h" {
            h2 #create-h { "Create a tenant" }
            form.card hx-post="/dashboard/admin/tenants" hx-target="#create-result"
                method="post" action="/dashboard/admin/tenants" {
                (csrf_field(&session))
                label for="new-tenant" { "Tenant id (1–64 of a-z 0-9 _ -)" }
                input #new-tenant name="id" required spellcheck="false";
                label for="new-max-queues" { "Max queues (empty: unlimited)" }
                input #new-max-queues name="max_queues" inputmode="numeric";
                label for="new-rps" { "Requests per second (empty: unlimited)" }
                input #new-rps name="requests_per_second" inputmode="numeric";
                button type="submit" { "Create tenant" }
            }
            div #create-result aria-live="polite" {}
        }
    };
    Ok(layout::page(
        &session,
        Section::Admin,
        "Administration",
        body,
    ))
}

/// `POST /dashboard/admin/tenants`.
pub(super) async fn create_tenant(
    session: Session,
    State(state): State<DashState>,
    form: Fields,
) -> Answer {
    let body = CreateTenant {
        id: form.text("id").to_owned(),
        quotas: QuotasBody {
            max_queues: form.number("max_queues")?,
            requests_per_second: form.number("requests_per_second")?,
            ..QuotasBody::default()
        },
        aws_account_id: None,
    };
    let (_, tenant) = admin::create_tenant(
        session.caller(),
        State(state.app.clone()),
        Json(body, PhantomData),
    )
    .await?;
    let mut response = outcome(
        StatusCode::CREATED,
        notice(html! { "Created tenant " code { (tenant.0.id) } "." }),
    );
    response
        .headers_mut()
        .insert("hx-refresh", HeaderValue::from_static("true"));
    Ok(response)
}

/// `POST /dashboard/admin/tokens`: a token for the form's tenant, as
/// `POST /v1/admin/tenants/{id}/tokens` mints it.
pub(super) async fn mint(session: Session, State(state): State<DashState>, form: Fields) -> Answer {
    let scopes = TENANT_SCOPES
        .iter()
        .filter(|s| form.checked(&format!("scope.{}", s.as_str())))
        .map(|s| s.as_str().to_owned())
        .collect();
    let tenant = form.text("tenant").to_owned();
    let (status, minted) = admin::mint_token(
        session.caller(),
        State(state.app.clone()),
        PathParams(tenant.clone()),
        Json(
            MintToken {
                scopes,
                ttl_seconds: form.number("ttl_seconds")?,
            },
            PhantomData,
        ),
    )
    .await?;
    Ok(outcome(
        status,
        html! {
            div.alert.ok role="status" {
                p { "A token for " code { (tenant) } ", valid until " (minted.0.expires_at) ". Copy it now: it is not shown again." }
                label for="minted-token" { "Token" }
                textarea #minted-token readonly rows="3" spellcheck="false" { (minted.0.token) }
            }
        },
    ))
}
