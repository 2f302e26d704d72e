//! The load loop, protocol-neutral: N producers and M consumers against one [`Driver`], paced
//! or unbounded, for a duration or a message count, with the correctness ledger, latency
//! histograms, a progress line, and the server's CPU and memory watched from `/proc`.
//!
//! Every loop here is bounded twice: by its own stop condition (duration, message count, all
//! messages drained) and by a hard deadline (`Plan::max_duration`) that ends the run whatever
//! the server does.
//!
//! Correctness: every body carries its sequence id (`producer << 40 | n`) and its intended send
//! time. Producers remember which sends were acknowledged; consumers count deliveries per id.
//! At the end, an acknowledged message never received is *lost*, a second delivery is a
//! *duplicate*, and a received message whose send was not acknowledged (the answer was lost,
//! not the message) is counted apart.

use crate::drivers::{error_kind, make_body, parse_body, Consumer, Driver, Outgoing, Producer};
use crate::stats::{Latency, Percentiles, Processes};
use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};
use std::io::{IsTerminal, Write as _};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Bits of the sequence id that number a producer's messages; the producer index sits above.
const SEQ_BITS: u32 = 40;
/// A task that fails this many times in a row gives up and fails the run: the target is down,
/// and counting a million identical errors would say nothing more.
const MAX_CONSECUTIVE_ERRORS: u32 = 200;
/// Pause after a failed request, so an overloaded or restarting target is not hammered.
const ERROR_PAUSE: Duration = Duration::from_millis(20);

#[derive(Clone, Debug)]
pub(crate) struct Plan {
    pub producers: usize,
    pub consumers: usize,
    /// Body size in bytes (at least the 32-byte header).
    pub size: usize,
    /// Messages per send request.
    pub batch: usize,
    /// Messages per receive (and per delete) request.
    pub receive_batch: usize,
    /// FIFO: the number of message groups the producers spread their messages over.
    pub groups: Option<u32>,
    /// Target total send rate in msgs/s; None sends as fast as acknowledgements come back.
    pub rate: Option<f64>,
    /// Producers stop after this long...
    pub duration: Option<Duration>,
    /// ...or after this many messages in all, whichever comes first.
    pub messages: Option<u64>,
    /// How long consumers may go on draining after the producers stopped.
    pub drain_timeout: Duration,
    /// Long-poll wait of each receive.
    pub wait: Duration,
    /// Fill first (producers only), then drain (consumers only): the backlog scenario.
    pub backlog: bool,
    /// Hard bound on the whole run, whatever happens.
    pub max_duration: Duration,
    pub progress_every: Duration,
}

/// Where a run's figures go: one JSON object per line of the results file.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct RunReport {
    pub record: String,
    pub scenario: String,
    pub target: String,
    pub rep: u32,
    pub unix_time: u64,
    pub producers: usize,
    pub consumers: usize,
    pub size: usize,
    pub batch: usize,
    pub receive_batch: usize,
    pub groups: Option<u32>,
    pub rate: Option<f64>,
    /// False for the no-op ceiling, whose deliveries are canned.
    pub verified: bool,
    /// From the first send to the last producer's stop.
    pub produce_seconds: f64,
    /// From the first send to the last delete (at least `produce_seconds`).
    pub elapsed_seconds: f64,
    /// Acknowledged messages.
    pub sent: u64,
    pub send_requests: u64,
    pub deliveries: u64,
    pub unique: u64,
    pub deleted: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub unacked_received: u64,
    pub foreign: u64,
    pub order_violations: u64,
    pub empty_receives: u64,
    pub errors: u64,
    pub error_kinds: BTreeMap<String, u64>,
    pub drain_timed_out: bool,
    /// Acknowledged sends per second while producing.
    pub send_rate: f64,
    /// Messages sent, received and deleted per second, first send to last delete (for the no-op
    /// ceiling: the smaller of sent and deleted over the producing window).
    pub e2e_rate: f64,
    pub send_latency: Option<Percentiles>,
    pub e2e_latency: Option<Percentiles>,
    /// CPU cores the target's processes kept busy on average.
    pub server_cores: Option<f64>,
    /// CPU cores this load generator kept busy on average.
    pub client_cores: f64,
    pub server_rss_start: Option<u64>,
    pub server_rss_peak: Option<u64>,
    pub server_hwm: Option<u64>,
    pub backlog: Option<Backlog>,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Backlog {
    pub fill_seconds: f64,
    pub fill_rate: f64,
    pub drain_seconds: f64,
    pub drain_rate: f64,
    pub rss_before: Option<u64>,
    pub rss_full: Option<u64>,
    pub rss_drained: Option<u64>,
    /// (RSS with the backlog − RSS before) / messages queued.
    pub bytes_per_message: Option<f64>,
}

/// Delivery counts per message, per producer (indexed by the producer's message number).
#[derive(Default)]
struct Ledger {
    counts: Vec<Vec<u8>>,
    foreign: u64,
    /// FIFO: last message number seen per (producer, group), to catch out-of-order delivery.
    last_in_group: HashMap<(u64, u64), u64>,
    order_violations: u64,
}

impl Ledger {
    /// Records a delivery; true if it is the message's first.
    fn note(&mut self, seq: u64, groups: Option<u32>) -> bool {
        let producer = seq >> SEQ_BITS;
        let n = seq & ((1 << SEQ_BITS) - 1);
        let Some(counts) = usize::try_from(producer)
            .ok()
            .and_then(|p| self.counts.get_mut(p))
        else {
            self.foreign += 1;
            return false;
        };
        let i = usize::try_from(n).unwrap_or(usize::MAX);
        if i >= counts.len() {
            if i > 1 << 32 {
                self.foreign += 1;
                return false;
            }
            counts.resize(i + 1, 0);
        }
        counts[i] = counts[i].saturating_add(1);
        let first = counts[i] == 1;
        if let (Some(k), true) = (groups, first) {
            let group = group_of(producer, n, k);
            let last = self.last_in_group.entry((producer, group)).or_insert(n);
            if n < *last {
                self.order_violations += 1;
            }
            *last = n.max(*last);
        }
        first
    }
}

/// Which of `k` groups message `n` of `producer` goes to: round robin, offset per producer so
/// every group gets messages from several producers.
fn group_of(producer: u64, n: u64, k: u32) -> u64 {
    (n + producer * 7919) % u64::from(k.max(1))
}

struct Shared {
    start: Instant,
    hard_deadline: Instant,
    verifies: bool,
    groups: Option<u32>,
    sent: AtomicU64,
    send_requests: AtomicU64,
    deliveries: AtomicU64,
    unique: AtomicU64,
    deleted: AtomicU64,
    empty_receives: AtomicU64,
    errors: AtomicU64,
    producers_done: AtomicBool,
    abort: AtomicBool,
    /// µs since start; meaningful once `producers_done`.
    drain_deadline_us: AtomicU64,
    last_delete_us: AtomicU64,
    ledger: Mutex<Ledger>,
    error_kinds: Mutex<BTreeMap<String, u64>>,
}

impl Shared {
    fn since_start_us(&self) -> u64 {
        u64::try_from(self.start.elapsed().as_micros()).unwrap_or(u64::MAX)
    }

    fn error(&self, kind: String) {
        self.errors.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut kinds) = self.error_kinds.lock() {
            *kinds.entry(kind).or_insert(0) += 1;
        }
    }

    fn stopped(&self) -> bool {
        self.abort.load(Ordering::Relaxed) || Instant::now() >= self.hard_deadline
    }
}

struct ProducerResult {
    latency: Latency,
    acked: Vec<bool>,
}

async fn producer_task<D: Driver>(
    driver: Arc<D>,
    shared: Arc<Shared>,
    plan: Plan,
    index: usize,
) -> Result<ProducerResult> {
    let mut producer = driver.producer().await?;
    let p = index as u64;
    let producers = plan.producers as u64;
    let quota = plan
        .messages
        .map(|m| m / producers + u64::from(p < m % producers));
    // Paced: each producer sends its share of the rate, the producers' schedules staggered.
    let interval = plan
        .rate
        .map(|r| Duration::from_secs_f64(plan.batch as f64 * plan.producers as f64 / r));
    let mut next =
        shared.start + interval.map_or(Duration::ZERO, |i| i.mul_f64(p as f64 / producers as f64));
    let deadline = plan
        .duration
        .map_or(shared.hard_deadline, |d| shared.start + d)
        .min(shared.hard_deadline);
    let mut result = ProducerResult {
        latency: Latency::new(),
        acked: Vec::new(),
    };
    let mut n = 0u64;
    let mut consecutive = 0u32;
    loop {
        if shared.abort.load(Ordering::Relaxed) || quota.is_some_and(|q| n >= q) {
            break;
        }
        let intended = match interval {
            Some(i) => {
                // A producer behind its schedule stops at the deadline too, rather than working
                // off the sends it owes (a slow target would stretch the run without bound).
                if next >= deadline || Instant::now() >= deadline {
                    break;
                }
                tokio::time::sleep_until(next.into()).await;
                let t = next;
                next += i;
                t
            }
            None => {
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                now
            }
        };
        let count = quota.map_or(plan.batch as u64, |q| (q - n).min(plan.batch as u64));
        // Time from the intended send, not from when the request left: when a paced producer
        // falls behind, the wait counts (no coordinated omission).
        let sent_us =
            u64::try_from(intended.duration_since(shared.start).as_micros()).unwrap_or(u64::MAX);
        let batch: Vec<Outgoing> = (n..n + count)
            .map(|i| {
                let seq = p << SEQ_BITS | i;
                Outgoing {
                    body: make_body(seq, sent_us, plan.size),
                    group: plan.groups.map(|k| format!("g{}", group_of(p, i, k))),
                    dedup: plan.groups.map(|_| format!("{seq:x}")),
                }
            })
            .collect();
        let new_len = usize::try_from(n + count)?;
        match producer.send(&batch).await {
            Ok(outcome) => {
                result.latency.record(intended.elapsed());
                let ok = outcome.value.iter().filter(|a| **a).count() as u64;
                result.acked.extend(outcome.value);
                result.acked.resize(new_len, false);
                shared.sent.fetch_add(ok, Ordering::AcqRel);
                if let Some(f) = outcome.failure {
                    shared.error(f);
                }
                consecutive = 0;
            }
            Err(e) => {
                result.acked.resize(new_len, false);
                shared.error(error_kind(&e));
                consecutive += 1;
                if consecutive >= MAX_CONSECUTIVE_ERRORS {
                    return Err(e.context(format!("producer {p}: {consecutive} errors in a row")));
                }
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
        shared.send_requests.fetch_add(1, Ordering::Relaxed);
        n += count;
    }
    Ok(result)
}

async fn consumer_task<D: Driver>(
    driver: Arc<D>,
    shared: Arc<Shared>,
    plan: Plan,
) -> Result<Latency> {
    let mut consumer = driver.consumer(plan.receive_batch, plan.wait).await?;
    let mut e2e = Latency::new();
    let mut consecutive = 0u32;
    loop {
        if shared.stopped() {
            break;
        }
        if shared.producers_done.load(Ordering::Acquire) {
            let all_in =
                shared.unique.load(Ordering::Acquire) >= shared.sent.load(Ordering::Acquire);
            let late = shared.since_start_us() >= shared.drain_deadline_us.load(Ordering::Acquire);
            // The no-op ceiling has nothing to drain: its canned deliveries never run out.
            if !shared.verifies || all_in || late {
                break;
            }
        }
        let deliveries = match consumer.receive().await {
            Ok(d) => {
                consecutive = 0;
                d
            }
            Err(e) => {
                shared.error(error_kind(&e));
                consecutive += 1;
                if consecutive >= MAX_CONSECUTIVE_ERRORS {
                    return Err(e.context(format!("consumer: {consecutive} errors in a row")));
                }
                tokio::time::sleep(ERROR_PAUSE).await;
                continue;
            }
        };
        if deliveries.is_empty() {
            shared.empty_receives.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let at_us = shared.since_start_us();
        shared
            .deliveries
            .fetch_add(deliveries.len() as u64, Ordering::Relaxed);
        let mut handles = Vec::with_capacity(deliveries.len());
        if shared.verifies {
            let mut firsts = 0;
            {
                let mut ledger = shared
                    .ledger
                    .lock()
                    .map_err(|_| anyhow::anyhow!("ledger lock poisoned"))?;
                for d in &deliveries {
                    match parse_body(&d.body) {
                        Some((seq, sent_us)) => {
                            e2e.record_micros(at_us.saturating_sub(sent_us));
                            if ledger.note(seq, shared.groups) {
                                firsts += 1;
                            }
                        }
                        None => ledger.foreign += 1,
                    }
                }
            }
            shared.unique.fetch_add(firsts, Ordering::AcqRel);
        }
        handles.extend(deliveries.into_iter().map(|d| d.handle));
        match consumer.delete(handles).await {
            Ok(outcome) => {
                shared
                    .deleted
                    .fetch_add(outcome.value as u64, Ordering::Relaxed);
                shared
                    .last_delete_us
                    .fetch_max(shared.since_start_us(), Ordering::Relaxed);
                if let Some(f) = outcome.failure {
                    shared.error(f);
                }
            }
            Err(e) => {
                // The messages come back after their visibility timeout: duplicates, if the
                // run lasts that long.
                shared.error(error_kind(&e));
                tokio::time::sleep(ERROR_PAUSE).await;
            }
        }
    }
    Ok(e2e)
}

/// Prints a progress line every `every` until `done`: to a terminal in place, otherwise one
/// line each time (logs).
async fn progress(shared: Arc<Shared>, done: Arc<AtomicBool>, every: Duration, label: String) {
    let tty = std::io::stderr().is_terminal();
    let mut last = (Instant::now(), 0u64, 0u64);
    'lines: while !done.load(Ordering::Relaxed) && !shared.stopped() {
        // Short naps, so the run does not wait out a whole interval once it is over.
        let until = Instant::now() + every;
        while Instant::now() < until {
            if done.load(Ordering::Relaxed) {
                break 'lines;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        let (t0, sent0, del0) = last;
        let dt = t0.elapsed().as_secs_f64().max(1e-6);
        let sent = shared.sent.load(Ordering::Relaxed);
        let deleted = shared.deleted.load(Ordering::Relaxed);
        let unique = shared.unique.load(Ordering::Relaxed);
        let line = format!(
            "[{label} {:>6.1}s] sent {sent} ({:.0}/s) received {} deleted {deleted} ({:.0}/s) \
             backlog {} errors {}",
            shared.start.elapsed().as_secs_f64(),
            (sent - sent0) as f64 / dt,
            shared.deliveries.load(Ordering::Relaxed),
            deleted.saturating_sub(del0) as f64 / dt,
            if shared.verifies {
                sent.saturating_sub(unique).to_string()
            } else {
                "-".into()
            },
            shared.errors.load(Ordering::Relaxed),
        );
        let mut err = std::io::stderr().lock();
        let _ = if tty {
            write!(err, "\r\x1b[2K{line}")
        } else {
            writeln!(err, "{line}")
        };
        let _ = err.flush();
        last = (Instant::now(), sent, deleted);
    }
    if tty {
        eprintln!();
    }
}

/// Samples the target's resident memory every 200 ms and keeps the peak.
async fn memory_sampler(servers: Processes, done: Arc<AtomicBool>, peak: Arc<AtomicU64>) {
    while !done.load(Ordering::Relaxed) {
        if let Some(rss) = servers.rss() {
            peak.fetch_max(rss, Ordering::Relaxed);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn join_all<T>(
    tasks: Vec<tokio::task::JoinHandle<Result<T>>>,
    shared: &Shared,
) -> Result<Vec<T>> {
    let mut out = Vec::with_capacity(tasks.len());
    let mut first_error = None;
    for task in tasks {
        match task.await.context("task panicked")? {
            Ok(v) => out.push(v),
            Err(e) => {
                // Stop the others now rather than at their own deadlines.
                shared.abort.store(true, Ordering::Relaxed);
                first_error.get_or_insert(e);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(out),
    }
}

/// Runs the plan against the driver. `scenario`, `target` and `rep` only label the report.
pub(crate) async fn run<D: Driver>(
    driver: Arc<D>,
    plan: &Plan,
    servers: &Processes,
    labels: (&str, &str, u32),
) -> Result<RunReport> {
    let (scenario, target, rep) = labels;
    anyhow::ensure!(plan.producers > 0, "at least one producer");
    anyhow::ensure!(plan.consumers > 0, "at least one consumer");
    anyhow::ensure!(
        plan.duration.is_some() || plan.messages.is_some(),
        "a duration or a message count"
    );
    let client = Processes(vec![std::process::id()]);
    let rss_before = servers.rss();
    let server_cpu0 = servers.cpu_seconds();
    let client_cpu0 = client.cpu_seconds().unwrap_or(f64::NAN);
    let start = Instant::now();
    let shared = Arc::new(Shared {
        start,
        hard_deadline: start + plan.max_duration,
        verifies: driver.verifies(),
        groups: plan.groups,
        sent: AtomicU64::new(0),
        send_requests: AtomicU64::new(0),
        deliveries: AtomicU64::new(0),
        unique: AtomicU64::new(0),
        deleted: AtomicU64::new(0),
        empty_receives: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        producers_done: AtomicBool::new(false),
        abort: AtomicBool::new(false),
        drain_deadline_us: AtomicU64::new(u64::MAX),
        last_delete_us: AtomicU64::new(0),
        ledger: Mutex::new(Ledger {
            counts: vec![Vec::new(); plan.producers],
            ..Ledger::default()
        }),
        error_kinds: Mutex::new(BTreeMap::new()),
    });
    let done = Arc::new(AtomicBool::new(false));
    let peak = Arc::new(AtomicU64::new(rss_before.unwrap_or(0)));
    let sampler = tokio::spawn(memory_sampler(
        servers.clone(),
        Arc::clone(&done),
        Arc::clone(&peak),
    ));
    let progress = tokio::spawn(progress(
        Arc::clone(&shared),
        Arc::clone(&done),
        plan.progress_every,
        format!("{scenario}/{target}"),
    ));

    let spawn_consumers = |shared: &Arc<Shared>| {
        (0..plan.consumers)
            .map(|_| {
                tokio::spawn(consumer_task(
                    Arc::clone(&driver),
                    Arc::clone(shared),
                    plan.clone(),
                ))
            })
            .collect::<Vec<_>>()
    };
    let consumers = if plan.backlog {
        Vec::new()
    } else {
        spawn_consumers(&shared)
    };
    let producers: Vec<_> = (0..plan.producers)
        .map(|i| {
            tokio::spawn(producer_task(
                Arc::clone(&driver),
                Arc::clone(&shared),
                plan.clone(),
                i,
            ))
        })
        .collect();
    let produced = join_all(producers, &shared).await;
    let produce_seconds = start.elapsed().as_secs_f64();
    shared.drain_deadline_us.store(
        shared.since_start_us() + u64::try_from(plan.drain_timeout.as_micros())?,
        Ordering::Release,
    );
    shared.producers_done.store(true, Ordering::Release);

    let mut backlog = None;
    let consumed = if plan.backlog {
        // Let the server settle (flushes, caches) before reading its memory with the backlog.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let rss_full = servers.rss();
        let drain_start = start.elapsed().as_secs_f64();
        let consumed = join_all(spawn_consumers(&shared), &shared).await;
        // To the last delete: the consumers' final long polls are not draining.
        let last_delete = shared.last_delete_us.load(Ordering::Relaxed) as f64 / 1e6;
        let drain_seconds = (last_delete - drain_start).max(1e-3);
        let sent = shared.sent.load(Ordering::Relaxed);
        let drained = shared.unique.load(Ordering::Relaxed);
        backlog = Some(Backlog {
            fill_seconds: produce_seconds,
            fill_rate: sent as f64 / produce_seconds,
            drain_seconds,
            drain_rate: drained as f64 / drain_seconds,
            rss_before,
            rss_full,
            rss_drained: servers.rss(),
            bytes_per_message: match (rss_before, rss_full) {
                (Some(b), Some(f)) if sent > 0 => Some((f as f64 - b as f64) / sent as f64),
                _ => None,
            },
        });
        consumed
    } else {
        join_all(consumers, &shared).await
    };
    done.store(true, Ordering::Relaxed);
    let _ = progress.await;
    let _ = sampler.await;
    let produced = produced?;
    let consumed = consumed?;

    let wall = start.elapsed().as_secs_f64();
    let server_cores = match (server_cpu0, servers.cpu_seconds()) {
        (Some(a), Some(b)) => Some((b - a) / wall),
        _ => None,
    };
    let client_cores = (client.cpu_seconds().unwrap_or(f64::NAN) - client_cpu0) / wall;

    let mut send_latency = Latency::new();
    for p in &produced {
        send_latency.merge(&p.latency);
    }
    let mut e2e_latency = Latency::new();
    for c in &consumed {
        e2e_latency.merge(c);
    }
    let ledger = shared
        .ledger
        .lock()
        .map_err(|_| anyhow::anyhow!("ledger lock poisoned"))?;
    let (mut lost, mut duplicates, mut unacked_received) = (0u64, 0u64, 0u64);
    if shared.verifies {
        for (p, counts) in ledger.counts.iter().enumerate() {
            let acked = produced.get(p).map_or(&[][..], |r| r.acked.as_slice());
            for i in 0..acked.len().max(counts.len()) {
                let count = counts.get(i).copied().unwrap_or(0);
                let was_acked = acked.get(i).copied().unwrap_or(false);
                duplicates += u64::from(count.saturating_sub(1));
                if was_acked && count == 0 {
                    lost += 1;
                } else if !was_acked && count > 0 {
                    unacked_received += 1;
                }
            }
        }
    }
    let sent = shared.sent.load(Ordering::Relaxed);
    let deleted = shared.deleted.load(Ordering::Relaxed);
    let unique = shared.unique.load(Ordering::Relaxed);
    let last_delete = shared.last_delete_us.load(Ordering::Relaxed) as f64 / 1e6;
    let elapsed_seconds = last_delete.max(produce_seconds);
    let e2e_rate = if shared.verifies {
        unique as f64 / elapsed_seconds
    } else {
        sent.min(deleted) as f64 / produce_seconds
    };
    let error_kinds = shared
        .error_kinds
        .lock()
        .map(|k| k.clone())
        .unwrap_or_default();
    Ok(RunReport {
        record: "load".into(),
        scenario: scenario.into(),
        target: target.into(),
        rep,
        unix_time: SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs(),
        producers: plan.producers,
        consumers: plan.consumers,
        size: plan.size,
        batch: plan.batch,
        receive_batch: plan.receive_batch,
        groups: plan.groups,
        rate: plan.rate,
        verified: shared.verifies,
        produce_seconds,
        elapsed_seconds,
        sent,
        send_requests: shared.send_requests.load(Ordering::Relaxed),
        deliveries: shared.deliveries.load(Ordering::Relaxed),
        unique,
        deleted,
        lost,
        duplicates,
        unacked_received,
        foreign: ledger.foreign,
        order_violations: ledger.order_violations,
        empty_receives: shared.empty_receives.load(Ordering::Relaxed),
        errors: shared.errors.load(Ordering::Relaxed),
        error_kinds,
        drain_timed_out: shared.verifies && unique < sent,
        send_rate: sent as f64 / produce_seconds,
        e2e_rate,
        send_latency: send_latency.summary(),
        e2e_latency: if shared.verifies {
            e2e_latency.summary()
        } else {
            None
        },
        server_cores,
        client_cores,
        server_rss_start: rss_before,
        server_rss_peak: servers.rss().map(|_| peak.load(Ordering::Relaxed)),
        server_hwm: servers.hwm(),
        backlog,
    })
}

/// The human summary printed after a run.
pub(crate) fn summary(r: &RunReport) -> String {
    let mut out = format!(
        "{}/{} rep {}: {:.0} msgs/s end to end, {:.0} msgs/s sent; sent {} received {} \
         (unique {}) deleted {}; lost {} duplicates {} unacked-but-received {} errors {}",
        r.scenario,
        r.target,
        r.rep,
        r.e2e_rate,
        r.send_rate,
        r.sent,
        r.deliveries,
        r.unique,
        r.deleted,
        r.lost,
        r.duplicates,
        r.unacked_received,
        r.errors
    );
    if let Some(l) = &r.send_latency {
        out.push_str(&format!("\n  send latency: {}", l.short()));
    }
    if let Some(l) = &r.e2e_latency {
        out.push_str(&format!("\n  end-to-end latency: {}", l.short()));
    }
    if let Some(c) = r.server_cores {
        out.push_str(&format!(
            "\n  CPU cores busy: server {c:.2}, load generator {:.2}",
            r.client_cores
        ));
    }
    if let Some(b) = &r.backlog {
        out.push_str(&format!(
            "\n  backlog: filled {} in {:.1} s ({:.0}/s), drained in {:.1} s ({:.0}/s), \
             {:.0} B of RSS per queued message",
            r.sent,
            b.fill_seconds,
            b.fill_rate,
            b.drain_seconds,
            b.drain_rate,
            b.bytes_per_message.unwrap_or(f64::NAN)
        ));
    }
    for (kind, count) in &r.error_kinds {
        out.push_str(&format!("\n  error x{count}: {kind}"));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ledger_counts_firsts_and_duplicates() {
        let mut l = Ledger {
            counts: vec![Vec::new(); 2],
            ..Ledger::default()
        };
        assert!(l.note(1 << SEQ_BITS | 5, None));
        assert!(!l.note(1 << SEQ_BITS | 5, None));
        assert!(l.note(3, None));
        assert!(!l.note(7 << SEQ_BITS, None));
        assert_eq!(l.foreign, 1);
        assert_eq!(l.counts[1][5], 2);
    }

    #[test]
    fn ledger_catches_reordering_within_a_group() {
        let mut l = Ledger {
            counts: vec![Vec::new(); 1],
            ..Ledger::default()
        };
        // With 2 groups, messages 0, 2, 4 of producer 0 share a group.
        let k = Some(2);
        assert_eq!(group_of(0, 0, 2), group_of(0, 4, 2));
        l.note(0, k);
        l.note(4, k);
        l.note(2, k);
        assert_eq!(l.order_violations, 1);
    }
}
