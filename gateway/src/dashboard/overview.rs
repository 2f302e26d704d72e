//! The overview: one page of the tenant's queues with their counts, dead-letter depth and a
//! sparkline of their send rate over the last hour (from the server-kept history), searched by
//! name prefix and paged with the API's own list tokens, so a page costs the same with ten
//! queues or ten thousand.

use super::history::{Span, HOUR_POINTS};
use super::layout::{self, age, count, Section};
use super::{Answer, DashState, Session};
use crate::dto::{ListQueuesQuery, Queue};
use crate::extract::{PathParams, Query as ApiQuery};
use crate::routes::queues;
use axum::extract::{Query, State};
use maud::{html, Markup};
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
                        th scope="col" { "Sent, last hour" }
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
                                td.spark {
                                    (sparkline(&state.history.columns(
                                        session.tenant.as_deref().unwrap_or_default(),
                                        &queue.name,
                                        Span::Hour,
                                        state.app.services.clock().now(),
                                    ).sent_per_second))
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

/// Width and height of a sparkline, in SVG user units.
const SPARK_WIDTH: f64 = 96.0;
const SPARK_HEIGHT: f64 = 20.0;

/// A rate series (oldest first, the newest drawn at the right edge of an hour-wide frame) as a
/// small inline SVG line over a baseline, scaled to its own peak, with its latest and peak
/// values as the accessible name; "—" when the history has no rate for the queue yet. Drawn
/// with presentation attributes only, which the dashboard's CSP allows.
fn sparkline(rates: &[Option<f64>]) -> Markup {
    let known: Vec<(usize, f64)> = rates
        .iter()
        .enumerate()
        .filter_map(|(i, rate)| rate.map(|r| (i, r.max(0.0))))
        .collect();
    let Some(&(_, latest)) = known.last() else {
        return html! { span.muted { "—" } };
    };
    let peak = known.iter().map(|&(_, r)| r).fold(0.0, f64::max);
    let baseline = SPARK_HEIGHT - 1.0;
    let slot_width = SPARK_WIDTH / (HOUR_POINTS - 1) as f64;
    // Slots counted back from the newest point, so a short history sits at the right.
    let newest = rates.len().saturating_sub(1);
    let point = |i: usize, rate: f64| {
        let x = SPARK_WIDTH - (newest - i) as f64 * slot_width;
        let y = if peak > 0.0 {
            baseline - rate / peak * (SPARK_HEIGHT - 2.0)
        } else {
            baseline
        };
        format!("{:.1},{y:.1}", x.max(0.0))
    };
    let mut line: Vec<String> = known.iter().map(|&(i, rate)| point(i, rate)).collect();
    if let [only] = line.as_slice() {
        // One point: a tick up from the baseline, so it shows.
        let x = only.split(',').next().unwrap_or("0").to_owned();
        line.insert(0, format!("{x},{baseline:.1}"));
    }
    let label = format!("sent per second over the last hour: latest {latest:.2}, peak {peak:.2}");
    html! {
        svg.sparkline role="img" aria-label=(label) width=(SPARK_WIDTH) height=(SPARK_HEIGHT)
            viewBox={ "0 0 " (SPARK_WIDTH) " " (SPARK_HEIGHT) } {
            title { (label) }
            line x1="0" y1=(baseline) x2=(SPARK_WIDTH) y2=(baseline) stroke="currentColor"
                stroke-opacity="0.25" stroke-width="1" {}
            polyline points=(line.join(" ")) fill="none" stroke="currentColor"
                stroke-width="1.5" {}
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sparklines_scale_to_their_peak_skip_gaps_and_name_their_values() {
        // 60 points span 96 units: the newest at the right edge, slots 96/59 apart.
        let svg = sparkline(&[None, Some(1.0), Some(4.0), None, Some(2.0)]).into_string();
        assert!(
            svg.contains(r#"points="91.1,14.5 92.7,1.0 96.0,10.0""#),
            "{svg}"
        );
        assert!(svg.contains("latest 2.00, peak 4.00"), "{svg}");
        // A flat zero rate lies on the baseline, not a division by zero.
        let flat = sparkline(&[Some(0.0), Some(0.0)]).into_string();
        assert!(flat.contains(r#"points="94.4,19.0 96.0,19.0""#), "{flat}");
        // One point rises from the baseline at the right edge.
        let one = sparkline(&[Some(3.0)]).into_string();
        assert!(one.contains(r#"points="96.0,19.0 96.0,1.0""#), "{one}");
        // No rate yet: a dash, no drawing.
        assert!(!sparkline(&[None, None]).into_string().contains("<svg"));
    }
}
