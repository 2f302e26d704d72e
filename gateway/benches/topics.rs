//! Topics, measured in one run on both engines, each figure against a baseline of the same run:
//!
//! 1. **Fan-out 1 → 10 queues**: producers publish batches of 10 messages to a topic with 10
//!    raw-delivery subscriptions (one request, 100 copies), against the same producers doing
//!    the fan-out themselves: for each batch of 10 messages, one batch send of those 10 to each
//!    of the 10 queues, the 10 sends concurrently (10 requests, the same 100 copies). Copies per
//!    second is copies receivable (the queues' `visible` depth, polled after the window until it
//!    reaches 10 × the acknowledged messages) over the time from the first request to that
//!    moment. Each queue must end with exactly the acknowledged count; the run fails otherwise.
//!    The two arms alternate (and which goes first alternates too), on fresh queues every run.
//! 2. **Publish → receivable latency** at a paced 1,000 publishes/s with 5 subscriptions: for
//!    every copy, the time from the moment the schedule meant its publish to start (no
//!    coordinated omission) to the receive answer that delivered it, on every queue; two
//!    long-polling consumers per queue. The baseline is single sends at the same pace to one
//!    queue, with the same consumers. Every acknowledged message must arrive on every queue
//!    exactly once.
//!
//! Each engine's gateway runs on its own tokio runtime (`sluice-srv`, 2 workers) and the load on
//! another (`bench-load`, 2 workers), so each side's CPU is read per thread.
//!
//! Run: `cargo bench -p sluice-gateway --bench topics` (needs `redis-server` on the PATH).
//! `SLUICE_BENCH_PHASES=1` or `2` runs one phase; `SLUICE_BENCH_QUICK=1` shrinks both;
//! `SLUICE_BENCH_LATENCY_PRODUCERS=<n>` sets phase 2's paced publishers (default 8).

mod common;
#[path = "common/phases.rs"]
mod phases;

use common::{expect_status, Http, HttpDriver};
use futures_util::future::join_all;
use phases::{load_runtime, wanted, Store, Stores};
use serde_json::Value;
use sluice_bench_support::flow::{padded_body, Driver as _, BODY_BYTES};
use sluice_bench_support::stats::{median_or_nan as median, runs, Latencies};
use sluice_bench_support::system::{machine_cpu, scratch_base, threads_cpu_seconds};
use sluice_bench_support::BenchResult;
use sluice_engine::TenantId;
use sluice_gateway::auth::{Auth, KeyMaterial, Scope};
use sluice_gateway::secret::Secret;
use sluice_testkit::RedisServer;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TENANT: &str = "bench";
/// The secret `common::start_gateway` configures; topic scopes are minted with it here.
const JWT_SECRET_BYTE: u8 = b'x';
const PRODUCERS: usize = 8;
const FAN_OUT: usize = 10;
const BATCH: usize = 10;
const LATENCY_QUEUES: usize = 5;
const CONSUMERS_PER_QUEUE: usize = 2;

struct Plan {
    repetitions: usize,
    /// Paced publishers of phase 2 (`SLUICE_BENCH_LATENCY_PRODUCERS`, default 8).
    latency_producers: usize,
    fan_window: Duration,
    latency_reps: usize,
    latency_window: Duration,
    rate: f64,
}

impl Plan {
    fn full() -> Self {
        Self {
            repetitions: 3,
            latency_producers: latency_producers(),
            fan_window: Duration::from_secs(5),
            latency_reps: 2,
            latency_window: Duration::from_secs(8),
            rate: 1000.0,
        }
    }

    fn quick() -> Self {
        Self {
            repetitions: 1,
            latency_producers: latency_producers(),
            fan_window: Duration::from_secs(2),
            latency_reps: 1,
            latency_window: Duration::from_secs(2),
            rate: 1000.0,
        }
    }
}

fn latency_producers() -> usize {
    std::env::var("SLUICE_BENCH_LATENCY_PRODUCERS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(PRODUCERS)
}

/// A gateway for one phase (see [`Stores::gateway`]), with a token that may also manage and
/// publish to topics.
fn topic_gateway(
    stores: &Stores,
    store: Store,
    phase: &str,
) -> BenchResult<(tokio::runtime::Runtime, Http)> {
    let (runtime, mut http) =
        stores.gateway(store, phase, format!("bench-topics-{phase}"), TENANT)?;
    http.bearer = format!("Bearer {}", topic_token()?);
    Ok((runtime, http))
}

/// A token for `TENANT` with every queue and topic scope, signed with the gateway's secret.
fn topic_token() -> BenchResult<String> {
    let auth = Auth::new(
        KeyMaterial::Secret(Secret::new(vec![JWT_SECRET_BYTE; 40])),
        None,
        None,
    )?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    Ok(auth.mint(
        Some(&TenantId::parse(TENANT)?),
        &[
            Scope::QueuesManage,
            Scope::MessagesSend,
            Scope::MessagesConsume,
            Scope::TopicsManage,
            Scope::TopicsPublish,
        ],
        now,
        7200,
    )?)
}

// ---------------------------------------------------------------------------------------------
// HTTP helpers beyond `common`.

async fn put_topic(http: &Http, topic: &str) -> BenchResult<()> {
    let response = http
        .client
        .put(format!("{}/v1/topics/{topic}", http.base))
        .header("authorization", &http.bearer)
        .header("content-type", "application/json")
        .body("{}")
        .send()
        .await?;
    expect_status(response, &[200, 201]).await?;
    Ok(())
}

/// Creates `queue` and subscribes it to `topic` with raw delivery.
async fn subscribe(http: &Http, topic: &str, queue: &str) -> BenchResult<()> {
    http.put_queue(queue).await?;
    let response = http
        .post(
            &format!("/v1/topics/{topic}/subscriptions"),
            serde_json::json!({"queue": queue, "raw_delivery": true}).to_string(),
        )
        .send()
        .await?;
    expect_status(response, &[200, 201]).await?;
    Ok(())
}

async fn delete(http: &Http, path: &str) -> BenchResult<()> {
    let response = http
        .client
        .delete(format!("{}{path}", http.base))
        .header("authorization", &http.bearer)
        .send()
        .await?;
    expect_status(response, &[200, 202, 204, 404]).await?;
    Ok(())
}

async fn visible(http: &Http, queue: &str) -> BenchResult<u64> {
    let response = http
        .client
        .get(format!("{}/v1/queues/{queue}", http.base))
        .header("authorization", &http.bearer)
        .send()
        .await?;
    let answer: Value = expect_status(response, &[200]).await?.json().await?;
    Ok(answer["stats"]["visible"].as_u64().unwrap_or(0)
        + answer["stats"]["in_flight"].as_u64().unwrap_or(0))
}

/// Publishes a batch of bodies to `topic`; answers how many entries were accepted.
async fn publish_batch(http: &Http, topic: &str, bodies: &[String]) -> BenchResult<u64> {
    let mut json = String::from(r#"{"entries":["#);
    for (i, body) in bodies.iter().enumerate() {
        let sep = if i == 0 { "" } else { "," };
        write!(json, r#"{sep}{{"id":"{i}","body":"{body}"}}"#)?;
    }
    json.push_str("]}");
    let response = http
        .post(&format!("/v1/topics/{topic}/messages/batch"), json)
        .send()
        .await?;
    let answer: Value = expect_status(response, &[200]).await?.json().await?;
    let failed = answer["failed"].as_array().map_or(0, Vec::len);
    if failed > 0 {
        return Err(format!("publish batch: {failed} entries failed: {answer}").into());
    }
    Ok(answer["successful"].as_array().map_or(0, Vec::len) as u64)
}

/// Errors seen by the load, counted, with the first one kept for the report.
#[derive(Default)]
struct Errors {
    count: AtomicU64,
    first: Mutex<Option<String>>,
}

impl Errors {
    fn record(&self, error: &dyn std::fmt::Display) {
        if self.count.fetch_add(1, Ordering::Relaxed) == 0 {
            if let Ok(mut first) = self.first.lock() {
                *first = Some(error.to_string());
            }
        }
    }

    fn summary(&self) -> String {
        let n = self.count.load(Ordering::Relaxed);
        match self.first.lock().ok().and_then(|f| f.clone()) {
            Some(first) => format!(
                "{n} (first: {})",
                first.chars().take(200).collect::<String>()
            ),
            None => n.to_string(),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Phase 1: fan-out throughput.

#[derive(Clone, Copy, PartialEq)]
enum Arm {
    Publish,
    ClientSide,
}

impl Arm {
    fn label(self) -> &'static str {
        match self {
            Arm::Publish => "publish batch of 10 to a topic with 10 subscriptions",
            Arm::ClientSide => "client-side: 10 concurrent batch sends of 10, one per queue",
        }
    }
}

struct FanRun {
    copies_per_second: f64,
    acked_copies_per_second: f64,
    requests_per_second: f64,
    messages: u64,
    copies: u64,
    exact_queues: usize,
    settle: Duration,
    server_cores: f64,
    redis_cores: f64,
    load_cores: f64,
    machine_cores: f64,
    errors: u64,
    error_text: String,
}

/// CPU seconds redis-server has used (`INFO cpu`), when there is one.
fn redis_cpu(redis: Option<&RedisServer>) -> BenchResult<f64> {
    let Some(redis) = redis else {
        return Ok(f64::NAN);
    };
    let info = redis.query(&["INFO", "cpu"])?;
    let get = |key: &str| {
        info.lines()
            .filter_map(|l| l.split_once(':'))
            .find(|(k, _)| *k == key)
            .and_then(|(_, v)| v.trim().parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    Ok(get("used_cpu_user") + get("used_cpu_sys"))
}

async fn fan_run(
    http: &Http,
    redis: Option<&RedisServer>,
    arm: Arm,
    rep: usize,
    plan: &Plan,
) -> BenchResult<FanRun> {
    let tag = match arm {
        Arm::Publish => "pub",
        Arm::ClientSide => "cli",
    };
    let topic = format!("fan-{tag}-r{rep}");
    let queues: Vec<String> = (0..FAN_OUT).map(|i| format!("{topic}-q{i}")).collect();
    if arm == Arm::Publish {
        put_topic(http, &topic).await?;
        for queue in &queues {
            subscribe(http, &topic, queue).await?;
        }
    } else {
        for queue in &queues {
            drop(http.driver(queue).await?);
        }
    }
    let next = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let requests = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(Errors::default());
    // The gateway's threads (`sluice-srv` workers, the embedded engine's `sluice-commit`).
    let (srv0, load0, redis0, machine0) = (
        threads_cpu_seconds("sluice-"),
        threads_cpu_seconds("bench-load"),
        redis_cpu(redis)?,
        machine_cpu().0,
    );
    let start = Instant::now();
    let deadline = start + plan.fan_window;
    let mut tasks = Vec::new();
    for _ in 0..PRODUCERS {
        let (http, topic, queues) = (http.clone(), topic.clone(), queues.clone());
        let (next, acked, requests, errors) = (
            Arc::clone(&next),
            Arc::clone(&acked),
            Arc::clone(&requests),
            Arc::clone(&errors),
        );
        tasks.push(tokio::spawn(async move {
            let padding = "x".repeat(BODY_BYTES);
            let drivers: Vec<HttpDriver> = queues
                .iter()
                .map(|q| HttpDriver {
                    http: http.clone(),
                    queue: q.clone(),
                })
                .collect();
            while Instant::now() < deadline {
                let first = next.fetch_add(BATCH as u64, Ordering::Relaxed);
                match arm {
                    Arm::Publish => {
                        let bodies: Vec<String> = (0..BATCH as u64)
                            .map(|i| padded_body(first + i, &padding))
                            .collect();
                        requests.fetch_add(1, Ordering::Relaxed);
                        match publish_batch(&http, &topic, &bodies).await {
                            Ok(n) => {
                                acked.fetch_add(n, Ordering::Relaxed);
                            }
                            Err(e) => errors.record(&e),
                        }
                    }
                    Arm::ClientSide => {
                        requests.fetch_add(FAN_OUT as u64, Ordering::Relaxed);
                        let sends = drivers.iter().map(|d| d.send(first, BATCH, &padding));
                        let answers = join_all(sends).await;
                        let mut ok = true;
                        for answer in answers {
                            if let Err(e) = answer {
                                errors.record(&e);
                                ok = false;
                            }
                        }
                        // A message counts once all 10 of its copies were acknowledged.
                        if ok {
                            acked.fetch_add(BATCH as u64, Ordering::Relaxed);
                        }
                    }
                }
            }
        }));
    }
    for task in tasks {
        task.await?;
    }
    let produced = start.elapsed();
    let messages = acked.load(Ordering::Relaxed);
    let want = messages * FAN_OUT as u64;
    // Copies are counted once receivable: poll the depths until they add up (or 30 s).
    let mut depths;
    loop {
        depths = join_all(queues.iter().map(|q| visible(http, q)))
            .await
            .into_iter()
            .collect::<BenchResult<Vec<u64>>>()?;
        if depths.iter().sum::<u64>() >= want
            || start.elapsed() > produced + Duration::from_secs(30)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let receivable = start.elapsed();
    let (srv1, load1, redis1, machine1) = (
        threads_cpu_seconds("sluice-"),
        threads_cpu_seconds("bench-load"),
        redis_cpu(redis)?,
        machine_cpu().0,
    );
    let copies: u64 = depths.iter().sum();
    let exact_queues = depths.iter().filter(|&&d| d == messages).count();
    if exact_queues != FAN_OUT && errors.count.load(Ordering::Relaxed) == 0 {
        return Err(format!(
            "{topic}: {messages} messages acknowledged, queue depths {depths:?}: a copy was lost or \
             duplicated"
        )
        .into());
    }
    // Clean up so the next runs do not carry this run's copies (Redis holds them in memory).
    if arm == Arm::Publish {
        delete(http, &format!("/v1/topics/{topic}")).await?;
    }
    for queue in &queues {
        delete(http, &format!("/v1/queues/{queue}")).await?;
    }
    let secs = receivable.as_secs_f64();
    Ok(FanRun {
        copies_per_second: copies as f64 / secs,
        acked_copies_per_second: want as f64 / produced.as_secs_f64(),
        requests_per_second: requests.load(Ordering::Relaxed) as f64 / produced.as_secs_f64(),
        messages,
        copies,
        exact_queues,
        settle: receivable - produced,
        server_cores: (srv1 - srv0) / secs,
        redis_cores: (redis1 - redis0) / secs,
        load_cores: (load1 - load0) / secs,
        machine_cores: (machine1 - machine0) / secs,
        errors: errors.count.load(Ordering::Relaxed),
        error_text: errors.summary(),
    })
}

fn fan_out_phase(
    stores: &Stores,
    load: &tokio::runtime::Runtime,
    plan: &Plan,
    store: Store,
) -> BenchResult<()> {
    let (server, http) = topic_gateway(stores, store, "fan")?;
    let mut results: [Vec<FanRun>; 2] = [Vec::new(), Vec::new()];
    let mut ratios = Vec::new();
    for rep in 1..=plan.repetitions {
        let order = if rep % 2 == 1 {
            [Arm::Publish, Arm::ClientSide]
        } else {
            [Arm::ClientSide, Arm::Publish]
        };
        let mut this_rep = [0.0; 2];
        for arm in order {
            let slot = usize::from(arm == Arm::ClientSide);
            let redis = (store == Store::Redis).then_some(&stores.redis);
            let run = load.block_on(fan_run(&http, redis, arm, rep, plan))?;
            eprintln!(
                "{} rep {rep}: {}: {:.0} copies/s ({} messages, {} copies, settle {:.3} s, \
                 {:.0} req/s, gateway {:.2} cores, redis-server {:.2} cores, load {:.2} cores, \
                 whole machine {:.2} cores busy, errors {})",
                store.label(),
                arm.label(),
                run.copies_per_second,
                run.messages,
                run.copies,
                run.settle.as_secs_f64(),
                run.requests_per_second,
                run.server_cores,
                run.redis_cores,
                run.load_cores,
                run.machine_cores,
                run.error_text,
            );
            this_rep[slot] = run.copies_per_second;
            results[slot].push(run);
        }
        ratios.push(this_rep[0] / this_rep[1]);
    }
    drop(server);
    for (slot, arm) in [Arm::Publish, Arm::ClientSide].into_iter().enumerate() {
        let rs = &results[slot];
        let col = |f: fn(&FanRun) -> f64| median(&rs.iter().map(f).collect::<Vec<_>>());
        println!(
            "| {} | {} | {} | **{:.0}** | {:.0} | {:.0} | {:.3} | {:.2} | {} | {:.2} | {:.2} | {} | {} | {}/{} | {} |",
            store.label(),
            arm.label(),
            runs(&rs.iter().map(|r| r.copies_per_second).collect::<Vec<_>>()),
            col(|r| r.copies_per_second),
            col(|r| r.acked_copies_per_second),
            col(|r| r.requests_per_second),
            col(|r| r.settle.as_secs_f64()),
            col(|r| r.server_cores),
            if store == Store::Redis {
                format!("{:.2}", col(|r| r.redis_cores))
            } else {
                "-".to_owned()
            },
            col(|r| r.load_cores),
            col(|r| r.machine_cores),
            rs.iter().map(|r| r.messages).sum::<u64>(),
            rs.iter().map(|r| r.copies).sum::<u64>(),
            rs.iter().map(|r| r.exact_queues).sum::<usize>(),
            rs.len() * FAN_OUT,
            rs.iter().map(|r| r.errors).sum::<u64>(),
        );
    }
    println!(
        "| {} | **publish / client-side** | {} | **{:.2}x** | | | | | | | | | | | |",
        store.label(),
        ratios
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect::<Vec<_>>()
            .join(", "),
        median(&ratios),
    );
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Phase 2: publish → receivable latency at a paced rate.

#[derive(Clone, Copy, PartialEq)]
enum LatencyArm {
    Publish,
    Send,
}

impl LatencyArm {
    fn label(self) -> String {
        match self {
            LatencyArm::Publish => {
                format!("publish to a topic, {LATENCY_QUEUES} subscriptions (every copy)")
            }
            LatencyArm::Send => "send to one queue (baseline)".to_owned(),
        }
    }
}

/// A body of [`BODY_BYTES`]: the message's number and its intended send time (µs after the
/// run's base instant), 16 hex digits each, then padding.
fn timed_body(id: u64, offset_us: u64, padding: &str) -> String {
    let mut body = format!("{id:016x}{offset_us:016x}");
    body.push_str(&padding[..BODY_BYTES - 32]);
    body
}

fn parse_timed(body: &str) -> Option<(u64, u64)> {
    let id = u64::from_str_radix(body.get(..16)?, 16).ok()?;
    let offset = u64::from_str_radix(body.get(16..32)?, 16).ok()?;
    Some((id, offset))
}

struct LatencyRun {
    achieved: f64,
    acked: u64,
    send: Latencies,
    end_to_end: Latencies,
    lost: u64,
    duplicates: u64,
    errors: String,
    gateway_cores: f64,
    redis_cores: f64,
    machine_cores: f64,
}

async fn latency_run(
    http: &Http,
    redis: Option<&RedisServer>,
    arm: LatencyArm,
    rep: usize,
    plan: &Plan,
) -> BenchResult<LatencyRun> {
    let topic = format!(
        "lat-{}-r{rep}",
        if arm == LatencyArm::Publish {
            "pub"
        } else {
            "send"
        }
    );
    let queue_count = if arm == LatencyArm::Publish {
        LATENCY_QUEUES
    } else {
        1
    };
    let queues: Vec<String> = (0..queue_count).map(|i| format!("{topic}-q{i}")).collect();
    if arm == LatencyArm::Publish {
        put_topic(http, &topic).await?;
        for queue in &queues {
            subscribe(http, &topic, queue).await?;
        }
    } else {
        http.put_queue(&queues[0]).await?;
    }
    let total = (plan.rate * plan.latency_window.as_secs_f64()) as u64;
    let errors = Arc::new(Errors::default());
    let stop = Arc::new(AtomicBool::new(false));
    let base = Instant::now() + Duration::from_millis(200);
    let (gateway0, redis0, machine0) = (
        threads_cpu_seconds("sluice-"),
        redis_cpu(redis)?,
        machine_cpu().0,
    );
    // Consumers: every queue, each delivery recorded as (id, latency).
    let mut consumers = Vec::new();
    for queue in &queues {
        for _ in 0..CONSUMERS_PER_QUEUE {
            let driver = HttpDriver {
                http: http.clone(),
                queue: queue.clone(),
            };
            let (stop, errors) = (Arc::clone(&stop), Arc::clone(&errors));
            let q = queue.clone();
            consumers.push(tokio::spawn(async move {
                let mut seen: Vec<(u64, Duration)> = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let response = driver
                        .http
                        .post(
                            &format!("/v1/queues/{q}/messages/receive"),
                            r#"{"max_messages":10,"wait_seconds":1}"#.to_owned(),
                        )
                        .send()
                        .await;
                    let answer: Value = match response {
                        Ok(r) => match expect_status(r, &[200]).await {
                            Ok(r) => match r.json().await {
                                Ok(v) => v,
                                Err(e) => {
                                    errors.record(&e);
                                    continue;
                                }
                            },
                            Err(e) => {
                                errors.record(&e);
                                continue;
                            }
                        },
                        Err(e) => {
                            errors.record(&e);
                            continue;
                        }
                    };
                    let now = Instant::now();
                    let mut handles = Vec::new();
                    for m in answer["messages"].as_array().into_iter().flatten() {
                        let body = m["body"].as_str().unwrap_or_default();
                        if let Some((id, offset)) = parse_timed(body) {
                            let intended = base + Duration::from_micros(offset);
                            seen.push((id, now.saturating_duration_since(intended)));
                        }
                        if let Some(h) = m["receipt_handle"].as_str() {
                            handles.push(h.to_owned());
                        }
                    }
                    if !handles.is_empty() {
                        if let Err(e) = driver.delete(handles, 10).await {
                            errors.record(&e);
                        }
                    }
                }
                (q, seen)
            }));
        }
    }
    // Producers: message k is meant to start at base + k / rate; producer p takes k ≡ p.
    let acked = Arc::new(Mutex::new(Vec::new()));
    let send_latencies = Arc::new(Mutex::new(Vec::new()));
    let mut producers = Vec::new();
    let producer_count = plan.latency_producers as u64;
    for p in 0..producer_count {
        let (http, topic, queue) = (http.clone(), topic.clone(), queues[0].clone());
        let (acked, send_latencies, errors) = (
            Arc::clone(&acked),
            Arc::clone(&send_latencies),
            Arc::clone(&errors),
        );
        let rate = plan.rate;
        producers.push(tokio::spawn(async move {
            let padding = "x".repeat(BODY_BYTES);
            let mut mine = Vec::new();
            let mut lat = Vec::new();
            let mut k = p;
            let mut last_answer = base;
            while k < total {
                let offset_us = (k as f64 * 1e6 / rate) as u64;
                let intended = base + Duration::from_micros(offset_us);
                tokio::time::sleep_until(intended.into()).await;
                let body = timed_body(k, offset_us, &padding);
                let (path, status) = match arm {
                    LatencyArm::Publish => (format!("/v1/topics/{topic}/messages"), 201),
                    LatencyArm::Send => (format!("/v1/queues/{queue}/messages"), 201),
                };
                let result = match http
                    .post(&path, format!(r#"{{"body":"{body}"}}"#))
                    .send()
                    .await
                {
                    Ok(r) => expect_status(r, &[status]).await.map(|_| ()),
                    Err(e) => Err(e.into()),
                };
                last_answer = Instant::now();
                match result {
                    Ok(()) => {
                        mine.push(k);
                        lat.push(last_answer.saturating_duration_since(intended));
                    }
                    Err(e) => errors.record(&e),
                }
                k += producer_count;
            }
            if let Ok(mut a) = acked.lock() {
                a.extend(mine);
            }
            if let Ok(mut l) = send_latencies.lock() {
                l.extend(lat);
            }
            last_answer
        }));
    }
    let mut last = base;
    for task in producers {
        last = last.max(task.await?);
    }
    let acked: Vec<u64> = acked.lock().map_err(|_| "poisoned")?.clone();
    let busy = base.elapsed().as_secs_f64();
    let (gateway1, redis1, machine1) = (
        threads_cpu_seconds("sluice-"),
        redis_cpu(redis)?,
        machine_cpu().0,
    );
    // Wait until the consumers have deleted everything (every queue empty, which they see
    // only after receiving each copy) or 20 s have passed, then stop them.
    let window = last.saturating_duration_since(base);
    let drain_start = Instant::now();
    loop {
        let mut left = 0;
        for queue in &queues {
            left += visible(http, queue).await?;
        }
        if left == 0 || drain_start.elapsed() > Duration::from_secs(20) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut per_queue: std::collections::HashMap<String, Vec<(u64, Duration)>> =
        std::collections::HashMap::new();
    for task in consumers {
        let (q, seen) = task.await?;
        per_queue.entry(q).or_default().extend(seen);
    }
    // Anything left behind (received after the stop, or never): drain what remains and count it.
    let mut lost = 0;
    let mut duplicates = 0;
    let mut samples = Vec::new();
    for queue in &queues {
        let seen = per_queue.remove(queue).unwrap_or_default();
        let mut count: std::collections::HashMap<u64, u32> = std::collections::HashMap::new();
        for (id, latency) in seen {
            let n = count.entry(id).or_insert(0);
            *n += 1;
            if *n == 1 {
                samples.push(latency);
            } else {
                duplicates += 1;
            }
        }
        let left = visible(http, queue).await?;
        let missing = acked.iter().filter(|id| !count.contains_key(id)).count() as u64;
        if missing > 0 {
            eprintln!("{queue}: {missing} acknowledged messages not received; {left} still queued");
        }
        lost += missing;
    }
    if arm == LatencyArm::Publish {
        delete(http, &format!("/v1/topics/{topic}")).await?;
    }
    for queue in &queues {
        delete(http, &format!("/v1/queues/{queue}")).await?;
    }
    let sends = send_latencies.lock().map_err(|_| "poisoned")?.clone();
    Ok(LatencyRun {
        achieved: acked.len() as f64 / window.as_secs_f64().max(1e-3),
        acked: acked.len() as u64,
        send: Latencies::of(sends),
        end_to_end: Latencies::of(samples),
        lost,
        duplicates,
        errors: errors.summary(),
        gateway_cores: (gateway1 - gateway0) / busy,
        redis_cores: (redis1 - redis0) / busy,
        machine_cores: (machine1 - machine0) / busy,
    })
}

fn latency_phase(
    stores: &Stores,
    load: &tokio::runtime::Runtime,
    plan: &Plan,
    store: Store,
) -> BenchResult<()> {
    let (server, http) = topic_gateway(stores, store, "latency")?;
    let arms = [LatencyArm::Publish, LatencyArm::Send];
    let mut results: [Vec<LatencyRun>; 2] = [Vec::new(), Vec::new()];
    for rep in 1..=plan.latency_reps {
        let order = if rep % 2 == 1 {
            [arms[0], arms[1]]
        } else {
            [arms[1], arms[0]]
        };
        for arm in order {
            let slot = usize::from(arm == LatencyArm::Send);
            let redis = (store == Store::Redis).then_some(&stores.redis);
            let run = load.block_on(latency_run(&http, redis, arm, rep, plan))?;
            let [s50, s99, _, _] = run.send.millis();
            let [e50, e99, e999, emax] = run.end_to_end.millis();
            eprintln!(
                "{} rep {rep}: {}: {:.0}/s achieved, send p50 {s50:.2} p99 {s99:.2} ms, \
                 end to end p50 {e50:.2} p99 {e99:.2} p99.9 {e999:.2} max {emax:.2} ms \
                 ({} samples), lost {}, duplicates {}, errors {}, gateway {:.2} cores, \
                 redis-server {:.2} cores, whole machine {:.2} cores busy",
                store.label(),
                arm.label(),
                run.achieved,
                run.end_to_end.count,
                run.lost,
                run.duplicates,
                run.errors,
                run.gateway_cores,
                run.redis_cores,
                run.machine_cores,
            );
            results[slot].push(run);
        }
    }
    drop(server);
    let mut p99s = [0.0; 2];
    for (slot, arm) in arms.into_iter().enumerate() {
        let rs = &results[slot];
        let col = |f: &dyn Fn(&LatencyRun) -> f64| median(&rs.iter().map(f).collect::<Vec<_>>());
        let e2e = |i: usize| move |r: &LatencyRun| r.end_to_end.millis()[i];
        let snd = |i: usize| move |r: &LatencyRun| r.send.millis()[i];
        p99s[slot] = col(&e2e(1));
        println!(
            "| {} | {} | {:.0} | {:.2} | {:.2} | {:.2} | **{:.2}** | {:.2} | {:.2} | {} | {:.2} | {} | {:.2} | {} | {} | {} | {} |",
            store.label(),
            arm.label(),
            col(&|r: &LatencyRun| r.achieved),
            col(&snd(0)),
            col(&snd(1)),
            col(&e2e(0)),
            col(&e2e(1)),
            col(&e2e(2)),
            col(&e2e(3)),
            rs.iter()
                .map(|r| format!("{:.2}", r.end_to_end.millis()[1]))
                .collect::<Vec<_>>()
                .join(", "),
            col(&|r: &LatencyRun| r.gateway_cores),
            if store == Store::Redis {
                format!("{:.2}", col(&|r: &LatencyRun| r.redis_cores))
            } else {
                "-".to_owned()
            },
            col(&|r: &LatencyRun| r.machine_cores),
            rs.iter().map(|r| r.acked).sum::<u64>(),
            rs.iter().map(|r| r.lost).sum::<u64>(),
            rs.iter().map(|r| r.duplicates).sum::<u64>(),
            rs.iter()
                .map(|r| r.errors.clone())
                .collect::<Vec<_>>()
                .join("; "),
        );
    }
    println!(
        "| {} | **end-to-end p99, publish / send** | | | | | **{:.2}x** | | | | | | | | | | |",
        store.label(),
        p99s[0] / p99s[1]
    );
    Ok(())
}

fn main() -> BenchResult<()> {
    let quick = sluice_bench_support::quick();
    let plan = if quick { Plan::quick() } else { Plan::full() };
    let (base, fs) = scratch_base()?;
    let scratch = tempfile::Builder::new()
        .prefix("sluice-topics-bench-")
        .tempdir_in(&base)?;
    let stores = Stores {
        redis: RedisServer::start()?,
        scratch: scratch.path().to_path_buf(),
    };
    let load = load_runtime()?;
    let started = Instant::now();
    println!(
        "## sluice-gateway: topics{}",
        if quick { " (QUICK)" } else { "" }
    );
    println!();
    println!(
        "data dir {} ({fs}); {} cores; redis-server without persistence",
        scratch.path().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    if wanted(1) {
        println!();
        println!(
            "### 1. Fan-out 1 → {FAN_OUT} queues ({PRODUCERS} producers, 1 KiB, {:.0} s windows, \
             {} alternating reps)",
            plan.fan_window.as_secs_f64(),
            plan.repetitions
        );
        println!();
        println!("| engine | workload | copies/s receivable (runs) | median | copies/s acknowledged | HTTP req/s | settle s | gateway cores | redis-server cores | load cores | machine cores busy | messages | copies | queues exact | errors |");
        println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
        for store in [Store::Embedded, Store::Redis] {
            fan_out_phase(&stores, &load, &plan, store)?;
        }
    }
    if wanted(2) {
        println!();
        println!(
            "### 2. Publish → receivable latency at {:.0}/s ({} paced producers, \
             {CONSUMERS_PER_QUEUE} consumers per queue, {:.0} s, {} alternating reps; ms)",
            plan.rate,
            plan.latency_producers,
            plan.latency_window.as_secs_f64(),
            plan.latency_reps
        );
        println!();
        println!("| engine | workload | achieved /s | send p50 | send p99 | e2e p50 | e2e p99 | e2e p99.9 | e2e max | e2e p99 per run | gateway cores | redis-server cores | machine cores busy | acked | lost | duplicates | errors |");
        println!(
            "|---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---|"
        );
        for store in [Store::Embedded, Store::Redis] {
            latency_phase(&stores, &load, &plan, store)?;
        }
    }
    println!();
    println!("total bench time {:.0} s", started.elapsed().as_secs_f64());
    drop(load);
    drop(stores);
    drop(scratch);
    Ok(())
}
