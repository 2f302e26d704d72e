//! Topics: the tenant's topics, one topic's subscriptions with their counters, subscribing and
//! unsubscribing, and the filter-policy tester — a pasted message matched against every
//! subscription's policy by the same filter library publishing uses, with the reason a
//! subscription does not match.

use super::fields::Fields;
use super::layout::{self, count, csrf_field, notice, outcome, Section};
use super::{Answer, DashError, DashState, Session};
use crate::auth::Scope;
use crate::dto::{Attribute, FilterPolicyScope, PageQuery, SubscribeInput, Subscription};
use crate::extract::{PathParams, Query as ApiQuery};
use crate::routes::topics;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode};
use axum::response::Response;
use maud::{html, Markup};
use sluice_filter::{AttributeValue, FilterPolicy, FilterScope};
use sluice_services::ServiceError;
use std::collections::BTreeMap;

/// `GET /dashboard/topics`.
pub(super) async fn list(session: Session, State(state): State<DashState>) -> Answer {
    let topics = topics::list_topics(
        session.caller(),
        State(state.app.clone()),
        ApiQuery(PageQuery {
            limit: Some(1000),
            next_token: None,
        }),
    )
    .await?
    .0;
    let body = html! {
        @if topics.topics.is_empty() {
            p.empty { "No topic yet." }
        } @else {
            div.table-wrap {
                table #topics {
                    thead { tr {
                        th scope="col" { "Topic" }
                        th scope="col" { "Kind" }
                        th.num scope="col" { "Subscriptions" }
                        th scope="col" { "Created" }
                    } }
                    tbody {
                        @for topic in &topics.topics {
                            tr {
                                th scope="row" { a href={ "/dashboard/topics/" (topic.name) } { (topic.name) } }
                                td { (topic.kind) }
                                td.num { (count(topic.subscription_count as u64)) }
                                td { (topic.created_at) }
                            }
                        }
                    }
                }
            }
            @if topics.next_token.is_some() {
                p { "Showing the first 1,000 topics." }
            }
        }
    };
    Ok(layout::page(&session, Section::Topics, "Topics", body))
}

async fn subscriptions(
    session: &Session,
    state: &DashState,
    topic: &str,
) -> Result<Vec<Subscription>, DashError> {
    Ok(topics::list_subscriptions(
        session.caller(),
        State(state.app.clone()),
        PathParams(topic.to_owned()),
        ApiQuery(PageQuery {
            limit: Some(1000),
            next_token: None,
        }),
    )
    .await?
    .0
    .subscriptions)
}

fn scope_name(scope: FilterPolicyScope) -> &'static str {
    match scope {
        FilterPolicyScope::Attributes => "attributes",
        FilterPolicyScope::Body => "body",
    }
}

fn subscriptions_table(session: &Session, subscriptions: &[Subscription]) -> Markup {
    html! {
        div #subscriptions {
            @if subscriptions.is_empty() {
                p.empty { "No subscription." }
            } @else {
                div.table-wrap {
                    table.subscriptions {
                        thead { tr {
                            th scope="col" { "Subscription" }
                            th scope="col" { "Queue" }
                            th scope="col" { "Filter policy" }
                            th.num scope="col" { "Delivered" }
                            th.num scope="col" { "Filtered out" }
                            th.num scope="col" { "Failed" }
                            th scope="col" { span.visually-hidden { "Actions" } }
                        } }
                        tbody {
                            @for s in subscriptions {
                                tr {
                                    th scope="row" { code { (s.id) } @if s.raw_delivery { " " span.badge { "raw" } } }
                                    td { a href={ "/dashboard/queues/" (s.queue) } { (s.queue) } }
                                    td {
                                        @match &s.filter_policy {
                                            Some(policy) => {
                                                small { "on " (scope_name(s.filter_policy_scope)) }
                                                code.policy { (policy) }
                                            }
                                            None => "every message",
                                        }
                                    }
                                    td.num { (count(s.stats.delivered)) }
                                    td.num { (count(s.stats.filtered_out)) }
                                    td.num { (count(s.stats.failed)) }
                                    td {
                                        form hx-post={ "/dashboard/subscriptions/" (s.id) "/delete" } hx-target="#subscribe-result"
                                            method="post" action={ "/dashboard/subscriptions/" (s.id) "/delete" } {
                                            (csrf_field(session))
                                            button.small type="submit" aria-label={ "Remove subscription " (s.id) } { "Remove" }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `GET /dashboard/topics/{topic}`.
pub(super) async fn page(
    session: Session,
    State(state): State<DashState>,
    Path(name): Path<String>,
) -> Answer {
    let topic = topics::get_topic(
        session.caller(),
        State(state.app.clone()),
        PathParams(name.clone()),
    )
    .await?
    .0;
    let subscriptions = subscriptions(&session, &state, &name).await;
    let body = html! {
        p.crumbs { a href="/dashboard/topics" { "Topics" } " / " (topic.name) " (" (topic.kind) ")" }
        section aria-labelledby="subs-h" {
            h2 #subs-h { "Subscriptions" }
            @match &subscriptions {
                Ok(list) => (subscriptions_table(&session, list)),
                Err(DashError::Api(error)) => div.alert.error role="alert" { (error.public_message()) },
                Err(_) => {}
            }
            div #subscribe-result aria-live="polite" {}
        }
        section aria-labelledby="sub-h" {
            h2 #sub-h { "Subscribe a queue" }
            form.card hx-post={ "/dashboard/topics/" (topic.name) "/subscribe" } hx-target="#subscribe-result"
                method="post" action={ "/dashboard/topics/" (topic.name) "/subscribe" } {
                (csrf_field(&session))
                label for="sub-queue" { "Queue" }
                input #sub-queue name="queue" required spellcheck="false";
                label for="sub-policy" { "Filter policy (JSON, empty: every message)" }
                textarea #sub-policy name="filter_policy" rows="3" spellcheck="false"
                    placeholder=r#"{"color": ["red", "blue"]}"# {}
                label for="sub-scope" { "Policy applies to" }
                select #sub-scope name="filter_policy_scope" {
                    option value="attributes" { "message attributes" }
                    option value="body" { "message body (JSON)" }
                }
                label.check { input type="checkbox" name="raw_delivery"; " Raw delivery (no envelope)" }
                label for="sub-dlq" { "Dead-letter queue (optional)" }
                input #sub-dlq name="dead_letter_queue" spellcheck="false";
                button type="submit" { "Subscribe" }
            }
        }
        section aria-labelledby="test-h" {
            h2 #test-h { "Test filter policies" }
            form.card hx-post={ "/dashboard/topics/" (topic.name) "/test" } hx-target="#test-result"
                method="post" action={ "/dashboard/topics/" (topic.name) "/test" } {
                (csrf_field(&session))
                p { "Paste a message: each subscription says whether it would receive it, and why not. Nothing is published." }
                label for="test-body" { "Body" }
                textarea #test-body name="body" rows="4" spellcheck="false" {}
                label for="test-attributes" { "Attributes (JSON, optional)" }
                textarea #test-attributes name="attributes" rows="3" spellcheck="false"
                    placeholder=r#"{"color": {"type": "String", "value": "red"}}"# {}
                button type="submit" { "Test" }
            }
            div #test-result aria-live="polite" {}
        }
    };
    Ok(layout::page(&session, Section::Topics, &topic.name, body))
}

/// Answers `fragment` and has htmx reload the page's subscriptions (`HX-Refresh`), so the
/// table shows the change.
fn changed(fragment: Markup) -> Response {
    let mut response = outcome(StatusCode::OK, fragment);
    response
        .headers_mut()
        .insert("hx-refresh", HeaderValue::from_static("true"));
    response
}

/// `POST /dashboard/topics/{topic}/subscribe`.
pub(super) async fn subscribe(
    session: Session,
    State(state): State<DashState>,
    Path(topic): Path<String>,
    form: Fields,
) -> Answer {
    let scope = match form.text("filter_policy_scope") {
        "" | "attributes" => FilterPolicyScope::Attributes,
        "body" => FilterPolicyScope::Body,
        other => {
            return Err(ServiceError::invalid(
                "filter_policy_scope",
                format!("must be attributes or body, got {other:?}"),
            )
            .into())
        }
    };
    let input = SubscribeInput {
        queue: form.text("queue").to_owned(),
        filter_policy: form.json("filter_policy")?,
        filter_policy_scope: Some(scope),
        raw_delivery: Some(form.checked("raw_delivery")),
        dead_letter_queue: form.optional("dead_letter_queue"),
    };
    // As `POST /v1/topics/{topic}/subscriptions` does.
    let tenant = session.caller.tenant_with(Scope::TopicsManage)?;
    let (view, _) = state
        .app
        .services
        .subscribe(tenant, &topic, input.into())
        .await?;
    Ok(changed(notice(
        html! { "Subscribed " code { (view.queue) } " as " code { (view.id) } "." },
    )))
}

/// `POST /dashboard/subscriptions/{id}/delete`.
pub(super) async fn unsubscribe(
    session: Session,
    State(state): State<DashState>,
    Path(id): Path<String>,
) -> Answer {
    topics::unsubscribe(
        session.caller(),
        State(state.app.clone()),
        PathParams(id.clone()),
    )
    .await?;
    Ok(changed(notice(
        html! { "Removed subscription " code { (id) } "." },
    )))
}

/// Whether `subscription` would receive a message, and why not: the subscription's policy
/// compiled for its scope and matched as publishing matches it (a body that is not JSON
/// matches no body-scope policy).
fn explain(
    subscription: &Subscription,
    body: &str,
    attributes: &BTreeMap<String, AttributeValue>,
) -> Result<(), String> {
    let Some(policy) = &subscription.filter_policy else {
        return Ok(());
    };
    let scope = match subscription.filter_policy_scope {
        FilterPolicyScope::Attributes => FilterScope::Attributes,
        FilterPolicyScope::Body => FilterScope::Body,
    };
    let policy = FilterPolicy::parse(policy, scope).map_err(|e| e.to_string())?;
    match scope {
        FilterScope::Attributes => policy.explain_attributes(attributes),
        FilterScope::Body => policy.explain_body(body),
    }
    .map_err(|mismatch| mismatch.to_string())
}

/// `POST /dashboard/topics/{topic}/test`: matches the pasted message against every
/// subscription; publishes nothing.
pub(super) async fn test_policy(
    session: Session,
    State(state): State<DashState>,
    Path(topic): Path<String>,
    form: Fields,
) -> Answer {
    let attributes: BTreeMap<String, Attribute> = form.json("attributes")?.unwrap_or_default();
    let attributes: BTreeMap<String, AttributeValue> = attributes
        .into_iter()
        .map(|(name, a)| (name, AttributeValue::new(a.data_type, a.value)))
        .collect();
    let body = form.raw("body");
    let subscriptions = subscriptions(&session, &state, &topic).await?;
    let fragment = html! {
        @if subscriptions.is_empty() {
            p.empty { "The topic has no subscription." }
        } @else {
            table.results {
                thead { tr { th scope="col" { "Subscription" } th scope="col" { "Queue" } th scope="col" { "Result" } } }
                tbody {
                    @for s in &subscriptions {
                        @let result = explain(s, body, &attributes);
                        tr data-subscription=(s.id) {
                            th scope="row" { code { (s.id) } }
                            td { (s.queue) }
                            @match result {
                                Ok(()) => td.match { "✓ matches" },
                                Err(why) => td.nomatch { "✗ no match: " (why) },
                            }
                        }
                    }
                }
            }
        }
    };
    Ok(outcome(StatusCode::OK, fragment))
}
