//! Redrive tasks: moving a dead-letter queue's messages back to their source queues (or to one
//! named queue) at a bounded rate, with progress, cancellation, one running task per DLQ, and
//! restart safety — run once across every gateway that shares the store.
//!
//! A task is a record in the engine's [`Records`](sluice_engine::Records) (kind
//! `redrive-task`, key `<tenant>/<id>`); a second record (kind `redrive-running`, key
//! `<tenant>/<dlq>`) exists while it runs and is what makes a second task on the same DLQ a
//! conflict, and what the background job walks to find work. Every change to a task is a
//! compare-and-set on its version, so a cancel racing with progress, or two gateways, never
//! overwrite each other.
//!
//! The background job ([`Services::advance_redrive_tasks`]) runs a round every
//! [`ROUND_PERIOD`]. For each running task it holds or can take the *lease* of (the task names
//! the gateway working on it until `lease_until`; a lease that ran out is free), one round
//! moves the next messages in seq order — the order they arrived in the DLQ — up to the task's
//! token bucket (`max_messages_per_second`, refilled from the time since its last round, at
//! most one second's worth), then writes the progress and renews the lease in one CAS; a
//! gateway taking a free lease first writes it alone, by CAS, so that only one of several
//! gateways finding it free at once moves anything. Only
//! messages that were in the DLQ when the task started are moved (their seqs are at most the
//! queue's last seq then); messages that arrive later stay.
//!
//! Crash safety: each move is the engine's atomic transfer, so a message is in exactly one
//! queue whatever happens. A crash between a round's moves and its progress write loses only
//! the count: the next round (here or on another gateway, once the lease runs out) starts from
//! the recorded position, finds the moved messages gone and skips them, so `moved` may end
//! lower than what actually moved, never higher.

use crate::queues::{decode_page_token, encode_page_token, page_limit, parse_queue_name};
use crate::{ServiceError, Services};
use serde::{Deserialize, Serialize};
use sluice_engine::{Millis, QueueKey, QueueName, Record, RedriveOutcome, TenantId};
use std::time::Duration;

/// How often the background job runs a round of every task.
pub const ROUND_PERIOD: Duration = Duration::from_millis(100);

/// How long a gateway keeps a task after its last round before another may take it over.
const LEASE_MS: Millis = 5_000;

/// The default and highest rate a task may ask for, in messages per second.
const MAX_RATE: u32 = 500;

const TASK_KIND: &str = "redrive-task";
const RUNNING_KIND: &str = "redrive-running";
const TOKEN_PREFIX: &str = "r1:";

/// Where a redrive task stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RedriveStatus {
    /// Moving messages.
    Running,
    /// Everything that was in the DLQ at the start has been moved or counted as failed.
    Completed,
    /// Stopped by a caller; what moved stays moved.
    Cancelled,
    /// Stopped by an error (the DLQ went away); see `error`.
    Failed,
}

/// A redrive task as stored and as answered.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RedriveTask {
    /// Opaque, URL-safe; sorts by start time.
    pub id: String,
    /// The dead-letter queue it empties.
    pub source: QueueName,
    /// Where messages go; `None`: each message's `dead_letter.source_queue`.
    pub destination: Option<QueueName>,
    /// Where it stands.
    pub status: RedriveStatus,
    /// Messages moved so far.
    pub moved: u64,
    /// Messages that could not move (their destination is gone); they stay in the DLQ.
    pub failed: u64,
    /// The DLQ's depth when the task started.
    pub to_move: u64,
    /// The rate limit.
    pub max_messages_per_second: u32,
    /// When it started.
    pub started_at: Millis,
    /// When it ended.
    pub finished_at: Option<Millis>,
    /// Why it failed.
    pub error: Option<String>,
    /// Progress: every seq up to this one has been dealt with.
    cursor: u64,
    /// The DLQ's last seq at the start: later arrivals are not this task's.
    last_seq: u64,
    /// Unspent moves of the rate limit, and when it was last refilled.
    tokens: f64,
    refilled_at: Millis,
    /// The gateway working on it, until when.
    lease_owner: Option<String>,
    lease_until: Millis,
}

/// One page of tasks.
#[derive(Debug, Clone)]
pub struct RedriveTaskPage {
    /// The tasks, oldest first.
    pub tasks: Vec<RedriveTask>,
    /// Where the next page starts.
    pub next_token: Option<String>,
}

fn task_key(tenant: &TenantId, id: &str) -> String {
    format!("{tenant}/{id}")
}

fn running_key(tenant: &TenantId, dlq: &QueueName) -> String {
    format!("{tenant}/{dlq}")
}

fn decode(value: &str) -> Result<RedriveTask, ServiceError> {
    serde_json::from_str(value)
        .map_err(|e| ServiceError::Internal(format!("unreadable redrive task record: {e}")))
}

fn encode(task: &RedriveTask) -> Result<String, ServiceError> {
    serde_json::to_string(task)
        .map_err(|e| ServiceError::Internal(format!("redrive task record: {e}")))
}

fn parse_tenant_key(key: &str) -> Option<(TenantId, &str)> {
    let (tenant, rest) = key.split_once('/')?;
    Some((TenantId::parse(tenant).ok()?, rest))
}

impl Services {
    /// Starts moving the DLQ `queue`'s messages to `destination` (default: each message's
    /// source queue) at most `max_messages_per_second` (1–500, default 500). A missing queue
    /// or destination is `QueueNotFound`; a destination of the other kind, a validation error
    /// naming `destination`; a task already running on this DLQ, a `Conflict`.
    pub async fn start_redrive(
        &self,
        tenant: &TenantId,
        queue: &str,
        destination: Option<&str>,
        max_messages_per_second: Option<u32>,
    ) -> Result<RedriveTask, ServiceError> {
        let source = parse_queue_name(queue)?;
        let rate = max_messages_per_second.unwrap_or(MAX_RATE);
        crate::validate::in_range("max_messages_per_second", rate.into(), 1, MAX_RATE.into())?;
        let destination = match destination {
            Some(name) => {
                let name = QueueName::parse(name)
                    .map_err(|e| ServiceError::invalid("destination", e.0))?;
                if name.is_fifo() != source.is_fifo() {
                    return Err(ServiceError::invalid(
                        "destination",
                        "must be of the dead-letter queue's kind (FIFO to FIFO, standard to standard)",
                    ));
                }
                if name == source {
                    return Err(ServiceError::invalid(
                        "destination",
                        "names the dead-letter queue itself",
                    ));
                }
                Some(name)
            }
            None => None,
        };
        let now = self.clock.now();
        let key = QueueKey::new(tenant.clone(), source.clone());
        let info = self
            .engine
            .get_queue(&key, now)
            .await?
            .ok_or(ServiceError::QueueNotFound)?;
        if let Some(name) = &destination {
            let destination_key = QueueKey::new(tenant.clone(), name.clone());
            if self.engine.queue_config(&destination_key).await?.is_none() {
                return Err(ServiceError::QueueNotFound);
            }
        }
        let scan = self.engine.message_seqs(&key, 0, 0).await?;
        let id = format!(
            "{now:013}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..12]
        );
        let running = running_key(tenant, &source);
        let claimed = self
            .engine
            .put_record(RUNNING_KIND, &running, id.clone(), None)
            .await?;
        if claimed.is_none() {
            return Err(ServiceError::Conflict(format!(
                "a redrive task is already running on {source}; cancel it or wait for it to end"
            )));
        }
        let stats = info.stats;
        let task = RedriveTask {
            id: id.clone(),
            source,
            destination,
            status: RedriveStatus::Running,
            moved: 0,
            failed: 0,
            to_move: stats.visible + stats.in_flight + stats.delayed,
            max_messages_per_second: rate,
            started_at: now,
            finished_at: None,
            error: None,
            cursor: 0,
            last_seq: scan.last_seq,
            tokens: 0.0,
            refilled_at: now,
            lease_owner: None,
            lease_until: 0,
        };
        let stored = self
            .engine
            .put_record(TASK_KIND, &task_key(tenant, &id), encode(&task)?, None)
            .await;
        if !matches!(stored, Ok(Some(_))) {
            // Without its task the guard would block the DLQ for good.
            self.release_running(tenant, &task).await;
            stored?;
            return Err(ServiceError::Internal("the task id was taken".into()));
        }
        Ok(task)
    }

    /// One task of the tenant; `TaskNotFound` if there is none with that id.
    pub async fn get_redrive_task(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<RedriveTask, ServiceError> {
        Ok(self.read_task(tenant, id).await?.0)
    }

    /// A page of the tenant's tasks, oldest first; with `queue`, only that DLQ's.
    pub async fn list_redrive_tasks(
        &self,
        tenant: &TenantId,
        queue: Option<&str>,
        limit: Option<u32>,
        next_token: Option<&str>,
    ) -> Result<RedriveTaskPage, ServiceError> {
        let limit = page_limit(limit)?;
        let queue = queue.map(parse_queue_name).transpose()?;
        let mut after = match next_token {
            Some(token) => Some(task_key(tenant, &decode_page_token(TOKEN_PREFIX, token)?)),
            None => None,
        };
        let prefix = format!("{tenant}/");
        let mut tasks = Vec::new();
        // Filtering by queue may drop a whole page; read on until the page is full or the
        // records end.
        loop {
            let page = self
                .engine
                .list_records(TASK_KIND, &prefix, after.as_deref(), limit + 1)
                .await?;
            let exhausted = page.len() <= limit;
            after = page.last().map(|(key, _)| key.clone());
            for (_, record) in page {
                let task = decode(&record.value)?;
                if queue.as_ref().is_none_or(|q| *q == task.source) {
                    tasks.push(task);
                }
            }
            if tasks.len() > limit || exhausted {
                break;
            }
        }
        let more = tasks.len() > limit;
        tasks.truncate(limit);
        let next_token = match (more, tasks.last()) {
            (true, Some(last)) => Some(encode_page_token(TOKEN_PREFIX, &last.id)),
            _ => None,
        };
        Ok(RedriveTaskPage { tasks, next_token })
    }

    /// Cancels a running task (messages moved so far stay moved). Cancelling a cancelled task
    /// again succeeds; one that completed or failed is a `Conflict`.
    pub async fn cancel_redrive_task(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<(), ServiceError> {
        loop {
            let (mut task, version) = self.read_task(tenant, id).await?;
            match task.status {
                RedriveStatus::Cancelled => return Ok(()),
                RedriveStatus::Completed | RedriveStatus::Failed => {
                    return Err(ServiceError::Conflict(format!(
                        "the task has already ended ({})",
                        if task.status == RedriveStatus::Completed {
                            "completed"
                        } else {
                            "failed"
                        }
                    )))
                }
                RedriveStatus::Running => {}
            }
            task.status = RedriveStatus::Cancelled;
            task.finished_at = Some(self.clock.now());
            if self.write_task(tenant, &task, version).await? {
                self.release_running(tenant, &task).await;
                return Ok(());
            }
            // Progress was written meanwhile: look again.
        }
    }

    /// One round of the redrive job: every running task this gateway holds or can take the
    /// lease of moves its next messages. What the background job runs every
    /// [`ROUND_PERIOD`]; public so that tests can drive it under a manual clock.
    pub async fn advance_redrive_tasks(&self) -> Result<(), ServiceError> {
        let mut after: Option<String> = None;
        let mut first_error = None;
        loop {
            let running = self
                .engine
                .list_records(RUNNING_KIND, "", after.as_deref(), 100)
                .await?;
            let done = running.len() < 100;
            after = running.last().map(|(key, _)| key.clone());
            for (key, record) in running {
                let Some((tenant, _)) = parse_tenant_key(&key) else {
                    continue;
                };
                // One task's failure must not hold up the others.
                if let Err(error) = self.advance_task(&tenant, &key, &record).await {
                    tracing::warn!(task = %record.value, %error, "redrive task round failed");
                    first_error.get_or_insert(error);
                }
            }
            if done {
                break;
            }
        }
        first_error.map_or(Ok(()), Err)
    }

    async fn advance_task(
        &self,
        tenant: &TenantId,
        guard_key: &str,
        guard: &Record,
    ) -> Result<(), ServiceError> {
        let id = guard.value.as_str();
        let (mut task, version) = match self.read_task(tenant, id).await {
            Ok(found) => found,
            // A guard whose task record never landed (a crash between the two writes of a
            // start) would block its DLQ for good.
            Err(ServiceError::TaskNotFound) => {
                self.engine
                    .delete_record(RUNNING_KIND, guard_key, guard.version)
                    .await?;
                return Ok(());
            }
            Err(other) => return Err(other),
        };
        let now = self.clock.now();
        if task.status != RedriveStatus::Running {
            // Ended, but the guard outlived it (a crash between the two writes).
            self.release_running(tenant, &task).await;
            return Ok(());
        }
        let me = self.instance_id.as_str();
        let held_by_other = task
            .lease_owner
            .as_deref()
            .is_some_and(|owner| owner != me && task.lease_until > now);
        if held_by_other {
            return Ok(());
        }
        let mut version = version;
        if task.lease_owner.as_deref() != Some(me) || task.lease_until <= now {
            // Take a free lease before moving anything: two gateways that both found it free
            // would otherwise both move the task's next messages, and the one whose progress
            // write then loses the compare-and-set would drop its count.
            task.lease_owner = Some(me.to_owned());
            task.lease_until = now + LEASE_MS;
            if !self.write_task(tenant, &task, version).await? {
                return Ok(());
            }
            version += 1;
        }
        let elapsed = now.saturating_sub(task.refilled_at) as f64 / 1000.0;
        let rate = f64::from(task.max_messages_per_second);
        task.tokens = (task.tokens + elapsed * rate).min(rate);
        task.refilled_at = now;
        let budget = task.tokens.floor() as usize;
        let key = QueueKey::new(tenant.clone(), task.source.clone());
        if budget > 0 {
            match self.engine.message_seqs(&key, task.cursor, budget).await {
                Ok(scan) => {
                    let seqs: Vec<u64> = scan
                        .seqs
                        .into_iter()
                        .filter(|&seq| seq <= task.last_seq)
                        .collect();
                    if !seqs.is_empty() {
                        let outcomes = self
                            .engine
                            .redrive(&key, &seqs, task.destination.as_ref(), now)
                            .await?;
                        for outcome in &outcomes {
                            match outcome {
                                RedriveOutcome::Moved => task.moved += 1,
                                RedriveOutcome::DestinationMissing => task.failed += 1,
                                RedriveOutcome::Gone => {}
                            }
                        }
                        task.tokens -= outcomes.len() as f64;
                    }
                    let reached = seqs.last().copied().unwrap_or(scan.scanned_to);
                    task.cursor = reached.max(task.cursor);
                    if scan.scanned_to >= task.last_seq
                        || task.cursor >= task.last_seq
                        || (seqs.is_empty() && scan.scanned_to >= scan.last_seq)
                    {
                        task.status = RedriveStatus::Completed;
                        task.finished_at = Some(now);
                    }
                }
                Err(sluice_engine::EngineError::QueueNotFound) => {
                    task.status = RedriveStatus::Failed;
                    task.finished_at = Some(now);
                    task.error = Some(format!("the dead-letter queue {} was deleted", task.source));
                }
                Err(other) => return Err(other.into()),
            }
        }
        task.lease_owner = Some(me.to_owned());
        task.lease_until = now + LEASE_MS;
        if self.write_task(tenant, &task, version).await? && task.status != RedriveStatus::Running {
            self.release_running(tenant, &task).await;
        }
        Ok(())
    }

    /// Writes `task` over the stored `version`; `false` (nothing written) if it changed since.
    async fn write_task(
        &self,
        tenant: &TenantId,
        task: &RedriveTask,
        version: u64,
    ) -> Result<bool, ServiceError> {
        let written = self
            .engine
            .put_record(
                TASK_KIND,
                &task_key(tenant, &task.id),
                encode(task)?,
                Some(version),
            )
            .await?;
        Ok(written.is_some())
    }

    async fn read_task(
        &self,
        tenant: &TenantId,
        id: &str,
    ) -> Result<(RedriveTask, u64), ServiceError> {
        let record = self
            .engine
            .get_record(TASK_KIND, &task_key(tenant, id))
            .await?
            .ok_or(ServiceError::TaskNotFound)?;
        Ok((decode(&record.value)?, record.version))
    }

    /// Drops the running guard of `task`'s DLQ if it still names this task.
    async fn release_running(&self, tenant: &TenantId, task: &RedriveTask) {
        let key = running_key(tenant, &task.source);
        let result = async {
            if let Some(guard) = self.engine.get_record(RUNNING_KIND, &key).await? {
                if guard.value == task.id {
                    self.engine
                        .delete_record(RUNNING_KIND, &key, guard.version)
                        .await?;
                }
            }
            Ok::<(), sluice_engine::EngineError>(())
        }
        .await;
        if let Err(error) = result {
            // The next round finds the ended task behind the guard and tries again.
            tracing::warn!(%error, task = %task.id, "could not release a redrive task's guard");
        }
    }
}
