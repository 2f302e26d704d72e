//! A queue's page: its counts (live over SSE), configuration, a peek at its messages by
//! state with bodies and attributes, and the actions on it — send a test message, purge (the
//! queue's name typed to confirm), edit settings. Every read and action goes through the REST
//! handler of the same operation.

use super::fields::Fields;
use super::history::{Columns, Point, Span};
use super::layout::{self, age, count, csrf_field, notice, outcome, Section};
use super::{Answer, DashError, DashState, Session};
use crate::dto::{
    Attribute, Message, PeekQuery, PeekState, Queue, QueueConfigInput, RedrivePolicy, SendMessage,
};
use crate::extract::{Json, PathParams, Query as ApiQuery};
use crate::routes::{messages, queues};
use axum::extract::{Path, Query, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use maud::{html, Markup};
use serde::Deserialize;
use sluice_services::ServiceError;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::marker::PhantomData;
use std::time::Duration;

/// The queue page's query string.
#[derive(Deserialize, Default)]
pub(super) struct QueueQuery {
    /// `visible` (default), `in_flight` or `delayed`.
    state: Option<String>,
    /// How many messages to peek: 1–100, default 20.
    limit: Option<u32>,
}

/// How often live numbers refresh.
pub(super) const LIVE_PERIOD: Duration = Duration::from_secs(2);
/// How long one live stream lasts; htmx reconnects after.
const LIVE_FOR: Duration = Duration::from_secs(30 * 60);

async fn read_queue(session: &Session, state: &DashState, name: &str) -> Result<Queue, DashError> {
    Ok(queues::get_queue(
        session.caller(),
        State(state.app.clone()),
        PathParams(name.to_owned()),
    )
    .await?
    .0)
}

/// Peeks at `limit` messages in `state` (a refusal, such as a token without
/// `messages:consume`, is answered as text for the section).
pub(super) async fn peek(
    session: &Session,
    state: &DashState,
    name: &str,
    peek_state: PeekState,
    limit: u32,
) -> Result<Vec<Message>, DashError> {
    Ok(messages::peek(
        session.caller(),
        State(state.app.clone()),
        PathParams(name.to_owned()),
        ApiQuery(PeekQuery {
            state: Some(peek_state),
            limit: Some(limit),
        }),
    )
    .await?
    .0
    .messages)
}

fn parse_state(text: Option<&str>) -> Result<PeekState, ServiceError> {
    match text.unwrap_or("visible") {
        "visible" => Ok(PeekState::Visible),
        "in_flight" => Ok(PeekState::InFlight),
        "delayed" => Ok(PeekState::Delayed),
        other => Err(ServiceError::invalid(
            "state",
            format!("must be visible, in_flight or delayed, got {other:?}"),
        )),
    }
}

/// The live counts block.
pub(super) fn stats_table(queue: &Queue) -> Markup {
    html! {
        dl.stats {
            div { dt { "Visible" } dd data-stat="visible" { (count(queue.stats.visible)) } }
            div { dt { "In flight" } dd data-stat="in_flight" { (count(queue.stats.in_flight)) } }
            div { dt { "Delayed" } dd data-stat="delayed" { (count(queue.stats.delayed)) } }
            div { dt { "Oldest" } dd data-stat="oldest" { (age(queue.stats.oldest_age_seconds)) } }
        }
    }
}

/// The peeked messages as a table (shared with the dead-letter view).
pub(super) fn messages_table(messages: &[Message], dead_letters: bool) -> Markup {
    html! {
        @if messages.is_empty() {
            p.empty { "No message in this state." }
        } @else {
            div.table-wrap {
                table.messages {
                    thead { tr {
                        th scope="col" { "Message" }
                        @if dead_letters {
                            th scope="col" { "Dead letter" }
                        }
                        th scope="col" { "Attributes" }
                        th scope="col" { "Body" }
                    } }
                    tbody {
                        @for message in messages {
                            tr {
                                td.meta {
                                    code.id { (message.message_id) }
                                    br;
                                    small { "sent " (message.sent_at) }
                                    br;
                                    small { "received " (message.receive_count) "×" }
                                    @if let Some(group) = &message.group_id {
                                        br; small { "group " code { (group) } }
                                    }
                                }
                                @if dead_letters {
                                    td.dead-letter {
                                        @if let Some(dead) = &message.dead_letter {
                                            span.reason { (dead.reason) }
                                            br;
                                            small { "from " a href={ "/dashboard/queues/" (dead.source_queue) } { (dead.source_queue) } }
                                            br;
                                            small { "after " (dead.receive_count) " receives, " (dead.moved_at) }
                                        } @else {
                                            "—"
                                        }
                                    }
                                }
                                td { (attributes_list(&message.attributes)) }
                                td { pre.body { (message.body) } }
                            }
                        }
                    }
                }
            }
        }
    }
}

fn attributes_list(attributes: &BTreeMap<String, Attribute>) -> Markup {
    html! {
        @if attributes.is_empty() {
            "—"
        } @else {
            dl.attributes {
                @for (name, attribute) in attributes {
                    dt { (name) " " small { "(" (attribute.data_type) ")" } }
                    dd { code { (attribute.value) } }
                }
            }
        }
    }
}

fn config_list(queue: &Queue) -> Markup {
    let c = &queue.config;
    html! {
        dl.config {
            dt { "Kind" } dd { (queue.kind) }
            dt { "Visibility timeout" } dd { (c.visibility_timeout_seconds) " s" }
            dt { "Retention" } dd { (c.message_retention_seconds) " s" }
            dt { "Delay" } dd { (c.delay_seconds) " s" }
            dt { "Receive wait" } dd { (c.receive_wait_seconds) " s" }
            dt { "Largest message" } dd { (count(c.max_message_bytes.into())) " bytes" }
            dt { "Max depth" } dd { @match c.max_depth { Some(d) => (count(d)), None => "unbounded" } }
            dt { "Dead-letter queue" }
            dd {
                @match &c.redrive_policy {
                    Some(p) => {
                        a href={ "/dashboard/queues/" (p.dead_letter_queue) "/dead-letters" } { (p.dead_letter_queue) }
                        " after " (p.max_receive_count) " receives"
                    }
                    None => "none",
                }
            }
            @if !c.tags.is_empty() {
                dt { "Tags" }
                dd { @for (k, v) in &c.tags { code { (k) "=" (v) } " " } }
            }
            dt { "Created" } dd { (queue.created_at) }
            dt { "Configured" } dd { (queue.updated_at) }
        }
    }
}

/// `GET /dashboard/queues/{queue}`.
pub(super) async fn page(
    session: Session,
    State(state): State<DashState>,
    Path(name): Path<String>,
    Query(query): Query<QueueQuery>,
) -> Answer {
    let queue = read_queue(&session, &state, &name).await?;
    if let Some(tenant) = &session.tenant {
        let now = state.app.services.clock().now();
        let totals = state.app.services.queue_activity(tenant, &queue.name);
        state
            .history
            .viewed(tenant, &queue.name, Point::of(&queue, totals, now));
        state.history.start(&state.app.services);
    }
    let peek_state = parse_state(query.state.as_deref())?;
    let limit = query.limit.unwrap_or(20);
    let peeked = peek(&session, &state, &name, peek_state, limit).await;
    let fifo = queue.kind == "fifo";
    let tab = |value: &'static str, label: &'static str, this: PeekState| {
        let current = std::mem::discriminant(&this) == std::mem::discriminant(&peek_state);
        html! {
            a href={ "/dashboard/queues/" (name) "?state=" (value) "#messages" }
                aria-current=[current.then_some("page")] { (label) }
        }
    };
    let body = html! {
        p.crumbs {
            a href="/dashboard/queues" { "Queues" } " / " (queue.name)
            " · " a href={ "/dashboard/queues/" (queue.name) "/dead-letters" } { "Dead-letter view" }
        }
        section aria-labelledby="counts-h" {
            h2 #counts-h { "Counts" }
            div #stats hx-ext="sse" sse-connect={ "/dashboard/queues/" (queue.name) "/live" } sse-swap="stats" aria-live="polite" {
                (stats_table(&queue))
            }
            div.charts {
                div.chart-controls role="group" aria-label="Chart period" {
                    button.small type="button" data-span="hour" aria-pressed="true" { "Last hour" }
                    button.small type="button" data-span="day" aria-pressed="false" { "Last day" }
                }
                div.chart #chart data-queue=(queue.name) aria-label="Counts, age of the oldest message and message rates over time" {}
            }
        }
        section aria-labelledby="config-h" {
            h2 #config-h { "Configuration" }
            (config_list(&queue))
        }
        section #messages aria-labelledby="messages-h" {
            h2 #messages-h { "Messages" }
            nav.tabs aria-label="Message state" {
                (tab("visible", "Visible", PeekState::Visible))
                (tab("in_flight", "In flight", PeekState::InFlight))
                (tab("delayed", "Delayed", PeekState::Delayed))
            }
            @match &peeked {
                Ok(messages) => (messages_table(messages, messages.iter().any(|m| m.dead_letter.is_some()))),
                Err(DashError::Api(error)) => div.alert.error role="alert" { (error.public_message()) },
                Err(_) => div.alert.error role="alert" { "Could not peek." },
            }
        }
        section aria-labelledby="send-h" {
            h2 #send-h { "Send a test message" }
            form.card hx-post={ "/dashboard/queues/" (queue.name) "/send" } hx-target="#send-result"
                method="post" action={ "/dashboard/queues/" (queue.name) "/send" } {
                (csrf_field(&session))
                label for="send-body" { "Body" }
                textarea #send-body name="body" rows="4" required spellcheck="false" {}
                label for="send-attributes" { "Attributes (JSON, optional)" }
                textarea #send-attributes name="attributes" rows="2" spellcheck="false"
                    placeholder=r#"{"color": {"type": "String", "value": "red"}}"# {}
                @if fifo {
                    label for="send-group" { "Group id" }
                    input #send-group name="group_id" required;
                    label for="send-dedup" { "Deduplication id (optional with content-based deduplication)" }
                    input #send-dedup name="deduplication_id";
                } @else {
                    label for="send-delay" { "Delay in seconds (optional)" }
                    input #send-delay name="delay_seconds" inputmode="numeric";
                }
                button type="submit" { "Send" }
                div #send-result aria-live="polite" {}
            }
        }
        section aria-labelledby="settings-h" {
            h2 #settings-h { "Settings" }
            (settings_form(&session, &queue))
        }
        section aria-labelledby="purge-h" {
            h2 #purge-h { "Purge" }
            form.card.danger hx-post={ "/dashboard/queues/" (queue.name) "/purge" } hx-target="#purge-result"
                method="post" action={ "/dashboard/queues/" (queue.name) "/purge" } {
                (csrf_field(&session))
                p { "Deletes every message of this queue: visible, in flight and delayed. This cannot be undone." }
                label for="purge-confirm" { "Type the queue name, " code { (queue.name) } ", to confirm" }
                input #purge-confirm name="confirm" autocomplete="off" spellcheck="false" required;
                button.danger type="submit" { "Purge queue" }
                div #purge-result aria-live="polite" {}
            }
        }
    };
    Ok(layout::page(&session, Section::Queues, &queue.name, body))
}

fn settings_form(session: &Session, queue: &Queue) -> Markup {
    let c = &queue.config;
    let number = |id: &'static str, label: &'static str, value: String| {
        html! {
            div.field {
                label for=(id) { (label) }
                input id=(id) name=(id) inputmode="numeric" value=(value);
            }
        }
    };
    html! {
        form.card.grid hx-post={ "/dashboard/queues/" (queue.name) "/settings" } hx-target="#settings-result"
            method="post" action={ "/dashboard/queues/" (queue.name) "/settings" } {
            (csrf_field(session))
            (number("visibility_timeout_seconds", "Visibility timeout (s)", c.visibility_timeout_seconds.to_string()))
            (number("message_retention_seconds", "Retention (s)", c.message_retention_seconds.to_string()))
            (number("delay_seconds", "Delay (s)", c.delay_seconds.to_string()))
            (number("receive_wait_seconds", "Receive wait (s)", c.receive_wait_seconds.to_string()))
            (number("max_message_bytes", "Largest message (bytes)", c.max_message_bytes.to_string()))
            (number("max_depth", "Max depth (empty: unbounded)", c.max_depth.map(|d| d.to_string()).unwrap_or_default()))
            div.field {
                label for="dead_letter_queue" { "Dead-letter queue (empty: none)" }
                input #dead_letter_queue name="dead_letter_queue" spellcheck="false"
                    value=(c.redrive_policy.as_ref().map(|p| p.dead_letter_queue.as_str()).unwrap_or(""));
            }
            (number("max_receive_count", "Receives before dead-lettering",
                c.redrive_policy.as_ref().map(|p| p.max_receive_count).unwrap_or(5).to_string()))
            div.actions {
                button type="submit" { "Save settings" }
            }
            div #settings-result aria-live="polite" {}
        }
    }
}

/// `POST /dashboard/queues/{queue}/send`.
pub(super) async fn send(
    session: Session,
    State(state): State<DashState>,
    Path(name): Path<String>,
    form: Fields,
) -> Answer {
    let message = SendMessage {
        body: form.raw("body").to_owned(),
        attributes: form.json("attributes")?,
        delay_seconds: form.number("delay_seconds")?,
        deliver_at: None,
        group_id: form.optional("group_id"),
        deduplication_id: form.optional("deduplication_id"),
    };
    let (status, sent) = messages::send(
        session.caller(),
        State(state.app.clone()),
        PathParams(name),
        Json(message, PhantomData),
    )
    .await?;
    let duplicate = if sent.0.duplicate {
        " (a duplicate: nothing new was stored)"
    } else {
        ""
    };
    Ok(outcome(
        status,
        notice(html! { "Sent message " code.sent-id { (sent.0.message_id) } (duplicate) "." }),
    ))
}

/// `POST /dashboard/queues/{queue}/purge`: only when the form repeats the queue's name.
pub(super) async fn purge(
    session: Session,
    State(state): State<DashState>,
    Path(name): Path<String>,
    form: Fields,
) -> Answer {
    if form.text("confirm") != name {
        return Err(ServiceError::invalid(
            "confirm",
            "type the queue's name exactly to confirm the purge",
        )
        .into());
    }
    queues::purge_queue(
        session.caller(),
        State(state.app.clone()),
        PathParams(name.clone()),
    )
    .await?;
    Ok(outcome(
        StatusCode::OK,
        notice(html! { "Purged " code { (name) } ": it holds no message." }),
    ))
}

/// `POST /dashboard/queues/{queue}/settings`: a PATCH of the fields of the form.
pub(super) async fn settings(
    session: Session,
    State(state): State<DashState>,
    Path(name): Path<String>,
    form: Fields,
) -> Answer {
    let redrive_policy = match form.optional("dead_letter_queue") {
        Some(dead_letter_queue) => Some(RedrivePolicy {
            dead_letter_queue,
            max_receive_count: form.number("max_receive_count")?.ok_or_else(|| {
                ServiceError::invalid("max_receive_count", "is required with a dead-letter queue")
            })?,
        }),
        None => None,
    };
    let input = QueueConfigInput {
        visibility_timeout_seconds: form.number("visibility_timeout_seconds")?,
        message_retention_seconds: form.number("message_retention_seconds")?,
        delay_seconds: form.number("delay_seconds")?,
        receive_wait_seconds: form.number("receive_wait_seconds")?,
        max_message_bytes: form.number("max_message_bytes")?,
        max_depth: Some(form.number("max_depth")?),
        redrive_policy: Some(redrive_policy),
        ..QueueConfigInput::default()
    };
    let updated = queues::patch_queue(
        session.caller(),
        State(state.app.clone()),
        PathParams(name),
        Json(input, PhantomData),
    )
    .await?
    .0;
    Ok(outcome(
        StatusCode::OK,
        notice(html! { "Saved the settings of " code { (updated.name) } "." }),
    ))
}

/// `GET /dashboard/queues/{queue}/live`: the counts block every [`LIVE_PERIOD`], as the SSE
/// event `stats`, for half an hour (htmx reconnects after).
pub(super) async fn live(
    session: Session,
    State(state): State<DashState>,
    Path(name): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, DashError> {
    // Refused at once (no stream) when the token may not read the queue.
    read_queue(&session, &state, &name).await?;
    let ticks = (LIVE_FOR.as_secs() / LIVE_PERIOD.as_secs()) as usize;
    let services = state.app.services.clone();
    let context = std::sync::Arc::new((session, state, name));
    let stream = stream::unfold(0usize, move |tick| {
        let context = context.clone();
        async move {
            if tick >= ticks {
                return None;
            }
            if tick > 0 {
                tokio::time::sleep(LIVE_PERIOD).await;
            }
            let (session, state, name) = &*context;
            let markup = match read_queue(session, state, name).await {
                Ok(queue) => {
                    if let Some(tenant) = &session.tenant {
                        let now = state.app.services.clock().now();
                        let totals = state.app.services.queue_activity(tenant, name);
                        let point = Point::of(&queue, totals, now);
                        state.history.record(tenant, name, point);
                    }
                    stats_table(&queue)
                }
                Err(DashError::Api(error)) => {
                    html! { div.alert.error role="alert" { (error.public_message()) } }
                }
                Err(_) => html! { div.alert.error role="alert" { "Signed out." } },
            };
            Some((
                Ok(Event::default().event("stats").data(markup.into_string())),
                tick + 1,
            ))
        }
    });
    let stream = super::until_stopping(stream, services);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}

/// The history's query string.
#[derive(Deserialize)]
pub(super) struct HistoryQuery {
    /// `hour` (default) or `day`.
    span: Option<String>,
}

/// `GET /dashboard/queues/{queue}/history?span=hour|day`: the recorded counts, as columns
/// for the page's chart. Authorised as the queue's own read is.
pub(super) async fn history(
    session: Session,
    State(state): State<DashState>,
    Path(name): Path<String>,
    Query(query): Query<HistoryQuery>,
) -> Result<axum::Json<Columns>, DashError> {
    let span = match query.span.as_deref().unwrap_or("hour") {
        "hour" => Span::Hour,
        "day" => Span::Day,
        other => {
            return Err(ServiceError::invalid(
                "span",
                format!("must be hour or day, got {other:?}"),
            )
            .into())
        }
    };
    let queue = read_queue(&session, &state, &name).await?;
    let tenant = session.tenant.as_deref().unwrap_or_default();
    let now = state.app.services.clock().now();
    Ok(axum::Json(state.history.columns(
        tenant,
        &queue.name,
        span,
        now,
    )))
}
