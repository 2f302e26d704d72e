//! End-to-end HTTP benchmark of the gateway over the embedded engine, in process.
//!
//! Starts the real server (`Application::build` + `run_until_stopped`) on a free port with its
//! data folder on the real disk, and drives it with a keep-alive `reqwest` client in the same
//! process. In one run it measures:
//!
//! 1. **An HTTP no-op ceiling**: `GET /healthz` (no auth, no engine) with the same client
//!    concurrency as the queue workloads. Sluice's request rates are reported as a fraction of
//!    it, so the figures say how much the queue work costs over bare HTTP on this machine.
//! 2. **send + receive + delete msgs/s** with N producers and N consumers on one queue, 1 KiB
//!    bodies, with batches of 1 (single send, receive max 1, single `DELETE`) and batches of 10
//!    (batch send, receive max 10, batch delete). Every acknowledged message must be received:
//!    lost and duplicate deliveries are counted and reported.
//! 3. **Single-producer send latency** (p50/p99) over HTTP, next to the latency of the no-op.
//!
//! Each workload runs for a fixed window, repeated in alternation; medians are reported. The
//! load generator shares the machine's cores with the server, for the ceiling as for Sluice.
//!
//! Run: `cargo bench -p sluice-gateway --bench http`. `SLUICE_BENCH_QUICK=1` shrinks every
//! phase (smoke run). `SLUICE_BENCH_DIR` overrides the scratch directory (default: the system
//! temp dir, or `target/bench-tmp` when that is a tmpfs).

use serde_json::Value;
use sluice_engine::TenantId;
use sluice_gateway::auth::Scope;
use sluice_gateway::config::{CommonArgs, Settings};
use sluice_gateway::startup::Application;
use std::collections::HashMap;
use std::error::Error;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

const PRODUCERS: usize = 8;
const CONSUMERS: usize = 8;
const BODY_BYTES: usize = 1024;
/// Longest a run may take to drain its queue after the producers stop.
const DRAIN_LIMIT: Duration = Duration::from_secs(20);

struct Plan {
    repetitions: usize,
    window: Duration,
    latency_window: Duration,
}

impl Plan {
    fn full() -> Self {
        Self {
            repetitions: 3,
            window: Duration::from_secs(5),
            latency_window: Duration::from_secs(4),
        }
    }

    fn quick() -> Self {
        Self {
            repetitions: 1,
            window: Duration::from_secs(1),
            latency_window: Duration::from_millis(500),
        }
    }
}

/// The server under test and how to reach it.
#[derive(Clone)]
struct Target {
    client: reqwest::Client,
    base: String,
    bearer: String,
}

impl Target {
    fn post(&self, path: &str, json: String) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}{path}", self.base))
            .header("authorization", &self.bearer)
            .header("content-type", "application/json")
            .body(json)
    }

    async fn put_queue(&self, queue: &str) -> BenchResult<()> {
        let response = self
            .client
            .put(format!("{}/v1/queues/{queue}", self.base))
            .header("authorization", &self.bearer)
            .send()
            .await?;
        expect_status(response, &[200, 201]).await?;
        Ok(())
    }
}

async fn expect_status(response: reqwest::Response, ok: &[u16]) -> BenchResult<reqwest::Response> {
    let status = response.status().as_u16();
    if ok.contains(&status) {
        Ok(response)
    } else {
        let text = response.text().await.unwrap_or_default();
        Err(format!("unexpected status {status}: {text}").into())
    }
}

/// The scratch directory: on the real disk, never on a tmpfs (fsync there is free).
fn scratch_base() -> BenchResult<(PathBuf, String)> {
    let candidates: Vec<PathBuf> = match std::env::var_os("SLUICE_BENCH_DIR") {
        Some(dir) => vec![PathBuf::from(dir)],
        None => vec![
            std::env::temp_dir(),
            Path::new(env!("CARGO_MANIFEST_DIR")).join("../target/bench-tmp"),
        ],
    };
    for dir in candidates {
        std::fs::create_dir_all(&dir)?;
        let dir = dir.canonicalize()?;
        let fs = filesystem_of(&dir).unwrap_or_else(|| "unknown".into());
        if !fs.starts_with("tmpfs") && !fs.starts_with("ramfs") {
            return Ok((dir, fs));
        }
        eprintln!("{} is on {fs}; looking further", dir.display());
    }
    Err("no scratch directory on a real disk; set SLUICE_BENCH_DIR".into())
}

/// `"<fstype> <device>"` of the mount holding `path`, from /proc/mounts.
fn filesystem_of(path: &Path) -> Option<String> {
    let mounts = std::fs::read_to_string("/proc/mounts").ok()?;
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let device = fields.next()?;
            let mount_point = fields.next()?;
            let fstype = fields.next()?;
            path.starts_with(mount_point)
                .then(|| (mount_point.len(), format!("{fstype} {device}")))
        })
        .max_by_key(|(len, _)| *len)
        .map(|(_, fs)| fs)
}

fn median(values: &[f64]) -> f64 {
    let mut v = values.to_vec();
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n == 0 {
        f64::NAN
    } else if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

fn runs(values: &[f64]) -> String {
    values
        .iter()
        .map(|x| format!("{x:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// CPU time used by this process so far (server and load generator, all threads), in seconds,
/// from the utime and stime fields of /proc/self/stat (USER_HZ = 100 ticks per second).
fn cpu_seconds() -> f64 {
    let Ok(stat) = std::fs::read_to_string("/proc/self/stat") else {
        return f64::NAN;
    };
    let rest = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<f64>().ok());
    match (ticks(11), ticks(12)) {
        (Some(user), Some(system)) => (user + system) / 100.0,
        _ => f64::NAN,
    }
}

/// Latency summary of a set of samples.
struct Latencies {
    count: usize,
    p50: Duration,
    p99: Duration,
    p999: Duration,
    max: Duration,
}

impl Latencies {
    fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        let at = |q: f64| {
            let i = ((samples.len() as f64 * q).ceil() as usize).clamp(1, samples.len()) - 1;
            samples[i]
        };
        Self {
            count: samples.len(),
            p50: at(0.50),
            p99: at(0.99),
            p999: at(0.999),
            max: samples[samples.len() - 1],
        }
    }

    fn row(&self, label: &str) {
        let ms = |d: Duration| d.as_secs_f64() * 1e3;
        println!(
            "| {label:<36} | {:>8} | {:>9.3} | {:>9.3} | {:>10.3} | {:>9.3} |",
            self.count,
            ms(self.p50),
            ms(self.p99),
            ms(self.p999),
            ms(self.max)
        );
    }
}

/// `GET /healthz` from `clients` concurrent tasks for `window`: requests/s and cores busy.
async fn noop_ceiling(
    target: &Target,
    clients: usize,
    window: Duration,
) -> BenchResult<(f64, f64)> {
    let done = Arc::new(AtomicU64::new(0));
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    let deadline = start + window;
    let mut tasks = Vec::new();
    for _ in 0..clients {
        let (target, done) = (target.clone(), Arc::clone(&done));
        tasks.push(tokio::spawn(async move {
            let url = format!("{}/healthz", target.base);
            while Instant::now() < deadline {
                let response = target.client.get(&url).send().await?;
                expect_status(response, &[200]).await?.bytes().await?;
                done.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), Box<dyn Error + Send + Sync>>(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    Ok((
        done.load(Ordering::Relaxed) as f64 / elapsed,
        (cpu_seconds() - cpu_before) / elapsed,
    ))
}

/// The figures of one end-to-end run.
struct Flow {
    /// Messages sent, received and deleted per second, from the first send to the last delete.
    msgs_per_second: f64,
    /// HTTP requests (sends, receives — empty ones included — and deletes) per second.
    requests_per_second: f64,
    sent: u64,
    lost: u64,
    duplicates: u64,
    empty_receives: u64,
    /// CPU cores the process (server and load generator) kept busy on average.
    cores_busy: f64,
}

/// What the consumers saw, shared between them.
#[derive(Default)]
struct Ledger {
    /// Deliveries per message id (ids are `producer << 32 | n`).
    received: Mutex<HashMap<u64, u32>>,
    unique: AtomicU64,
    deleted: AtomicU64,
    requests: AtomicU64,
    empty_receives: AtomicU64,
    sent: AtomicU64,
    producers_done: AtomicBool,
    /// Nanoseconds since the run started at the last successful delete.
    last_delete_nanos: AtomicU64,
}

fn padded_body(id: u64, padding: &str) -> String {
    let mut body = format!("{id:016x}");
    body.push_str(&padding[..BODY_BYTES - 16]);
    body
}

fn body_id(body: &str) -> BenchResult<u64> {
    let hex = body.get(..16).ok_or("short body")?;
    Ok(u64::from_str_radix(hex, 16)?)
}

/// `PRODUCERS` producers send for `window`, `CONSUMERS` consumers receive and delete until every
/// acknowledged message is deleted (or [`DRAIN_LIMIT`] passes), `batch` messages at a time.
async fn flow(target: &Target, queue: &str, batch: usize, window: Duration) -> BenchResult<Flow> {
    target.put_queue(queue).await?;
    let ledger = Arc::new(Ledger::default());
    let padding = Arc::new("x".repeat(BODY_BYTES));
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    let deadline = start + window;

    let mut producers = Vec::new();
    for producer in 0..PRODUCERS as u64 {
        let (target, ledger, padding) = (target.clone(), Arc::clone(&ledger), Arc::clone(&padding));
        let path = if batch == 1 {
            format!("/v1/queues/{queue}/messages")
        } else {
            format!("/v1/queues/{queue}/messages/batch")
        };
        producers.push(tokio::spawn(async move {
            let mut n = 0u64;
            while Instant::now() < deadline {
                let json = if batch == 1 {
                    format!(
                        r#"{{"body":"{}"}}"#,
                        padded_body(producer << 32 | n, &padding)
                    )
                } else {
                    let mut json = String::from(r#"{"entries":["#);
                    for i in 0..batch as u64 {
                        let sep = if i == 0 { "" } else { "," };
                        let body = padded_body(producer << 32 | (n + i), &padding);
                        write!(json, r#"{sep}{{"id":"{i}","body":"{body}"}}"#)?;
                    }
                    json.push_str("]}");
                    json
                };
                let response = target.post(&path, json).send().await?;
                ledger.requests.fetch_add(1, Ordering::Relaxed);
                if batch == 1 {
                    expect_status(response, &[201]).await?.bytes().await?;
                } else {
                    let answer: Value = expect_status(response, &[200]).await?.json().await?;
                    let failed = answer["failed"].as_array().map_or(0, Vec::len);
                    if failed > 0 {
                        return Err(format!("batch send: {failed} entries failed: {answer}").into());
                    }
                }
                ledger.sent.fetch_add(batch as u64, Ordering::Relaxed);
                n += batch as u64;
            }
            Ok::<(), Box<dyn Error + Send + Sync>>(())
        }));
    }

    let mut consumers = Vec::new();
    for _ in 0..CONSUMERS {
        let (target, ledger, queue) = (target.clone(), Arc::clone(&ledger), queue.to_owned());
        consumers.push(tokio::spawn(async move {
            let receive_json = format!(r#"{{"max_messages":{batch},"wait_seconds":1}}"#);
            let receive_path = format!("/v1/queues/{queue}/messages/receive");
            loop {
                let drained = ledger.producers_done.load(Ordering::Acquire)
                    && ledger.deleted.load(Ordering::Acquire)
                        >= ledger.sent.load(Ordering::Acquire);
                if drained || start.elapsed() > window + DRAIN_LIMIT {
                    return Ok::<(), Box<dyn Error + Send + Sync>>(());
                }
                let response = target
                    .post(&receive_path, receive_json.clone())
                    .send()
                    .await?;
                ledger.requests.fetch_add(1, Ordering::Relaxed);
                let answer: Value = expect_status(response, &[200]).await?.json().await?;
                let messages = answer["messages"].as_array().cloned().unwrap_or_default();
                if messages.is_empty() {
                    ledger.empty_receives.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let mut handles = Vec::with_capacity(messages.len());
                {
                    let mut received = ledger.received.lock().map_err(|_| "poisoned ledger")?;
                    for m in &messages {
                        let id = body_id(m["body"].as_str().ok_or("message without body")?)?;
                        let count = received.entry(id).or_insert(0);
                        *count += 1;
                        if *count == 1 {
                            ledger.unique.fetch_add(1, Ordering::Relaxed);
                        }
                        handles.push(
                            m["receipt_handle"]
                                .as_str()
                                .ok_or("message without receipt_handle")?
                                .to_owned(),
                        );
                    }
                }
                if batch == 1 {
                    for handle in &handles {
                        let response = target
                            .client
                            .delete(format!(
                                "{}/v1/queues/{queue}/messages/{handle}",
                                target.base
                            ))
                            .header("authorization", &target.bearer)
                            .send()
                            .await?;
                        ledger.requests.fetch_add(1, Ordering::Relaxed);
                        expect_status(response, &[204]).await?.bytes().await?;
                    }
                } else {
                    let mut json = String::from(r#"{"entries":["#);
                    for (i, handle) in handles.iter().enumerate() {
                        let sep = if i == 0 { "" } else { "," };
                        write!(json, r#"{sep}{{"id":"{i}","receipt_handle":"{handle}"}}"#)?;
                    }
                    json.push_str("]}");
                    let response = target
                        .post(&format!("/v1/queues/{queue}/messages/delete"), json)
                        .send()
                        .await?;
                    ledger.requests.fetch_add(1, Ordering::Relaxed);
                    let answer: Value = expect_status(response, &[200]).await?.json().await?;
                    let failed = answer["failed"].as_array().map_or(0, Vec::len);
                    if failed > 0 {
                        return Err(format!("batch delete: {failed} failed: {answer}").into());
                    }
                }
                ledger
                    .deleted
                    .fetch_add(handles.len() as u64, Ordering::AcqRel);
                ledger
                    .last_delete_nanos
                    .fetch_max(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        }));
    }

    for task in producers {
        task.await??;
    }
    ledger.producers_done.store(true, Ordering::Release);
    for task in consumers {
        task.await??;
    }
    let cores_busy = (cpu_seconds() - cpu_before) / start.elapsed().as_secs_f64();
    let elapsed = Duration::from_nanos(ledger.last_delete_nanos.load(Ordering::Relaxed))
        .max(window)
        .as_secs_f64();
    let sent = ledger.sent.load(Ordering::Relaxed);
    let received = ledger.received.lock().map_err(|_| "poisoned ledger")?;
    let unique = ledger.unique.load(Ordering::Relaxed);
    let duplicates: u64 = received
        .values()
        .map(|&c| u64::from(c.saturating_sub(1)))
        .sum();
    let deleted = ledger.deleted.load(Ordering::Relaxed);
    Ok(Flow {
        msgs_per_second: (deleted - duplicates) as f64 / elapsed,
        requests_per_second: ledger.requests.load(Ordering::Relaxed) as f64 / elapsed,
        sent,
        lost: sent.saturating_sub(unique),
        duplicates,
        empty_receives: ledger.empty_receives.load(Ordering::Relaxed),
        cores_busy,
    })
}

/// One producer, one send at a time: each request's latency.
async fn send_latency(target: &Target, queue: &str, window: Duration) -> BenchResult<Latencies> {
    target.put_queue(queue).await?;
    let padding = "x".repeat(BODY_BYTES);
    let path = format!("/v1/queues/{queue}/messages");
    let mut samples = Vec::new();
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < window {
        let json = format!(r#"{{"body":"{}"}}"#, padded_body(n, &padding));
        let t = Instant::now();
        let response = target.post(&path, json).send().await?;
        expect_status(response, &[201]).await?.bytes().await?;
        samples.push(t.elapsed());
        n += 1;
    }
    Ok(Latencies::of(samples))
}

/// One client, one `GET /healthz` at a time.
async fn noop_latency(target: &Target, window: Duration) -> BenchResult<Latencies> {
    let url = format!("{}/healthz", target.base);
    let mut samples = Vec::new();
    let start = Instant::now();
    while start.elapsed() < window {
        let t = Instant::now();
        let response = target.client.get(&url).send().await?;
        expect_status(response, &[200]).await?.bytes().await?;
        samples.push(t.elapsed());
    }
    Ok(Latencies::of(samples))
}

async fn start_server(data_dir: &Path) -> BenchResult<Target> {
    let settings = Settings::resolve(&CommonArgs {
        listen: Some("127.0.0.1:0".into()),
        data_dir: Some(data_dir.to_path_buf()),
        jwt_secret: Some("x".repeat(40).into()),
        ..Default::default()
    })?;
    let app = Application::build(&settings).await?;
    let addr = app.local_addr()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let token = app.state().auth.mint(
        Some(&TenantId::parse("bench")?),
        &[
            Scope::QueuesManage,
            Scope::MessagesSend,
            Scope::MessagesConsume,
        ],
        now,
        3600,
    )?;
    tokio::spawn(app.run_until_stopped());
    let client = reqwest::Client::builder()
        .pool_max_idle_per_host(64)
        .tcp_nodelay(true)
        .build()?;
    Ok(Target {
        client,
        base: format!("http://{addr}"),
        bearer: format!("Bearer {token}"),
    })
}

/// One row of the throughput table.
fn throughput_row(label: &str, runs_text: &str, msgs: Option<f64>, reqs: f64, vs: f64, tail: &str) {
    let msgs = msgs.map_or_else(|| "-".to_owned(), |m| format!("{m:.0}"));
    println!("| {label:<40} | {runs_text:<20} | {msgs:>13} | {reqs:>10.0} | {vs:>13.2}x | {tail}");
}

async fn run(plan: &Plan, quick: bool, data: &Path, fs: &str) -> BenchResult<()> {
    let target = start_server(data).await?;
    let clients = PRODUCERS + CONSUMERS;
    println!(
        "## sluice-gateway: HTTP end to end{}",
        if quick { " (QUICK)" } else { "" }
    );
    println!();
    println!(
        "data dir {} ({fs}); {} cores shared by server and load generator; \
         {PRODUCERS} producers + {CONSUMERS} consumers; {BODY_BYTES} B bodies; \
         {} x {:.0} s windows, alternating",
        data.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        plan.repetitions,
        plan.window.as_secs_f64()
    );

    let mut ceiling = Vec::new();
    let mut ceiling_cores = Vec::new();
    let mut flows: [Vec<Flow>; 2] = [Vec::new(), Vec::new()];
    for rep in 1..=plan.repetitions {
        let (rate, cores) = noop_ceiling(&target, clients, plan.window).await?;
        eprintln!("rep {rep}: GET /healthz {rate:.0} req/s");
        ceiling.push(rate);
        ceiling_cores.push(cores);
        for (slot, batch) in [(0usize, 1usize), (1, 10)] {
            let f = flow(&target, &format!("b{batch}-r{rep}"), batch, plan.window).await?;
            eprintln!(
                "rep {rep}: batch {batch}: {:.0} msgs/s, {:.0} req/s, sent {}, lost {}, \
                 duplicates {}, empty receives {}",
                f.msgs_per_second,
                f.requests_per_second,
                f.sent,
                f.lost,
                f.duplicates,
                f.empty_receives
            );
            flows[slot].push(f);
        }
    }
    let ceiling_m = median(&ceiling);

    println!();
    println!("### Throughput ({PRODUCERS} producers + {CONSUMERS} consumers, one queue, 1 KiB)");
    println!();
    println!(
        "| workload                                 | msgs/s per run       | msgs/s median \
         | HTTP req/s | req/s vs no-op | CPU cores busy | sent | lost | duplicates |"
    );
    println!(
        "|------------------------------------------|----------------------|--------------:\
         |-----------:|---------------:|---------------:|-----:|-----:|-----------:|"
    );
    throughput_row(
        &format!("no-op ceiling: GET /healthz, {clients} clients"),
        &runs(&ceiling),
        None,
        ceiling_m,
        1.0,
        &format!("{:>14.2} | - | - | - |", median(&ceiling_cores)),
    );
    let mut msgs_medians = [0.0; 2];
    for (slot, label) in ["batches of 1", "batches of 10"].into_iter().enumerate() {
        let f = &flows[slot];
        let msgs: Vec<f64> = f.iter().map(|x| x.msgs_per_second).collect();
        let reqs = median(&f.iter().map(|x| x.requests_per_second).collect::<Vec<_>>());
        let cores = median(&f.iter().map(|x| x.cores_busy).collect::<Vec<_>>());
        msgs_medians[slot] = median(&msgs);
        throughput_row(
            &format!("send + receive + delete, {label}"),
            &runs(&msgs),
            Some(msgs_medians[slot]),
            reqs,
            reqs / ceiling_m,
            &format!(
                "{cores:>14.2} | {} | {} | {} |",
                f.iter().map(|x| x.sent).sum::<u64>(),
                f.iter().map(|x| x.lost).sum::<u64>(),
                f.iter().map(|x| x.duplicates).sum::<u64>(),
            ),
        );
    }
    let [m1, m10] = msgs_medians;
    println!();
    println!("batches of 10 / batches of 1: {:.1}x msgs/s", m10 / m1);
    println!(
        "msgs/s as a fraction of no-op req/s: batches of 1 {:.3}, batches of 10 {:.3} \
         (a message costs 3 requests at batch 1, 0.3 at batch 10)",
        m1 / ceiling_m,
        m10 / ceiling_m
    );

    let noop = noop_latency(&target, plan.latency_window).await?;
    let send = send_latency(&target, "latency", plan.latency_window).await?;
    println!();
    println!("### Single-client latency (one request at a time, keep-alive)");
    println!();
    println!(
        "| request                              |  samples |  p50 (ms) |  p99 (ms) \
         | p99.9 (ms) |  max (ms) |"
    );
    println!(
        "|--------------------------------------|---------:|----------:|----------:\
         |-----------:|----------:|"
    );
    noop.row("GET /healthz (no-op)");
    send.row("POST /messages, 1 KiB (durable send)");
    Ok(())
}

fn main() -> BenchResult<()> {
    let quick = std::env::var("SLUICE_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0");
    let plan = if quick { Plan::quick() } else { Plan::full() };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (base, fs) = scratch_base()?;
    let data = tempfile::Builder::new()
        .prefix("sluice-http-bench-")
        .tempdir_in(&base)?;
    runtime.block_on(run(&plan, quick, data.path(), &fs))?;
    // The server task goes with the runtime; then the data folder.
    drop(runtime);
    drop(data);
    Ok(())
}
