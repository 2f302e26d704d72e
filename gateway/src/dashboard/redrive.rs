//! The dead-letter view of a queue: its messages with their `dead_letter` reasons, starting a
//! redrive and following its progress live (SSE) to the end, cancelling it. The tasks are the
//! services' redrive tasks, read and driven exactly as `/v1/redrive-tasks` does.

use super::fields::Fields;
use super::layout::{self, count, csrf_field, outcome, Section};
use super::queue::{messages_table, peek};
use super::{Answer, DashError, DashState, Session};
use crate::auth::Scope;
use crate::dto::{ListRedriveTasksQuery, PeekState, RedriveTaskOutput};
use crate::extract::{PathParams, Query as ApiQuery};
use crate::routes::{queues, redrive};
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::sse::{Event, KeepAlive, Sse};
use futures_util::stream::{self, Stream};
use maud::{html, Markup};
use std::convert::Infallible;
use std::time::Duration;

/// How often a running task's progress refreshes.
const PROGRESS_PERIOD: Duration = Duration::from_secs(1);
/// Most ticks one progress stream lasts (an hour); htmx reconnects after.
const PROGRESS_TICKS: usize = 3600;
/// How many of the queue's latest tasks the page lists.
const TASKS_SHOWN: usize = 10;

/// One task's progress: a live block while it runs.
fn task_block(session: &Session, task: &RedriveTaskOutput) -> Markup {
    let running = task.status == "running";
    html! {
        @if running {
            div.task id={ "task-" (task.id) } hx-ext="sse" sse-connect={ "/dashboard/redrive/" (task.id) "/live" }
                sse-swap="progress" sse-close="done" aria-live="polite" {
                (task_body(session, task))
            }
        } @else {
            div.task id={ "task-" (task.id) } { (task_body(session, task)) }
        }
    }
}

fn task_body(session: &Session, task: &RedriveTaskOutput) -> Markup {
    html! {
        p {
            "Redrive " code { (task.id) } " to "
            @match &task.destination { Some(d) => code { (d) }, None => "each message's source queue" }
            ": " strong.status data-status=(task.status) { (task.status) }
        }
        progress max=(task.to_move.max(1)) value=(task.moved.min(task.to_move.max(1)))
            aria-label="Messages moved" {}
        p.progress-numbers {
            span.moved { (count(task.moved)) } " of " (count(task.to_move)) " moved"
            @if task.failed > 0 { ", " (count(task.failed)) " could not move" }
            " · at most " (task.max_messages_per_second) "/s"
            @if let Some(error) = &task.error { " · " (error) }
        }
        @if task.status == "running" {
            form hx-post={ "/dashboard/redrive/" (task.id) "/cancel" } hx-target={ "#task-" (task.id) }
                method="post" action={ "/dashboard/redrive/" (task.id) "/cancel" } {
                (csrf_field(session))
                button type="submit" { "Cancel redrive" }
            }
        }
    }
}

/// `GET /dashboard/queues/{queue}/dead-letters`.
pub(super) async fn page(
    session: Session,
    State(state): State<DashState>,
    Path(name): Path<String>,
) -> Answer {
    let queue = queues::get_queue(
        session.caller(),
        State(state.app.clone()),
        PathParams(name.clone()),
    )
    .await?
    .0;
    let peeked = peek(&session, &state, &name, PeekState::Visible, 100).await;
    let tasks = redrive::list_redrive_tasks(
        session.caller(),
        State(state.app.clone()),
        ApiQuery(ListRedriveTasksQuery {
            queue: Some(name.clone()),
            limit: Some(1000),
            next_token: None,
        }),
    )
    .await
    .map(|list| list.0.tasks);
    let body = html! {
        p.crumbs {
            a href="/dashboard/queues" { "Queues" } " / "
            a href={ "/dashboard/queues/" (queue.name) } { (queue.name) } " / dead letters"
        }
        p {
            (count(queue.stats.visible)) " visible, " (count(queue.stats.in_flight)) " in flight, "
            (count(queue.stats.delayed)) " delayed."
        }
        section aria-labelledby="redrive-h" {
            h2 #redrive-h { "Redrive" }
            form.card hx-post={ "/dashboard/queues/" (queue.name) "/redrive" } hx-target="#redrive-result"
                method="post" action={ "/dashboard/queues/" (queue.name) "/redrive" } {
                (csrf_field(&session))
                p { "Moves this queue's messages back to the queues they came from (or to one \
                     destination), at a bounded rate." }
                label for="destination" { "Destination queue (empty: each message's source queue)" }
                input #destination name="destination" spellcheck="false";
                label for="rate" { "At most messages per second (1–500, empty: 500)" }
                input #rate name="max_messages_per_second" inputmode="numeric";
                button type="submit" { "Start redrive" }
            }
            div #redrive-result {}
            @match &tasks {
                Ok(tasks) if !tasks.is_empty() => {
                    h3 { "Recent redrives" }
                    @for task in tasks.iter().rev().take(TASKS_SHOWN) { (task_block(&session, task)) }
                }
                Ok(_) => {}
                Err(error) => div.alert.error role="alert" { (error.public_message()) },
            }
        }
        section aria-labelledby="dead-h" {
            h2 #dead-h { "Messages" }
            @match &peeked {
                Ok(messages) => (messages_table(messages, true)),
                Err(DashError::Api(error)) => div.alert.error role="alert" { (error.public_message()) },
                Err(_) => {}
            }
        }
    };
    Ok(layout::page(
        &session,
        Section::Queues,
        &format!("Dead letters of {}", queue.name),
        body,
    ))
}

/// `POST /dashboard/queues/{queue}/redrive`: starts a task and answers its live block.
pub(super) async fn start(
    session: Session,
    State(state): State<DashState>,
    Path(name): Path<String>,
    form: Fields,
) -> Answer {
    // As `POST /v1/queues/{queue}/redrive` does.
    let tenant = session.caller.tenant_with(Scope::QueuesManage)?;
    let task = state
        .app
        .services
        .start_redrive(
            tenant,
            &name,
            form.optional("destination").as_deref(),
            form.number("max_messages_per_second")?,
        )
        .await?;
    let task = RedriveTaskOutput::from(task);
    Ok(outcome(StatusCode::ACCEPTED, task_block(&session, &task)))
}

/// `POST /dashboard/redrive/{id}/cancel`: answers the task's block, now cancelled.
pub(super) async fn cancel(
    session: Session,
    State(state): State<DashState>,
    Path(id): Path<String>,
) -> Answer {
    redrive::cancel_redrive_task(
        session.caller(),
        State(state.app.clone()),
        PathParams(id.clone()),
    )
    .await?;
    let task =
        redrive::get_redrive_task(session.caller(), State(state.app.clone()), PathParams(id))
            .await?
            .0;
    Ok(outcome(StatusCode::OK, task_body(&session, &task)))
}

/// `GET /dashboard/redrive/{id}/live`: the task's progress every second as the SSE event
/// `progress`, then `done` once it has ended.
pub(super) async fn live(
    session: Session,
    State(state): State<DashState>,
    Path(id): Path<String>,
) -> Result<Sse<impl Stream<Item = Result<Event, Infallible>>>, DashError> {
    let read = |session: &Session, state: &DashState, id: &str| {
        redrive::get_redrive_task(
            session.caller(),
            State(state.app.clone()),
            PathParams(id.to_owned()),
        )
    };
    let _first = read(&session, &state, &id).await?;
    let services = state.app.services.clone();
    let context = std::sync::Arc::new((session, state, id));
    // The state: the tick, and whether the task has ended (then one `done` closes the stream).
    let stream = stream::unfold((0usize, false), move |(tick, ended)| {
        let context = context.clone();
        async move {
            if ended {
                return Some((
                    Ok(Event::default().event("done").data("done")),
                    (PROGRESS_TICKS, false),
                ));
            }
            if tick >= PROGRESS_TICKS {
                return None;
            }
            if tick > 0 {
                tokio::time::sleep(PROGRESS_PERIOD).await;
            }
            let (session, state, id) = &*context;
            let (markup, ended) = match read(session, state, id).await {
                Ok(task) => (task_body(session, &task.0), task.0.status != "running"),
                Err(error) => (
                    html! { div.alert.error role="alert" { (error.public_message()) } },
                    true,
                ),
            };
            Some((
                Ok(Event::default()
                    .event("progress")
                    .data(markup.into_string())),
                (tick + 1, ended),
            ))
        }
    });
    let stream = super::until_stopping(stream, services);
    Ok(Sse::new(stream).keep_alive(KeepAlive::default()))
}
