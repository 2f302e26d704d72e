//! The retention-expiry sweep over a simulated day, on both engines, called directly (no
//! gateway): does a round cost in proportion to what is due, not to what is stored?
//!
//! 1,000,000 messages (256-byte bodies) go into 100 queues whose `message_retention_seconds`
//! is 86,400, in sends of 10 messages each to one queue, the sends' `now` spread evenly over 24
//! simulated hours (one send every 864 ms, the queues in turn). Engines take time from the
//! caller, so the day after is then walked through with `Upkeep::expire(now)` rounds at
//! simulated instants, in order:
//!
//! * **settle**: one round an hour before the first expiry (Redis sweeps the queues it filed
//!   as due when they were created);
//! * **nothing due**: a round every simulated second for the minute before the first expiry,
//!   with every message still stored;
//! * **start**: a round every second for the first minute of expiries;
//! * **coarse 1**: a round every 10 minutes up to the middle of the day;
//! * **middle**: a round every second for a minute at the middle of the day;
//! * **coarse 2**: a round every 10 minutes to the end of the day (the last one expires the
//!   last messages).
//!
//! Per round: messages expired and wall time (and this process's CPU time, summed per window:
//! it is counted in 10 ms ticks); on Redis also the
//! commands redis-server ran (`INFO commandstats` deltas, commands inside scripts included,
//! `INFO` itself left out), the scripts among them (`EVALSHA`), and the scripts' time inside
//! Redis. The embedded engine exposes no counters: its rounds are measured by wall and CPU time.
//!
//! Run: `cargo bench -p sluice-gateway --bench expiry` (needs `redis-server` on the PATH).
//! `SLUICE_BENCH_QUICK=1` shrinks the day's messages to 20,000 (a smoke run).
//! `SLUICE_BENCH_ENGINES=embedded` (or `redis`) runs one engine only;
//! `SLUICE_BENCH_EXPIRY_QUEUES=n` spreads the messages over `n` queues instead of 100.

use futures_util::stream::{self, StreamExt, TryStreamExt};
use sluice_bench_support::flow::message_id;
use sluice_bench_support::system::{own_cpu_seconds, scratch_base};
use sluice_bench_support::BenchResult;
use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{Engine, Millis, NewMessage, QueueConfig, QueueKey, QueueName, TenantId};
use sluice_redis::{RedisEngine, RedisOptions};
use sluice_testkit::RedisServer;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TENANT: &str = "bench";
const DAY_MS: i64 = 86_400_000;
const SECOND_MS: i64 = 1_000;
const RETENTION_SECONDS: u32 = 86_400;
/// Messages per send call (SQS's batch limit).
const BATCH: u64 = 10;
/// Concurrent send calls while filling.
const SENDERS: usize = 16;
/// Body bytes: the sweep never reads bodies, and small ones keep the fill short on a shared
/// machine.
const BODY_BYTES: usize = 256;
/// Rounds in each per-second window.
const WINDOW_ROUNDS: i64 = 60;
/// Step of the coarse sweeps.
const COARSE_STEP_MS: i64 = 600 * SECOND_MS;

/// What one round did.
struct Round {
    window: &'static str,
    expired: u64,
    wall: Duration,
    cpu: Duration,
    redis: Option<RedisWork>,
}

/// What redis-server ran for one round.
#[derive(Default, Clone, Copy)]
struct RedisWork {
    commands: u64,
    scripts: u64,
    script_usec: u64,
}

type CommandStats = HashMap<String, (u64, u64)>;

/// `INFO commandstats` as (calls, usec) per command, without `INFO` itself.
fn commandstats(redis: &RedisServer) -> BenchResult<CommandStats> {
    let text = redis.query(&["INFO", "commandstats"])?;
    let mut stats = HashMap::new();
    for line in text.lines() {
        let Some((name, fields)) = line.trim().split_once(':') else {
            continue;
        };
        let Some(name) = name.strip_prefix("cmdstat_") else {
            continue;
        };
        if name == "info" {
            continue;
        }
        let field = |key: &str| -> u64 {
            fields
                .split(',')
                .find_map(|f| f.strip_prefix(key)?.strip_prefix('=')?.parse().ok())
                .unwrap_or(0)
        };
        stats.insert(name.to_owned(), (field("calls"), field("usec")));
    }
    Ok(stats)
}

fn work_between(before: &CommandStats, after: &CommandStats) -> RedisWork {
    let mut work = RedisWork::default();
    for (name, &(calls, usec)) in after {
        let (calls0, usec0) = before.get(name).copied().unwrap_or((0, 0));
        work.commands += calls - calls0;
        if name == "evalsha" || name == "eval" {
            work.scripts += calls - calls0;
            work.script_usec += usec - usec0;
        }
    }
    work
}

fn now_millis() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

/// The rounds: their window and instant relative to the first expiry, in order.
fn schedule() -> Vec<(&'static str, i64)> {
    let seconds =
        |window, from: i64| (0..WINDOW_ROUNDS).map(move |i| (window, from + i * SECOND_MS));
    let half = DAY_MS / 2;
    let mut rounds = vec![("settle", -3_600 * SECOND_MS)];
    rounds.extend(seconds("nothing due", -WINDOW_ROUNDS * SECOND_MS));
    rounds.extend(seconds("start", 0));
    rounds.extend((1..half / COARSE_STEP_MS).map(|j| ("coarse 1", j * COARSE_STEP_MS)));
    rounds.extend(seconds("middle", half));
    rounds.extend((1..=half / COARSE_STEP_MS).map(|j| ("coarse 2", half + j * COARSE_STEP_MS)));
    rounds
}

fn queue_key(queue: usize) -> BenchResult<QueueKey> {
    Ok(QueueKey::new(
        TenantId::parse(TENANT)?,
        QueueName::parse(&format!("expiry-{queue}"))?,
    ))
}

/// Creates the queues and sends `messages` into them, the sends' `now` spread evenly over the
/// day from `t0`. Answers the time the fill took.
async fn fill<E: Engine>(
    engine: &Arc<E>,
    t0: i64,
    messages: u64,
    queues: usize,
) -> BenchResult<Duration> {
    let started = Instant::now();
    let tenant = TenantId::parse(TENANT)?;
    engine.ensure_tenant(&tenant, None, t0 as Millis).await?;
    let mut config = QueueConfig::with_defaults(1_048_576);
    config.message_retention_seconds = RETENTION_SECONDS;
    let keys: Vec<QueueKey> = (0..queues).map(queue_key).collect::<BenchResult<_>>()?;
    for key in &keys {
        engine.put_queue(key, config.clone(), t0 as Millis).await?;
    }
    let body = "x".repeat(BODY_BYTES);
    let sends = messages / BATCH;
    stream::iter(0..sends)
        .map(|k| {
            let engine = engine.clone();
            let key = keys[(k % queues as u64) as usize].clone();
            let body = body.clone();
            async move {
                let now = (t0 + (k as i64) * DAY_MS / sends as i64) as Millis;
                let batch = (0..BATCH)
                    .map(|j| NewMessage {
                        payload: None,
                        message_id: message_id(k * BATCH + j),
                        body: body.clone(),
                        attributes: BTreeMap::new(),
                        visible_at: now,
                        group_id: None,
                        deduplication_id: None,
                    })
                    .collect();
                let answers = engine.send(&key, batch, now).await?;
                if answers.iter().any(Result::is_err) {
                    return Err(format!("a send into {key:?} was refused: {answers:?}").into());
                }
                BenchResult::Ok(())
            }
        })
        .buffer_unordered(SENDERS)
        .try_collect::<()>()
        .await?;
    Ok(started.elapsed())
}

/// Runs the schedule's rounds; `d` is the instant the first message expires.
async fn rounds<E: Engine>(
    engine: &Arc<E>,
    d: i64,
    redis: Option<&RedisServer>,
) -> BenchResult<Vec<Round>> {
    let mut out = Vec::new();
    for (window, offset) in schedule() {
        let before = redis.map(commandstats).transpose()?;
        let cpu = own_cpu_seconds();
        let started = Instant::now();
        let expired = engine.expire((d + offset) as Millis).await?;
        let wall = started.elapsed();
        let cpu = Duration::from_secs_f64((own_cpu_seconds() - cpu).max(0.0));
        let redis = match (redis, before) {
            (Some(redis), Some(before)) => Some(work_between(&before, &commandstats(redis)?)),
            _ => None,
        };
        out.push(Round {
            window,
            expired,
            wall,
            cpu,
            redis,
        });
    }
    Ok(out)
}

/// Nearest-rank quantile of unsorted values.
fn quantile(values: &[f64], q: f64) -> f64 {
    let mut sorted = values.to_vec();
    sorted.sort_by(f64::total_cmp);
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

fn spread(values: &[f64], digits: usize) -> String {
    format!(
        "{:.digits$} / {:.digits$} / {:.digits$}",
        quantile(values, 0.5),
        quantile(values, 0.99),
        quantile(values, 1.0)
    )
}

fn report(engine: &str, rounds: &[Round]) {
    println!();
    println!("#### {engine}: per window (median / p99 / max per round)");
    println!();
    let redis = rounds.iter().any(|r| r.redis.is_some());
    if redis {
        println!("| window | rounds | expired per round | wall ms | CPU ms, whole window (bench process) | Redis commands | scripts (EVALSHA) | script µs in Redis | commands per expired message | scripts per expired message |");
        println!("|---|---:|---|---|---|---|---|---|---:|---:|");
    } else {
        println!("| window | rounds | expired per round | wall ms | CPU ms, whole window | wall µs per expired message |");
        println!("|---|---:|---|---|---|---:|");
    }
    let mut windows: Vec<&str> = Vec::new();
    for r in rounds {
        if !windows.contains(&r.window) {
            windows.push(r.window);
        }
    }
    for window in windows {
        let these: Vec<&Round> = rounds.iter().filter(|r| r.window == window).collect();
        let col = |f: &dyn Fn(&Round) -> f64| these.iter().map(|r| f(r)).collect::<Vec<f64>>();
        let expired = col(&|r| r.expired as f64);
        let wall = col(&|r| r.wall.as_secs_f64() * 1e3);
        let cpu = col(&|r| r.cpu.as_secs_f64() * 1e3);
        let sum_expired: f64 = expired.iter().sum();
        let per = |total: f64| {
            if sum_expired > 0.0 {
                format!("{:.3}", total / sum_expired)
            } else {
                "-".into()
            }
        };
        let head = format!(
            "| {window} | {} | {} | {} | {:.0} |",
            these.len(),
            spread(&expired, 0),
            spread(&wall, 2),
            cpu.iter().sum::<f64>()
        );
        if redis {
            let work = |f: &dyn Fn(RedisWork) -> u64| col(&|r| r.redis.map_or(0, f) as f64);
            let commands = work(&|w| w.commands);
            let scripts = work(&|w| w.scripts);
            let usec = work(&|w| w.script_usec);
            println!(
                "{head} {} | {} | {} | {} | {} |",
                spread(&commands, 0),
                spread(&scripts, 0),
                spread(&usec, 0),
                per(commands.iter().sum()),
                per(scripts.iter().sum()),
            );
        } else {
            println!("{head} {} |", per(wall.iter().sum::<f64>() * 1e3));
        }
    }
    let total: u64 = rounds.iter().map(|r| r.expired).sum();
    println!();
    println!(
        "{engine}: {total} messages expired over {} rounds",
        rounds.len()
    );
}

fn run<E: Engine>(
    label: &str,
    runtime: &tokio::runtime::Runtime,
    engine: Arc<E>,
    messages: u64,
    queues: usize,
    redis: Option<&RedisServer>,
) -> BenchResult<()> {
    // The day starts a day ago, so the expiries fall around the real clock's now.
    let t0 = now_millis() - DAY_MS;
    let took = runtime.block_on(fill(&engine, t0, messages, queues))?;
    println!(
        "{label}: filled {messages} messages into {queues} queues in {:.1} s ({:.0} msgs/s)",
        took.as_secs_f64(),
        messages as f64 / took.as_secs_f64()
    );
    let rounds = runtime.block_on(rounds(&engine, t0 + DAY_MS, redis))?;
    report(label, &rounds);
    let total: u64 = rounds.iter().map(|r| r.expired).sum();
    if total != messages {
        return Err(format!("{label}: {total} messages expired, {messages} sent").into());
    }
    Ok(())
}

fn main() -> BenchResult<()> {
    let quick = sluice_bench_support::quick();
    let messages: u64 = if quick { 20_000 } else { 1_000_000 };
    let queues: usize = std::env::var("SLUICE_BENCH_EXPIRY_QUEUES")
        .ok()
        .and_then(|q| q.parse().ok())
        .unwrap_or(100);
    let engines = std::env::var("SLUICE_BENCH_ENGINES").unwrap_or_default();
    let wanted = |name: &str| engines.is_empty() || engines.split(',').any(|e| e.trim() == name);
    let (base, fs) = scratch_base()?;
    let scratch = tempfile::Builder::new()
        .prefix("sluice-expiry-bench-")
        .tempdir_in(&base)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    println!(
        "## sluice-gateway: expiry rounds over a simulated day{}",
        if quick { " (QUICK)" } else { "" }
    );
    println!();
    println!(
        "{messages} messages of {BODY_BYTES} bytes, {queues} queues, retention {RETENTION_SECONDS} s, \
         sends of {BATCH}; data dir {} ({fs}); {} cores; redis-server without persistence",
        scratch.path().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    if wanted("embedded") {
        let engine = EmbeddedEngine::open(scratch.path(), EmbeddedOptions::default())?;
        run(
            "embedded",
            &runtime,
            Arc::new(engine),
            messages,
            queues,
            None,
        )?;
    }
    if wanted("redis") {
        let redis = RedisServer::start()?;
        let engine = runtime.block_on(RedisEngine::connect(
            &redis.url(),
            RedisOptions {
                key_prefix: "bench-expiry".into(),
                ..RedisOptions::default()
            },
        ))?;
        run(
            "Redis",
            &runtime,
            Arc::new(engine),
            messages,
            queues,
            Some(&redis),
        )?;
    }
    Ok(())
}
