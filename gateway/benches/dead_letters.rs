//! Dead letters and background work, measured in one run on both engines, each figure against
//! a baseline of the same run:
//!
//! 1. **Receive + delete with a redrive policy vs without**: a queue pre-filled with N 1 KiB
//!    messages is drained by 8 consumers (receive 10, batch delete); msgs/s is N over the time
//!    to the last delete. Queues with and without a `redrive_policy` (max_receive_count 5, so
//!    nothing actually moves) alternate, 5 repetitions each; the per-repetition ratio is the
//!    figure (target ≥ 0.95).
//! 2. **Redrive task rate**: a DLQ filled past what the task can move in the window, a task
//!    with a `destination` at 10, 100 and 500 msgs/s; `moved` over the elapsed time, against
//!    the asked rate (whole window, and after its first second), then the task is cancelled.
//! 3. **Idle CPU**: one gateway with 0 queues, then the same gateway with 100,000 idle queues:
//!    the process's CPU time over an idle window, as % of one core. On Redis also redis-server's
//!    CPU, the `EVALSHA` calls in that window (`INFO commandstats`), and a `MONITOR` window
//!    after it that names every script, so expiry scripts per round are told apart from the
//!    queue-gauge sampler's `queue_info` calls.
//! 4. **Work per expiry round vs queues due** (Redis): 10,000 queues with a retention of 60 s,
//!    each holding one message, sent at a paced rate so their expiries spread over the send
//!    window. `MONITOR` marks each round (its `ZRANGEBYSCORE` on `{P}:expiry-due`, whose
//!    argument is the round's `now`) and counts the expiry scripts in it; the due index,
//!    read before the first expiry, says how many queues fell due since the round before.
//!
//! Each gateway runs on its own tokio runtime (threads `sluice-srv`), dropped with the phase,
//! so no earlier phase's background jobs run in a later phase's window; the load runs on
//! another runtime (`bench-load`). The thread count printed with each idle window shows that.
//!
//! Run: `cargo bench -p sluice-gateway --bench dead_letters` (needs `redis-server` on the
//! PATH). `SLUICE_BENCH_PHASES=3,4` runs only the phases listed. `SLUICE_BENCH_QUICK=1` shrinks every phase to a smoke run; phase 4 then stops before
//! any message expires (the retention minimum is 60 s) and reports only the rounds with
//! nothing due.

mod common;
#[path = "common/phases.rs"]
mod phases;

use common::{expect_status, Http};
use phases::{load_runtime, wanted, Store, Stores};
use serde_json::Value;
use sluice_bench_support::flow::{Driver as _, BODY_BYTES};
use sluice_bench_support::stats::{median_or_nan as median, runs};
use sluice_bench_support::system::{own_cpu_seconds, scratch_base};
use sluice_bench_support::BenchResult;
use sluice_testkit::RedisServer;
use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader, Write as _};
use std::net::TcpStream;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TENANT: &str = "bench";
const CONSUMERS: usize = 8;
const PRODUCERS: usize = 8;
/// Concurrent queue creations.
const CREATORS: usize = 64;
/// Receive count after which a message would move; never reached (each is received once).
const MAX_RECEIVE_COUNT: u32 = 5;
const REDRIVE_RATES: [u32; 3] = [10, 100, 500];

struct Plan {
    repetitions: usize,
    drain_messages: u64,
    redrive_window: Duration,
    idle_queues: usize,
    settle: Duration,
    idle_window: Duration,
    monitor_window: Duration,
    due_queues: usize,
    due_send_window: Duration,
}

impl Plan {
    fn full() -> Self {
        Self {
            repetitions: 5,
            drain_messages: 30_000,
            redrive_window: Duration::from_secs(6),
            idle_queues: 100_000,
            settle: Duration::from_secs(5),
            idle_window: Duration::from_secs(20),
            monitor_window: Duration::from_secs(5),
            due_queues: 10_000,
            due_send_window: Duration::from_secs(20),
        }
    }

    fn quick() -> Self {
        Self {
            repetitions: 1,
            drain_messages: 2_000,
            redrive_window: Duration::from_secs(2),
            idle_queues: 2_000,
            settle: Duration::from_secs(1),
            idle_window: Duration::from_secs(2),
            monitor_window: Duration::from_secs(2),
            due_queues: 200,
            due_send_window: Duration::from_secs(2),
        }
    }
}

fn prefix(phase: &str) -> String {
    format!("bench-dl-{phase}")
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, Iterator::count)
}

// ---------------------------------------------------------------------------------------------
// HTTP helpers beyond `common`.

async fn put_queue_with(http: &Http, queue: &str, config: &Value) -> BenchResult<()> {
    let response = http
        .client
        .put(format!("{}/v1/queues/{queue}", http.base))
        .header("authorization", &http.bearer)
        .header("content-type", "application/json")
        .body(config.to_string())
        .send()
        .await?;
    expect_status(response, &[200, 201]).await?;
    Ok(())
}

async fn get_json(http: &Http, path: &str) -> BenchResult<Value> {
    let response = http
        .client
        .get(format!("{}{path}", http.base))
        .header("authorization", &http.bearer)
        .send()
        .await?;
    Ok(expect_status(response, &[200]).await?.json().await?)
}

/// Sends `count` 1 KiB messages to `queue` from 8 producers in batches of 10.
async fn fill(http: &Http, queue: &str, count: u64) -> BenchResult<()> {
    let next = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for _ in 0..PRODUCERS {
        let driver = common::HttpDriver {
            http: http.clone(),
            queue: queue.to_owned(),
        };
        let next = Arc::clone(&next);
        tasks.push(tokio::spawn(async move {
            let padding = "x".repeat(BODY_BYTES);
            loop {
                let first = next.fetch_add(10, Ordering::Relaxed);
                if first >= count {
                    return Ok::<(), Box<dyn std::error::Error + Send + Sync>>(());
                }
                let batch = (count - first).min(10) as usize;
                driver.send(first, batch, &padding).await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

/// Drains `queue` with 8 consumers (receive up to 10, batch delete) until a receive finds it
/// empty; answers messages deleted and the time from the start to the last delete.
async fn drain(http: &Http, queue: &str) -> BenchResult<(u64, Duration)> {
    let deleted = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..CONSUMERS {
        let driver = common::HttpDriver {
            http: http.clone(),
            queue: queue.to_owned(),
        };
        let deleted = Arc::clone(&deleted);
        tasks.push(tokio::spawn(async move {
            let mut last_delete = Duration::ZERO;
            loop {
                let got = driver.receive(10).await?;
                if got.is_empty() {
                    return Ok::<Duration, Box<dyn std::error::Error + Send + Sync>>(last_delete);
                }
                let n = got.len() as u64;
                driver
                    .delete(got.into_iter().map(|(_, h)| h).collect(), 10)
                    .await?;
                deleted.fetch_add(n, Ordering::Relaxed);
                last_delete = start.elapsed();
            }
        }));
    }
    let mut elapsed = Duration::ZERO;
    for task in tasks {
        elapsed = elapsed.max(task.await??);
    }
    Ok((deleted.load(Ordering::Relaxed), elapsed))
}

/// Creates `names` with `CREATORS` concurrent PUTs, each with `config`.
async fn create_queues(http: &Http, names: Vec<String>, config: Value) -> BenchResult<()> {
    let names = Arc::new(Mutex::new(names));
    let config = Arc::new(config);
    let mut tasks = Vec::new();
    for _ in 0..CREATORS {
        let (http, names, config) = (http.clone(), Arc::clone(&names), Arc::clone(&config));
        tasks.push(tokio::spawn(async move {
            loop {
                let next = names.lock().map_err(|_| "poisoned")?.pop();
                let Some(name) = next else {
                    return Ok::<(), Box<dyn std::error::Error + Send + Sync>>(());
                };
                put_queue_with(&http, &name, &config).await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Redis observation.

fn redis_info(redis: &RedisServer, section: &str) -> BenchResult<HashMap<String, String>> {
    Ok(redis
        .query(&["INFO", section])?
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect())
}

fn redis_cpu(redis: &RedisServer) -> BenchResult<f64> {
    let fields = redis_info(redis, "cpu")?;
    let get = |k: &str| {
        fields
            .get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    Ok(get("used_cpu_user") + get("used_cpu_sys"))
}

fn evalsha_calls(redis: &RedisServer) -> BenchResult<u64> {
    Ok(redis_info(redis, "commandstats")?
        .get("cmdstat_evalsha")
        .and_then(|v| v.strip_prefix("calls=")?.split(',').next()?.parse().ok())
        .unwrap_or(0))
}

macro_rules! queue_script {
    ($shebang:literal, $file:literal) => {
        concat!(
            $shebang,
            "\n",
            include_str!("../../services/redis/src/ops/queue.lua"),
            include_str!(concat!("../../services/redis/src/ops/", $file))
        )
    };
}

macro_rules! registry_script {
    ($shebang:literal, $file:literal) => {
        concat!(
            $shebang,
            "\n",
            include_str!(concat!("../../services/redis/src/ops/", $file))
        )
    };
}

/// The scripts an idle gateway may run, as `services/redis/src/scripts.rs` builds them, by SHA.
fn script_names() -> HashMap<String, &'static str> {
    [
        (
            "expire",
            queue_script!("#!lua flags=allow-oom", "expire.lua"),
        ),
        (
            "queue_info",
            queue_script!("#!lua flags=no-writes", "queue_info.lua"),
        ),
        ("put_queue", queue_script!("#!lua", "put_queue.lua")),
        ("send", queue_script!("#!lua", "send.lua")),
        (
            "receive",
            queue_script!("#!lua flags=allow-oom", "receive.lua"),
        ),
        (
            "delete",
            queue_script!("#!lua flags=allow-oom", "delete.lua"),
        ),
        (
            "register_queue",
            registry_script!("#!lua", "register_queue.lua"),
        ),
        (
            "transfer_due",
            registry_script!("#!lua flags=no-writes", "transfer_due.lua"),
        ),
        ("record_put", registry_script!("#!lua", "record_put.lua")),
        (
            "rate_limit",
            registry_script!("#!lua flags=allow-oom", "rate_limit.lua"),
        ),
    ]
    .into_iter()
    .map(|(name, text)| (redis::Script::new(text).get_hash().to_owned(), name))
    .collect()
}

/// One expiry round as `MONITOR` saw it: its `now`, the scripts it ran.
#[derive(Default, Clone)]
struct Round {
    now: u64,
    expire_scripts: u64,
}

/// What `MONITOR` saw: scripts by name, and the expiry rounds in order.
#[derive(Default)]
struct Monitored {
    scripts: BTreeMap<String, u64>,
    rounds: Vec<Round>,
}

/// Counts commands on a `MONITOR` connection in a thread until `finish`.
struct Monitor {
    port: u16,
    tag: String,
    thread: std::thread::JoinHandle<BenchResult<Monitored>>,
}

impl Monitor {
    fn start(redis: &RedisServer, tag: &str) -> BenchResult<Self> {
        let names = script_names();
        let mut stream = TcpStream::connect(("127.0.0.1", redis.port()))?;
        stream.set_read_timeout(Some(Duration::from_secs(60)))?;
        stream.write_all(b"MONITOR\r\n")?;
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok)?;
        if ok.trim() != "+OK" {
            return Err(format!("MONITOR answered {ok:?}").into());
        }
        let mark = format!("\"ECHO\" \"{tag}\"");
        let thread = std::thread::spawn(move || {
            let mut seen = Monitored::default();
            let mut line = Vec::new();
            loop {
                line.clear();
                if reader.read_until(b'\n', &mut line)? == 0 {
                    return Err("MONITOR connection closed".into());
                }
                let head = String::from_utf8_lossy(&line[..line.len().min(300)]);
                if head.contains(&mark) {
                    return Ok(seen);
                }
                // Commands scripts issue themselves.
                if head.contains(" lua] ") {
                    continue;
                }
                let mut quoted = head.split('"').skip(1).step_by(2);
                let Some(command) = quoted.next() else {
                    continue;
                };
                match command.to_uppercase().as_str() {
                    "EVALSHA" => {
                        let sha = quoted.next().unwrap_or_default().to_lowercase();
                        let name = names.get(&sha).copied().unwrap_or("(other script)");
                        *seen.scripts.entry(name.to_owned()).or_insert(0) += 1;
                        if name == "expire" {
                            if let Some(round) = seen.rounds.last_mut() {
                                round.expire_scripts += 1;
                            }
                        }
                    }
                    "ZRANGEBYSCORE" => {
                        let key = quoted.next().unwrap_or_default();
                        let _min = quoted.next();
                        let now = quoted.next().and_then(|n| n.parse::<u64>().ok());
                        if let (true, Some(now)) = (key.ends_with(":expiry-due"), now) {
                            // Later pages of one round ask with the same `now`.
                            if seen.rounds.last().is_none_or(|r| r.now != now) {
                                seen.rounds.push(Round {
                                    now,
                                    expire_scripts: 0,
                                });
                            }
                        }
                    }
                    _ => {}
                }
            }
        });
        Ok(Self {
            port: redis.port(),
            tag: tag.to_owned(),
            thread,
        })
    }

    fn finish(self) -> BenchResult<Monitored> {
        sluice_testkit::query(self.port, &["ECHO", &self.tag])?;
        self.thread.join().map_err(|_| "MONITOR thread panicked")?
    }
}

// ---------------------------------------------------------------------------------------------
// The phases.

/// Phase 1: msgs/s of the drain with and without a policy, alternating; per-rep ratios.
async fn policy_overhead(http: &Http, plan: &Plan, store: Store) -> BenchResult<()> {
    // The DLQ is created like any queue; nothing is ever received from it here.
    drop(http.driver("dlq").await?);
    let policy = serde_json::json!({
        "redrive_policy": {"dead_letter_queue": "dlq", "max_receive_count": MAX_RECEIVE_COUNT}
    });
    let mut rates: [Vec<f64>; 2] = [Vec::new(), Vec::new()];
    let mut ratios = Vec::new();
    for rep in 1..=plan.repetitions {
        let mut this_rep = [0.0; 2];
        // Alternate which one goes first, so a drift in the machine's load favours neither.
        let order = if rep % 2 == 1 { [0, 1] } else { [1, 0] };
        for slot in order {
            let queue = format!("{}-r{rep}", ["plain", "policy"][slot]);
            let config = if slot == 1 {
                policy.clone()
            } else {
                serde_json::json!({})
            };
            put_queue_with(http, &queue, &config).await?;
            fill(http, &queue, plan.drain_messages).await?;
            let (deleted, elapsed) = drain(http, &queue).await?;
            if deleted != plan.drain_messages {
                return Err(format!(
                    "{queue}: deleted {deleted} of {} messages",
                    plan.drain_messages
                )
                .into());
            }
            let rate = deleted as f64 / elapsed.as_secs_f64();
            eprintln!(
                "{} rep {rep}: {queue}: {rate:.0} msgs/s ({deleted} in {:.2} s)",
                store.label(),
                elapsed.as_secs_f64()
            );
            this_rep[slot] = rate;
            rates[slot].push(rate);
        }
        ratios.push(this_rep[1] / this_rep[0]);
    }
    let dlq = get_json(http, "/v1/queues/dlq").await?;
    println!(
        "| {} | {} | {:.0} | {} | {:.0} | {} | **{:.3}** | {} |",
        store.label(),
        runs(&rates[0]),
        median(&rates[0]),
        runs(&rates[1]),
        median(&rates[1]),
        ratios
            .iter()
            .map(|r| format!("{r:.3}"))
            .collect::<Vec<_>>()
            .join(", "),
        median(&ratios),
        dlq["stats"]["visible"].as_u64().unwrap_or(0)
            + dlq["stats"]["in_flight"].as_u64().unwrap_or(0),
    );
    Ok(())
}

/// Phase 2: one redrive task per rate; achieved over asked.
async fn redrive_rates(http: &Http, plan: &Plan, store: Store) -> BenchResult<()> {
    for rate in REDRIVE_RATES {
        let (dlq, destination) = (format!("dlq-{rate}"), format!("back-{rate}"));
        http.put_queue(&dlq).await?;
        http.put_queue(&destination).await?;
        // More than the task can move in the window, so it runs at its rate throughout.
        let count = (f64::from(rate) * plan.redrive_window.as_secs_f64() * 1.5) as u64 + 100;
        fill(http, &dlq, count).await?;
        let response = http
            .post(
                &format!("/v1/queues/{dlq}/redrive"),
                serde_json::json!({"max_messages_per_second": rate, "destination": destination})
                    .to_string(),
            )
            .send()
            .await?;
        let task: Value = expect_status(response, &[202]).await?.json().await?;
        let started = Instant::now();
        let id = task["id"]
            .as_str()
            .ok_or("redrive task without id")?
            .to_owned();
        let moved = |task: &Value| task["moved"].as_u64().unwrap_or(0);
        tokio::time::sleep(Duration::from_secs(1)).await;
        let after_first = get_json(http, &format!("/v1/redrive-tasks/{id}")).await?;
        let first_at = started.elapsed();
        tokio::time::sleep(plan.redrive_window.saturating_sub(first_at)).await;
        let end = get_json(http, &format!("/v1/redrive-tasks/{id}")).await?;
        let elapsed = started.elapsed();
        let response = http
            .client
            .delete(format!("{}/v1/redrive-tasks/{id}", http.base))
            .header("authorization", &http.bearer)
            .send()
            .await?;
        expect_status(response, &[200, 202, 204]).await?;
        let status = end["status"].as_str().unwrap_or("?").to_owned();
        let whole = moved(&end) as f64 / elapsed.as_secs_f64();
        let steady = (moved(&end) - moved(&after_first)) as f64
            / (elapsed - first_at).as_secs_f64().max(1e-3);
        let asked = f64::from(rate);
        println!(
            "| {} | {rate} | {:.1} | {} | {whole:.1} | **{:.3}** | {steady:.1} | {:.3} | {status} |",
            store.label(),
            elapsed.as_secs_f64(),
            moved(&end),
            whole / asked,
            steady / asked,
        );
    }
    Ok(())
}

/// CPU of this process (and on Redis, of redis-server and the `EVALSHA`s) over `window`.
struct Idle {
    process_percent: f64,
    redis_percent: f64,
    evalsha: u64,
    threads: usize,
}

fn measure_idle(redis: Option<&RedisServer>, window: Duration) -> BenchResult<Idle> {
    let threads = threads();
    let (redis_before, evalsha_before) = match redis {
        Some(r) => (redis_cpu(r)?, evalsha_calls(r)?),
        None => (0.0, 0),
    };
    let before = own_cpu_seconds();
    let start = Instant::now();
    std::thread::sleep(window);
    let process = own_cpu_seconds() - before;
    let seconds = start.elapsed().as_secs_f64();
    let (redis_seconds, evalsha) = match redis {
        // One INFO commandstats and one INFO cpu of the bench's own fall in the window.
        Some(r) => (
            redis_cpu(r)? - redis_before,
            evalsha_calls(r)? - evalsha_before,
        ),
        None => (f64::NAN, 0),
    };
    Ok(Idle {
        process_percent: 100.0 * process / seconds,
        redis_percent: 100.0 * redis_seconds / seconds,
        evalsha,
        threads,
    })
}

/// Phase 3: idle CPU with 0 queues, then with `idle_queues`, on one gateway.
fn idle_cpu(
    stores: &Stores,
    load: &tokio::runtime::Runtime,
    plan: &Plan,
    store: Store,
) -> BenchResult<()> {
    let (server, http) = stores.gateway(store, "idle", prefix("idle"), TENANT)?;
    let redis = (store == Store::Redis).then_some(&stores.redis);
    std::thread::sleep(plan.settle);
    let empty = measure_idle(redis, plan.idle_window)?;
    let names: Vec<String> = (0..plan.idle_queues).map(|i| format!("idle-{i}")).collect();
    let start = Instant::now();
    load.block_on(create_queues(&http, names, serde_json::json!({})))?;
    let created_in = start.elapsed().as_secs_f64();
    // Registering files a queue as due at once: wait for the sweep to have looked at each.
    let settle_start = Instant::now();
    if let Some(r) = redis {
        let key = format!("{{{}}}:expiry-due", prefix("idle"));
        while settle_start.elapsed() < Duration::from_secs(120) {
            let due: u64 = r
                .query(&["ZCOUNT", &key, "-inf", &now_millis().to_string()])?
                .parse()?;
            if due == 0 {
                break;
            }
            std::thread::sleep(Duration::from_millis(200));
        }
    }
    std::thread::sleep(plan.settle);
    let settled_in = settle_start.elapsed().as_secs_f64();
    eprintln!(
        "{}: idle window with {} queues starts",
        store.label(),
        plan.idle_queues
    );
    let full = measure_idle(redis, plan.idle_window)?;
    let monitored = match redis {
        Some(r) => {
            let monitor = Monitor::start(r, "idle-monitor-end")?;
            std::thread::sleep(plan.monitor_window);
            Some(monitor.finish()?)
        }
        None => None,
    };
    drop(server);
    eprintln!(
        "{}: {} queues created in {created_in:.1} s ({:.0}/s), settled in {settled_in:.1} s",
        store.label(),
        plan.idle_queues,
        plan.idle_queues as f64 / created_in
    );
    let secs = plan.idle_window.as_secs_f64();
    println!("| engine | queues | window s | process CPU (% of a core) | threads | redis-server CPU | EVALSHA in window |");
    println!("|---|---:|---:|---:|---:|---:|---:|");
    for (queues, idle) in [(0, &empty), (plan.idle_queues, &full)] {
        let redis_cols = if redis.is_some() {
            format!(
                "{:.2}% | {} ({:.0}/s)",
                idle.redis_percent,
                idle.evalsha,
                idle.evalsha as f64 / secs
            )
        } else {
            "- | -".to_owned()
        };
        println!(
            "| {} | {queues} | {secs:.0} | **{:.2}%** | {} | {redis_cols} |",
            store.label(),
            idle.process_percent,
            idle.threads,
        );
    }
    println!(
        "| {} | difference | | **{:+.2}%** | | |",
        store.label(),
        full.process_percent - empty.process_percent
    );
    if let Some(m) = monitored {
        let rounds = m.rounds.len().max(1) as f64;
        let expire: u64 = m.rounds.iter().map(|r| r.expire_scripts).sum();
        println!();
        println!(
            "{}, {} idle queues, MONITOR over {:.0} s: {} expiry rounds, {} expiry scripts \
             ({:.2} per round); scripts by name: {:?}",
            store.label(),
            plan.idle_queues,
            plan.monitor_window.as_secs_f64(),
            m.rounds.len(),
            expire,
            expire as f64 / rounds,
            m.scripts
        );
    }
    Ok(())
}

/// Phase 4 (Redis): queues each with one message, their expiries spread; per round, expiry
/// scripts vs queues that fell due since the previous round.
fn due_work(
    stores: &Stores,
    load: &tokio::runtime::Runtime,
    plan: &Plan,
    quick: bool,
) -> BenchResult<()> {
    let (server, http) = stores.gateway(Store::Redis, "due", prefix("due"), TENANT)?;
    let redis = &stores.redis;
    let retention_ms = 60_000u64;
    let config = serde_json::json!({"message_retention_seconds": retention_ms / 1000});
    let total = plan.due_queues;
    let pace = plan.due_send_window.as_secs_f64() / total as f64;
    let monitor = Monitor::start(redis, "due-monitor-end")?;
    let send_start = Instant::now();
    // Each queue is created and given its message at once, before the sweep's first look at
    // it (which would otherwise file it at creation + retention, a look with nothing due).
    load.block_on(async {
        let next = Arc::new(AtomicU64::new(0));
        let mut tasks = Vec::new();
        for _ in 0..CREATORS {
            let (http, next, config) = (http.clone(), Arc::clone(&next), config.clone());
            tasks.push(tokio::spawn(async move {
                let padding = "x".repeat(BODY_BYTES);
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= total as u64 {
                        return Ok::<(), Box<dyn std::error::Error + Send + Sync>>(());
                    }
                    let at = send_start + Duration::from_secs_f64(pace * i as f64);
                    tokio::time::sleep_until(at.into()).await;
                    let queue = format!("due-{i}");
                    put_queue_with(&http, &queue, &config).await?;
                    common::HttpDriver {
                        http: http.clone(),
                        queue,
                    }
                    .send(i, 1, &padding)
                    .await?;
                }
            }));
        }
        for task in tasks {
            task.await??;
        }
        Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
    })?;
    let sent_in = send_start.elapsed();
    // Let the sweep file every queue under its message's expiry, then read the index.
    std::thread::sleep(Duration::from_secs(3));
    let key = format!("{{{}}}:expiry-due", prefix("due"));
    let index = redis.query(&["ZRANGE", &key, "0", "-1", "WITHSCORES"])?;
    let mut due_times: Vec<u64> = index
        .lines()
        .skip(1)
        .step_by(2)
        .filter_map(|s| s.parse::<f64>().ok())
        .map(|s| s as u64)
        .collect();
    due_times.sort_unstable();
    let index_read_at = now_millis();
    let first_due = due_times.first().copied().unwrap_or(u64::MAX);
    let last_due = due_times.last().copied().unwrap_or(0);
    let wait_until = if quick {
        // Retention is at least 60 s: a smoke run watches only rounds with nothing due.
        now_millis() + 2_000
    } else {
        last_due + 3_000
    };
    while now_millis() < wait_until {
        std::thread::sleep(Duration::from_millis(200));
    }
    let seen = monitor.finish()?;
    drop(server);

    // Rounds from the index read on (in a full run, from 10 s before the first expiry):
    // earlier ones swept the queues just created, which the index read does not show.
    let threshold = if quick {
        index_read_at
    } else {
        first_due.saturating_sub(10_000).max(index_read_at)
    };
    let mut rows = Vec::new();
    let mut previous = None;
    for round in &seen.rounds {
        if let Some(prev) = previous {
            if round.now > threshold {
                let due = due_times
                    .iter()
                    .filter(|&&t| t > prev && t <= round.now)
                    .count() as u64;
                rows.push((round.now, due, round.expire_scripts));
            }
        }
        previous = Some(round.now);
    }
    let idle_rounds: Vec<&(u64, u64, u64)> = rows.iter().filter(|r| r.1 == 0).collect();
    let busy_rounds: Vec<&(u64, u64, u64)> = rows.iter().filter(|r| r.1 > 0).collect();
    let sum = |rs: &[&(u64, u64, u64)], f: fn(&(u64, u64, u64)) -> u64| -> u64 {
        rs.iter().map(|r| f(r)).sum()
    };
    println!(
        "{total} queues, retention 60 s, one message each, created + sent in {:.1} s; \
         {} entries in the due index, due from {} to {} ms after the first",
        sent_in.as_secs_f64(),
        due_times.len(),
        0,
        last_due.saturating_sub(first_due)
    );
    println!();
    println!("| rounds | queues due (sum) | expiry scripts (sum) | scripts per due queue | max scripts in one round |");
    println!("|---|---:|---:|---:|---:|");
    for (label, rs) in [
        ("with nothing due", &idle_rounds),
        ("with queues due", &busy_rounds),
    ] {
        let due = sum(rs, |r| r.1);
        let scripts = sum(rs, |r| r.2);
        println!(
            "| {} {label} | {due} | {scripts} | {} | {} |",
            rs.len(),
            if due > 0 {
                format!("{:.3}", scripts as f64 / due as f64)
            } else {
                "-".to_owned()
            },
            rs.iter().map(|r| r.2).max().unwrap_or(0),
        );
    }
    println!();
    println!(
        "per round (due/scripts): {}",
        rows.iter()
            .map(|r| format!("{}/{}", r.1, r.2))
            .collect::<Vec<_>>()
            .join(" ")
    );
    println!("scripts by name over the whole phase: {:?}", seen.scripts);
    Ok(())
}

fn main() -> BenchResult<()> {
    let quick = sluice_bench_support::quick();
    let plan = if quick { Plan::quick() } else { Plan::full() };
    let (base, fs) = scratch_base()?;
    let scratch = tempfile::Builder::new()
        .prefix("sluice-dl-bench-")
        .tempdir_in(&base)?;
    let stores = Stores {
        redis: RedisServer::start()?,
        scratch: scratch.path().to_path_buf(),
    };
    let load = load_runtime()?;
    let started = Instant::now();
    println!(
        "## sluice-gateway: dead letters and background work{}",
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
            "### 1. Receive + delete with a redrive policy vs without ({CONSUMERS} consumers, \
             receive 10 + batch delete, {} pre-filled 1 KiB messages per run, {} alternating reps)",
            plan.drain_messages, plan.repetitions
        );
        println!();
        println!("| engine | no policy msgs/s (runs) | median | with policy msgs/s (runs) | median | ratio per rep | ratio (median) | DLQ depth after |");
        println!("|---|---|---:|---|---:|---|---:|---:|");
        for store in [Store::Embedded, Store::Redis] {
            let (server, http) = stores.gateway(store, "policy", prefix("policy"), TENANT)?;
            load.block_on(policy_overhead(&http, &plan, store))?;
            drop(server);
        }
    }
    if wanted(2) {
        println!();
        println!(
            "### 2. Redrive task rate ({:.0} s per rate, `destination` given)",
            plan.redrive_window.as_secs_f64()
        );
        println!();
        println!("| engine | asked /s | elapsed s | moved | achieved /s | achieved / asked | after 1st s /s | after 1st s / asked | status at end |");
        println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
        for store in [Store::Embedded, Store::Redis] {
            let (server, http) = stores.gateway(store, "redrive", prefix("redrive"), TENANT)?;
            load.block_on(redrive_rates(&http, &plan, store))?;
            drop(server);
        }
    }
    if wanted(3) {
        println!();
        println!(
            "### 3. Idle CPU of one gateway: 0 queues, then {} idle queues",
            plan.idle_queues
        );
        println!();
        for store in [Store::Embedded, Store::Redis] {
            idle_cpu(&stores, &load, &plan, store)?;
            println!();
        }
    }
    if wanted(4) {
        println!("### 4. Expiry work per round vs queues due (Redis)");
        println!();
        due_work(&stores, &load, &plan, quick)?;
        println!();
    }
    println!("total bench time {:.0} s", started.elapsed().as_secs_f64());

    drop(load);
    drop(stores);
    drop(scratch);
    Ok(())
}
