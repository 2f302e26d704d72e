//! The overview: one page of the tenant's queues with their counts and dead-letter depth,
//! searched by name prefix and paged with the API's own list tokens, so a page costs the same
//! with ten queues or ten thousand.

use super::layout::{self, age, count, Section};
use super::{Answer, DashState, Session};
use crate::dto::{ListQueuesQuery, Queue};
use crate::extract::{PathParams, Query as ApiQuery};
use crate::routes::queues;
use axum::extract::{Query, State};
use maud::html;
use serde::Deserialize;
use std::collections::BTreeMap;

/// Queues per page.
pub(super) const PAGE_SIZE: u32 = 50;

/// The overview's query string.
#[derive(Deserialize, Default)]
pub(super) struct OverviewQuery {
    /// Only names starting with this.
    #[serde(default)]
    prefix: String,
    /// The API's list token of this page.
    page: Option<String>,
}

/// `GET /dashboard/queues`.
pub(super) async fn page(
    session: Session,
    State(state): State<DashState>,
    Query(query): Query<OverviewQuery>,
) -> Answer {
    let prefix = query.prefix.trim().to_owned();
    let list = queues::list_queues(
        session.caller(),
        State(state.app.clone()),
        ApiQuery(ListQueuesQuery {
            prefix: (!prefix.is_empty()).then(|| prefix.clone()),
            limit: Some(PAGE_SIZE),
            next_token: query.page.clone().filter(|t| !t.is_empty()),
        }),
    )
    .await?
    .0;
    let dead_letter_depths = dead_letter_depths(&session, &state, &list.queues).await;
    let next_url = list.next_token.as_ref().map(|token| {
        let mut query = form_urlencoded::Serializer::new(String::new());
        if !prefix.is_empty() {
            query.append_pair("prefix", &prefix);
        }
        query.append_pair("page", token);
        format!("/dashboard/queues?{}", query.finish())
    });
    let body = html! {
        form.search role="search" method="get" action="/dashboard/queues" {
            label for="prefix" { "Queue names starting with" }
            input #prefix type="search" name="prefix" value=(prefix) spellcheck="false"
                autocomplete="off";
            button type="submit" { "Search" }
        }
        @if list.queues.is_empty() {
            p.empty { "No queue" @if !prefix.is_empty() { " starts with " code { (prefix) } } "." }
        } @else {
            div.table-wrap {
                table #queues {
                    caption.visually-hidden { "Queues and their message counts" }
                    thead { tr {
                        th scope="col" { "Queue" }
                        th.num scope="col" { "Visible" }
                        th.num scope="col" { "In flight" }
                        th.num scope="col" { "Delayed" }
                        th.num scope="col" { "Oldest" }
                        th.num scope="col" { "Dead letters" }
                    } }
                    tbody {
                        @for queue in &list.queues {
                            tr {
                                th scope="row" {
                                    a href={ "/dashboard/queues/" (queue.name) } { (queue.name) }
                                    @if queue.kind == "fifo" { " " span.badge { "FIFO" } }
                                }
                                td.num { (count(queue.stats.visible)) }
                                td.num { (count(queue.stats.in_flight)) }
                                td.num { (count(queue.stats.delayed)) }
                                td.num { (age(queue.stats.oldest_age_seconds)) }
                                td.num {
                                    @match queue.config.redrive_policy.as_ref() {
                                        Some(policy) => {
                                            a href={ "/dashboard/queues/" (policy.dead_letter_queue) } {
                                                (dead_letter_depths.get(&policy.dead_letter_queue)
                                                    .map(|n| count(*n))
                                                    .unwrap_or_else(|| "?".into()))
                                            }
                                        }
                                        None => { "—" }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        }
        nav.pager aria-label="Pages" {
            @if query.page.is_some() {
                a href={ "/dashboard/queues" @if !prefix.is_empty() { "?prefix=" (urlencode(&prefix)) } } { "First page" }
            }
            @if let Some(next) = next_url { a rel="next" href=(next) { "Next page" } }
        }
    };
    Ok(layout::page(&session, Section::Queues, "Queues", body))
}

fn urlencode(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// The depth (visible + in flight + delayed) of each dead-letter queue the page's queues
/// name: read from the page when it holds the queue, otherwise one read each.
async fn dead_letter_depths(
    session: &Session,
    state: &DashState,
    page: &[Queue],
) -> BTreeMap<String, u64> {
    let depth = |q: &Queue| q.stats.visible + q.stats.in_flight + q.stats.delayed;
    let mut depths: BTreeMap<String, u64> = BTreeMap::new();
    for queue in page {
        let Some(policy) = &queue.config.redrive_policy else {
            continue;
        };
        let name = &policy.dead_letter_queue;
        if depths.contains_key(name) {
            continue;
        }
        if let Some(dlq) = page.iter().find(|q| &q.name == name) {
            depths.insert(name.clone(), depth(dlq));
        } else if let Ok(dlq) = queues::get_queue(
            session.caller(),
            State(state.app.clone()),
            PathParams(name.clone()),
        )
        .await
        {
            depths.insert(name.clone(), depth(&dlq.0));
        }
    }
    depths
}
