//! Sluice on Redis against the Redis ceiling, in one run: how many Redis calls a message
//! operation costs, and what fraction of "the same scripts, driven directly" Sluice reaches.
//!
//! The bench starts its own `redis-server` (`sluice_testkit::RedisServer`: no AOF, no
//! snapshots) and, in this process, the real gateway over it (`Application::build` +
//! `run_until_stopped`, `store = redis://…`). The gateway runs on its own tokio runtime
//! (threads `sluice-srv`), the load generators on another (`bench-load`), so the CPU each side
//! used can be read per thread from `/proc/self/task`. It measures:
//!
//! 1. **Sluice over HTTP**: 8 producers + 8 consumers on one queue, 1 KiB bodies, batches of 1
//!    (single send, receive `max_messages: 1`, single `DELETE`) and of 10 (batch send, receive
//!    max 10, batch delete); receives long-poll (`wait_seconds: 1`).
//! 2. **The engine, directly**: the same 8 + 8 tasks calling `RedisEngine` through the
//!    `Engine` trait (no HTTP, no services layer), consumers waiting on `listen()` like the
//!    services' long poll. This splits Sluice's cost into "engine" and "HTTP + services".
//! 3. **The ceiling**: the same Lua scripts (`send`, `receive`, `delete`, byte for byte: the
//!    bench builds them from `src/ops/*.lua` as `scripts.rs` does and calls them by SHA,
//!    failing on `NOSCRIPT` if they drifted) sent with `EVALSHA` straight from 32 producer and
//!    32 consumer tasks over one multiplexed (pipelining) connection, pre-built arguments, no
//!    JSON encoder: what this Redis can do with these scripts, with little client CPU.
//!
//! Producers run for a fixed window; consumers then drain until every acknowledged message
//! is deleted. msgs/s is messages deleted over the time from the first send to the last
//! delete. Every message id is checked (lost and duplicate deliveries are counted). The
//! workloads alternate, repeated; medians are reported, and Sluice's rate as a fraction of the
//! ceiling's. Around every run the bench reads `INFO commandstats` (calls per operation:
//! `EVALSHA` per send batch + receive + delete batch, and any other top-level command),
//! `INFO cpu` of redis-server, per-thread CPU of this process, and `/proc/stat` (how busy the
//! whole machine was: other people's jobs share it). A last phase attaches `MONITOR` to count
//! calls per operation exactly, by script SHA (it slows Redis, so it is not timed), and a
//! single-client phase measures send latency alone.
//!
//! The targets it checks: one script call per send batch, per receive and per delete batch,
//! and Sluice reaching at least half of the rate at which the same scripts run directly
//! against the same Redis.
//!
//! It lives with the gateway's benches because it runs the gateway; the engine and the scripts
//! it reads from `services/redis`.
//!
//! Run: `cargo bench -p sluice-gateway --bench redis` (needs `redis-server` on the PATH).
//! `SLUICE_BENCH_QUICK=1` shrinks every phase (smoke run).

mod common;

use common::{start_gateway, Http, HttpDriver};
use sluice_bench_support::flow::{
    body_id, flow, message_id, padded_body, Driver as FlowDriver, Flow, Received, BODY_BYTES,
};
use sluice_bench_support::stats::{median_or_nan as median, ms, quantile, runs};
use sluice_bench_support::system::{machine_cpu, own_cpu_seconds, threads_cpu_seconds};
use sluice_bench_support::BenchResult;
use sluice_engine::{
    Messages, NewMessage, QueueConfig, QueueKey, QueueName, Queues, TenantId,
    DEDUPLICATION_WINDOW_MS, RECEIVE_ATTEMPT_WINDOW_MS,
};
use sluice_gateway::config::CommonArgs;
use sluice_redis::{RedisEngine, RedisOptions};
use sluice_testkit::RedisServer;
use std::collections::{BTreeMap, HashMap};
use std::error::Error;
use std::io::{BufRead, BufReader, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Producers and consumers of Sluice (HTTP) and of the direct engine runs.
const PRODUCERS: usize = 8;
const CONSUMERS: usize = 8;
/// Producers and consumers of the raw-script ceiling (one pipelining connection), each;
/// `SLUICE_BENCH_CEILING_TASKS` overrides it.
const CEILING_TASKS: usize = 32;

fn ceiling_tasks() -> usize {
    std::env::var("SLUICE_BENCH_CEILING_TASKS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(CEILING_TASKS)
}
/// Key prefix of the gateway, and of the direct engine and the ceiling (apart, so that the
/// gateway's expiry sweep and wake-ups never see the other runs' queues).
const GATEWAY_PREFIX: &str = "bench-gw";
const DIRECT_PREFIX: &str = "bench-direct";
const TENANT: &str = "bench";
/// Visibility timeout of every receive (the queue default).
const VISIBILITY_SECONDS: u32 = 30;

struct Plan {
    repetitions: usize,
    window: Duration,
    monitor_window: Duration,
    latency_window: Duration,
}

impl Plan {
    fn full() -> Self {
        Self {
            repetitions: 3,
            window: Duration::from_secs(5),
            monitor_window: Duration::from_secs(2),
            latency_window: Duration::from_secs(3),
        }
    }

    fn quick() -> Self {
        Self {
            repetitions: 1,
            window: Duration::from_secs(1),
            monitor_window: Duration::from_millis(500),
            latency_window: Duration::from_millis(500),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The scripts, rebuilt exactly as `services/redis/src/scripts.rs` builds them (shebang,
// prelude, body).

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

const SEND_LUA: &str = queue_script!("#!lua", "send.lua");
const RECEIVE_LUA: &str = queue_script!("#!lua flags=allow-oom", "receive.lua");
const DELETE_LUA: &str = queue_script!("#!lua flags=allow-oom", "delete.lua");

/// Every script of the engine by name, for naming the SHAs `MONITOR` shows.
fn all_scripts() -> Vec<(&'static str, &'static str)> {
    vec![
        ("send", SEND_LUA),
        ("receive", RECEIVE_LUA),
        ("delete", DELETE_LUA),
        ("put_queue", queue_script!("#!lua", "put_queue.lua")),
        (
            "queue_info",
            queue_script!("#!lua flags=no-writes", "queue_info.lua"),
        ),
        (
            "delete_queue",
            queue_script!("#!lua flags=allow-oom", "delete_queue.lua"),
        ),
        ("purge", queue_script!("#!lua flags=allow-oom", "purge.lua")),
        (
            "change_visibility",
            queue_script!("#!lua flags=allow-oom", "change_visibility.lua"),
        ),
        ("peek", queue_script!("#!lua flags=no-writes", "peek.lua")),
        (
            "expire",
            queue_script!("#!lua flags=allow-oom", "expire.lua"),
        ),
        (
            "register_queue",
            registry_script!("#!lua", "register_queue.lua"),
        ),
        (
            "unregister_queue",
            registry_script!("#!lua flags=allow-oom", "unregister_queue.lua"),
        ),
        (
            "tenant_put",
            registry_script!("#!lua flags=allow-oom", "tenant_put.lua"),
        ),
        (
            "tenant_delete",
            registry_script!("#!lua flags=allow-oom", "tenant_delete.lua"),
        ),
    ]
}

fn sha_of(script: &str) -> String {
    redis::Script::new(script).get_hash().to_owned()
}

/// The commands the scripts issue with `redis.call` (counted in `INFO commandstats` too, but
/// not sent by any client).
fn commands_inside_scripts() -> std::collections::BTreeSet<String> {
    let mut names = std::collections::BTreeSet::new();
    for (_, text) in all_scripts() {
        for piece in text.split("redis.call('").skip(1) {
            if let Some(name) = piece.split('\'').next() {
                names.insert(name.to_lowercase());
            }
        }
    }
    names
}

// ---------------------------------------------------------------------------------------------
// Measuring: statistics, CPU, Redis' own counters.

/// CPU seconds per thread group of this process: the gateway's runtime, the load runtime,
/// everything else (main thread, blocking pools, ...), and the process total.
#[derive(Default, Clone, Copy)]
struct ProcessCpu {
    server: f64,
    load: f64,
    total: f64,
}

fn process_cpu() -> ProcessCpu {
    ProcessCpu {
        server: threads_cpu_seconds("sluice-srv"),
        load: threads_cpu_seconds("bench-load"),
        total: own_cpu_seconds(),
    }
}

/// `INFO <section>` as `field -> value`.
fn info(redis: &RedisServer, section: &str) -> BenchResult<HashMap<String, String>> {
    let text = redis.query(&["INFO", section])?;
    Ok(text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .map(|(k, v)| (k.to_owned(), v.trim().to_owned()))
        .collect())
}

/// CPU seconds redis-server used so far (all its threads).
fn redis_cpu(redis: &RedisServer) -> BenchResult<f64> {
    let fields = info(redis, "cpu")?;
    let get = |k: &str| {
        fields
            .get(k)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(f64::NAN)
    };
    Ok(get("used_cpu_user") + get("used_cpu_sys"))
}

/// `INFO commandstats` as `command -> calls`.
fn command_calls(redis: &RedisServer) -> BenchResult<BTreeMap<String, u64>> {
    Ok(info(redis, "commandstats")?
        .into_iter()
        .filter_map(|(k, v)| {
            let name = k.strip_prefix("cmdstat_")?.to_owned();
            let calls = v.strip_prefix("calls=")?.split(',').next()?.parse().ok()?;
            Some((name, calls))
        })
        .collect())
}

/// Everything read before a run, to diff after it.
struct Snapshot {
    at: Instant,
    process: ProcessCpu,
    machine: (f64, f64),
    redis_cpu: f64,
    calls: BTreeMap<String, u64>,
}

impl Snapshot {
    fn take(redis: &RedisServer) -> BenchResult<Self> {
        Ok(Self {
            calls: command_calls(redis)?,
            redis_cpu: redis_cpu(redis)?,
            process: process_cpu(),
            machine: machine_cpu(),
            at: Instant::now(),
        })
    }
}

/// Average cores busy over a run, per party, and CPU seconds used.
#[derive(Default, Clone, Copy)]
struct Usage {
    redis_seconds: f64,
    server_seconds: f64,
    load_seconds: f64,
    redis: f64,
    server: f64,
    load: f64,
    /// Everything on the machine that is neither this process nor redis-server.
    others: f64,
}

/// What Redis and the machine did during one run.
struct Observed {
    usage: Usage,
    /// Commands per name (as `INFO commandstats` names them), the bench's own `INFO`s removed.
    calls: BTreeMap<String, u64>,
}

impl Observed {
    fn since(before: &Snapshot, redis: &RedisServer) -> BenchResult<Self> {
        let after = Snapshot::take(redis)?;
        let elapsed = after.at.duration_since(before.at).as_secs_f64();
        let process = after.process.total - before.process.total;
        let redis_cores = (after.redis_cpu - before.redis_cpu) / elapsed;
        let machine = (after.machine.0 - before.machine.0) / elapsed;
        let mut calls = BTreeMap::new();
        for (name, n) in &after.calls {
            let d = n - before.calls.get(name).copied().unwrap_or(0);
            if d > 0 {
                calls.insert(name.clone(), d);
            }
        }
        // The snapshot itself sent INFO commandstats and INFO cpu before reading them.
        if let Some(n) = calls.get_mut("info") {
            *n = n.saturating_sub(2);
        }
        calls.retain(|_, n| *n > 0);
        Ok(Self {
            usage: Usage {
                redis_seconds: after.redis_cpu - before.redis_cpu,
                server_seconds: after.process.server - before.process.server,
                load_seconds: after.process.load - before.process.load,
                redis: redis_cores,
                server: (after.process.server - before.process.server) / elapsed,
                load: (after.process.load - before.process.load) / elapsed,
                others: (machine - process / elapsed - redis_cores).max(0.0),
            },
            calls,
        })
    }

    fn evalsha(&self) -> u64 {
        self.calls.get("evalsha").copied().unwrap_or(0)
    }
}

// ---------------------------------------------------------------------------------------------
// The three ways of driving the same queue work.

/// The send, receive and delete scripts over one pipelining connection, arguments built by
/// hand.
struct Raw {
    conn: redis::aio::MultiplexedConnection,
    keys: Vec<String>,
    send_sha: String,
    receive_sha: String,
    delete_sha: String,
    /// The direct engine's wake channel and a payload naming no queue anyone listens to, so
    /// each PUBLISH reaches one subscriber as it does for Sluice.
    channel: String,
    payload: String,
}

impl Raw {
    fn evalsha(&self, sha: &str) -> redis::Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(sha).arg(self.keys.len()).arg(&self.keys);
        cmd
    }

    async fn run(&self, cmd: &redis::Cmd) -> BenchResult<redis::Value> {
        let mut conn = self.conn.clone();
        match cmd.query_async::<redis::Value>(&mut conn).await {
            Ok(v) => Ok(v),
            Err(e) if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript) => {
                Err(format!(
                    "NOSCRIPT: the bench's copy of the scripts no longer matches what the engine \
                     loads (src/scripts.rs changed?): {e}"
                )
                .into())
            }
            Err(e) => Err(e.into()),
        }
    }
}

enum Driver {
    Http(HttpDriver),
    Engine {
        engine: Arc<RedisEngine>,
        key: QueueKey,
    },
    Raw(Raw),
}

fn now_millis() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

fn int_of(v: &redis::Value) -> BenchResult<i64> {
    match v {
        redis::Value::Int(n) => Ok(*n),
        other => Err(format!("expected an integer, got {other:?}").into()),
    }
}

fn bytes_of(v: &redis::Value) -> BenchResult<&[u8]> {
    match v {
        redis::Value::BulkString(b) => Ok(b),
        other => Err(format!("expected a bulk string, got {other:?}").into()),
    }
}

impl FlowDriver for Driver {
    async fn send(&self, first: u64, batch: usize, padding: &str) -> BenchResult<()> {
        match self {
            Self::Http(http) => http.send(first, batch, padding).await?,
            Self::Engine { engine, key } => {
                let now = now_millis();
                let messages = (0..batch as u64)
                    .map(|i| NewMessage {
                        payload: None,
                        message_id: message_id(first + i),
                        body: padded_body(first + i, padding),
                        attributes: BTreeMap::new(),
                        visible_at: now,
                        group_id: None,
                        deduplication_id: None,
                    })
                    .collect();
                let answers = engine.send(key, messages, now).await?;
                if answers.iter().any(Result::is_err) {
                    return Err("engine send: a message was refused".into());
                }
            }
            Self::Raw(raw) => {
                let now = now_millis();
                let mut cmd = raw.evalsha(&raw.send_sha);
                // The deduplication window only matters on FIFO queues; passed as the engine does.
                cmd.arg(now)
                    .arg(&raw.channel)
                    .arg(&raw.payload)
                    .arg(DEDUPLICATION_WINDOW_MS);
                for i in 0..batch as u64 {
                    let id = first + i;
                    let json = format!(
                        r#"{{"i":"{}","b":"{}"}}"#,
                        message_id(id),
                        padded_body(id, padding)
                    );
                    cmd.arg(now).arg(json);
                }
                let reply = raw.run(&cmd).await?;
                match reply {
                    redis::Value::Array(items)
                        if items.len() == batch + 1
                            && items.iter().all(|v| !matches!(v, redis::Value::Int(0))) => {}
                    other => return Err(format!("raw send: unexpected reply {other:?}").into()),
                }
            }
        }
        Ok(())
    }

    async fn receive(&self, max: usize) -> BenchResult<Vec<Received>> {
        match self {
            Self::Http(http) => http.receive(max).await,
            Self::Engine { engine, key } => {
                // Like the services' long poll: listen, look, wait for a wake-up if empty.
                let mut listener = engine.listen(key).await?;
                let outcome = engine
                    .receive(key, max, VISIBILITY_SECONDS, None, now_millis())
                    .await?;
                if outcome.messages.is_empty() {
                    let _ = tokio::time::timeout(Duration::from_secs(1), listener.changed()).await;
                }
                outcome
                    .messages
                    .into_iter()
                    .map(|m| Ok((body_id(&m.message.body)?, m.receipt_handle)))
                    .collect()
            }
            Self::Raw(raw) => {
                let salt = rand::random::<u32>() & 0xF_FFFF;
                let mut cmd = raw.evalsha(&raw.receive_sha);
                cmd.arg(now_millis())
                    .arg(max)
                    .arg(u64::from(VISIBILITY_SECONDS) * 1000)
                    .arg(salt)
                    .arg("")
                    .arg(RECEIVE_ATTEMPT_WINDOW_MS);
                let reply = raw.run(&cmd).await?;
                let redis::Value::Array(items) = reply else {
                    return Err(format!("raw receive: unexpected reply {reply:?}").into());
                };
                // `1, uid, next visible hint, salt`, then six fields per message.
                if items.len() < 4
                    || int_of(&items[0])? != 1
                    || int_of(&items[3])? != i64::from(salt)
                {
                    return Err(format!("raw receive: unexpected reply {items:?}").into());
                }
                let uid = String::from_utf8_lossy(bytes_of(&items[1])?).into_owned();
                let mut out = Vec::new();
                for m in items[4..].chunks_exact(6) {
                    let seq = int_of(&m[0])?;
                    let delivery = int_of(&m[4])?;
                    let json = bytes_of(&m[5])?;
                    let at = json
                        .windows(5)
                        .position(|w| w == br#""b":""#)
                        .ok_or("stored message without a body")?;
                    let hex = json.get(at + 5..at + 21).ok_or("short body")?;
                    let id = u64::from_str_radix(std::str::from_utf8(hex)?, 16)?;
                    out.push((id, format!("{uid} {seq:016} {delivery}-{salt}")));
                }
                if out.is_empty() {
                    // Nothing to do: do not spin on the server.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Ok(out)
            }
        }
    }

    async fn delete(&self, handles: Vec<String>, batch: usize) -> BenchResult<u64> {
        match self {
            Self::Http(http) => http.delete(handles, batch).await,
            Self::Engine { engine, key } => {
                let answers = engine.delete(key, &handles, now_millis()).await?;
                if answers.iter().any(Result::is_err) {
                    return Err(format!("engine delete: {answers:?}").into());
                }
                Ok(1)
            }
            Self::Raw(raw) => {
                let mut cmd = raw.evalsha(&raw.delete_sha);
                cmd.arg(now_millis()).arg(&raw.channel).arg(&raw.payload);
                for handle in &handles {
                    for part in handle.split(' ') {
                        cmd.arg(part);
                    }
                }
                let reply = raw.run(&cmd).await?;
                let redis::Value::Array(items) = reply else {
                    return Err(format!("raw delete: unexpected reply {reply:?}").into());
                };
                // `1, woke`, then one code per handle (0: deleted).
                if items.len() != handles.len() + 2
                    || items.iter().skip(2).any(|v| int_of(v).ok() != Some(0))
                {
                    return Err(format!("raw delete: unexpected reply {items:?}").into());
                }
                Ok(1)
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Set-up.

/// Starts the gateway on the current runtime (the server runtime) over `redis_url`.
async fn start_redis_gateway(redis_url: &str, data_dir: &std::path::Path) -> BenchResult<Http> {
    let args = CommonArgs {
        data_dir: Some(data_dir.to_path_buf()),
        store: Some(redis_url.to_owned()),
        redis_key_prefix: Some(GATEWAY_PREFIX.into()),
        ..Default::default()
    };
    start_gateway(args, TENANT).await
}

fn queue_key(name: &str) -> BenchResult<QueueKey> {
    Ok(QueueKey::new(
        TenantId::parse(TENANT)?,
        QueueName::parse(name)?,
    ))
}

/// Everything the workloads need, on the load runtime.
struct Bench {
    redis: RedisServer,
    http: Http,
    engine: Arc<RedisEngine>,
    raw_conn: redis::aio::MultiplexedConnection,
}

impl Bench {
    async fn sluice(&self, queue: &str) -> BenchResult<Arc<Driver>> {
        Ok(Arc::new(Driver::Http(self.http.driver(queue).await?)))
    }

    async fn direct(&self, queue: &str) -> BenchResult<Arc<Driver>> {
        let key = queue_key(queue)?;
        self.engine
            .put_queue(&key, QueueConfig::with_defaults(1_048_576), now_millis())
            .await?;
        Ok(Arc::new(Driver::Engine {
            engine: self.engine.clone(),
            key,
        }))
    }

    async fn raw(&self, queue: &str) -> BenchResult<Arc<Driver>> {
        // Created through the engine (same keys, registry entries and uid as always).
        let key = queue_key(queue)?;
        self.engine
            .put_queue(&key, QueueConfig::with_defaults(1_048_576), now_millis())
            .await?;
        let tag = format!("{{{DIRECT_PREFIX}:{TENANT}:{queue}}}");
        Ok(Arc::new(Driver::Raw(Raw {
            conn: self.raw_conn.clone(),
            keys: ["meta", "vis", "rcv", "sent", "msg", "rx"]
                .iter()
                .map(|part| format!("{tag}:{part}"))
                .collect(),
            send_sha: sha_of(SEND_LUA),
            receive_sha: sha_of(RECEIVE_LUA),
            delete_sha: sha_of(DELETE_LUA),
            channel: format!("{DIRECT_PREFIX}:wake"),
            payload: format!("raw-bench {TENANT}/nobody-listens"),
        })))
    }
}

// ---------------------------------------------------------------------------------------------
// Phases.

#[derive(Clone, Copy, PartialEq, Eq)]
enum Workload {
    Sluice,
    Direct,
    Ceiling,
}

impl Workload {
    const ALL: [Self; 3] = [Self::Sluice, Self::Direct, Self::Ceiling];

    fn label(self) -> String {
        match self {
            Self::Sluice => format!("Sluice, HTTP, {PRODUCERS}+{CONSUMERS} clients"),
            Self::Direct => format!("engine direct, {PRODUCERS}+{CONSUMERS} tasks"),
            Self::Ceiling => {
                let n = ceiling_tasks();
                format!("ceiling: raw EVALSHA, {n}+{n} tasks")
            }
        }
    }

    fn tasks(self) -> (usize, usize) {
        match self {
            Self::Sluice | Self::Direct => (PRODUCERS, CONSUMERS),
            Self::Ceiling => (ceiling_tasks(), ceiling_tasks()),
        }
    }

    async fn driver(self, bench: &Bench, queue: &str) -> BenchResult<Arc<Driver>> {
        match self {
            Self::Sluice => bench.sluice(queue).await,
            Self::Direct => bench.direct(queue).await,
            Self::Ceiling => bench.raw(queue).await,
        }
    }

    fn tag(self) -> &'static str {
        match self {
            Self::Sluice => "gw",
            Self::Direct => "direct",
            Self::Ceiling => "raw",
        }
    }
}

struct Measured {
    flow: Flow,
    observed: Observed,
}

async fn measure(
    bench: &Bench,
    workload: Workload,
    batch: usize,
    window: Duration,
    queue: &str,
) -> BenchResult<Measured> {
    let driver = workload.driver(bench, queue).await?;
    let (producers, consumers) = workload.tasks();
    let before = Snapshot::take(&bench.redis)?;
    let flow = flow(driver, producers, consumers, batch, window).await?;
    let observed = Observed::since(&before, &bench.redis)?;
    Ok(Measured { flow, observed })
}

/// `MONITOR` on the server: counts the commands clients send (scripts' own calls excluded),
/// `EVALSHA` named by script, until [`MonitorCount::finish`].
struct MonitorCount {
    port: u16,
    tag: String,
    thread: std::thread::JoinHandle<BenchResult<BTreeMap<String, u64>>>,
}

impl MonitorCount {
    fn start(port: u16, tag: &str) -> BenchResult<Self> {
        let names: HashMap<String, &'static str> = all_scripts()
            .into_iter()
            .map(|(name, text)| (sha_of(text), name))
            .collect();
        let mut stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(30)))?;
        stream.write_all(b"MONITOR\r\n")?;
        let mut reader = BufReader::new(stream);
        let mut ok = String::new();
        reader.read_line(&mut ok)?;
        if ok.trim() != "+OK" {
            return Err(format!("MONITOR answered {ok:?}").into());
        }
        let mark = format!("\"ECHO\" \"{tag}\"");
        let thread = std::thread::spawn(move || {
            let mut counts = BTreeMap::new();
            let mut line = Vec::new();
            loop {
                line.clear();
                if reader.read_until(b'\n', &mut line)? == 0 {
                    return Err("MONITOR connection closed".into());
                }
                // Only the head matters: `+<time> [<db> <client>] "<CMD>" "<arg>" ...`.
                let head = String::from_utf8_lossy(&line[..line.len().min(200)]);
                if head.contains(&mark) {
                    return Ok(counts);
                }
                if head.contains(" lua] ") {
                    continue;
                }
                let mut quoted = head.split('"').skip(1).step_by(2);
                let Some(command) = quoted.next() else {
                    continue;
                };
                let command = command.to_uppercase();
                let name = if command == "EVALSHA" {
                    let sha = quoted.next().unwrap_or_default().to_lowercase();
                    format!(
                        "EVALSHA {}",
                        names.get(&sha).copied().unwrap_or("(unknown script)")
                    )
                } else {
                    command
                };
                *counts.entry(name).or_insert(0u64) += 1;
            }
        });
        Ok(Self {
            port,
            tag: tag.to_owned(),
            thread,
        })
    }

    fn finish(self) -> BenchResult<BTreeMap<String, u64>> {
        sluice_testkit::query(self.port, &["ECHO", &self.tag])?;
        self.thread.join().map_err(|_| "MONITOR thread panicked")?
    }
}

/// One producer, one send at a time, for `window`: each call's latency.
async fn lone_send_latency(driver: Arc<Driver>, window: Duration) -> BenchResult<Vec<Duration>> {
    let padding = "x".repeat(BODY_BYTES);
    let mut samples = Vec::new();
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < window {
        let t = Instant::now();
        driver.send(n, 1, &padding).await?;
        samples.push(t.elapsed());
        n += 1;
    }
    samples.sort_unstable();
    Ok(samples)
}

fn per_op(calls: u64, ops: u64) -> String {
    if ops == 0 {
        "-".to_owned()
    } else {
        format!("{:.3}", calls as f64 / ops as f64)
    }
}

async fn run(plan: &Plan, quick: bool, bench: &Bench) -> BenchResult<()> {
    let inside_scripts = commands_inside_scripts();
    let redis_version = info(&bench.redis, "server")?
        .get("redis_version")
        .cloned()
        .unwrap_or_default();
    println!(
        "## sluice-redis: Sluice on Redis against the same scripts run directly{}",
        if quick { " (QUICK)" } else { "" }
    );
    println!();
    println!(
        "redis-server {redis_version} (no AOF, no snapshots) on 127.0.0.1:{}; {} cores shared \
         by redis-server, the gateway and the load generators; {BODY_BYTES} B bodies; {} x {:.0} s \
         windows, workloads alternating",
        bench.redis.port(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        plan.repetitions,
        plan.window.as_secs_f64()
    );

    let batches = [1usize, 10];
    let mut results: HashMap<(usize, usize), Vec<Measured>> = HashMap::new();
    for rep in 1..=plan.repetitions {
        for (b, &batch) in batches.iter().enumerate() {
            for (w, workload) in Workload::ALL.into_iter().enumerate() {
                let queue = format!("{}-b{batch}-r{rep}", workload.tag());
                let m = measure(bench, workload, batch, plan.window, &queue).await?;
                let u = m.observed.usage;
                eprintln!(
                    "rep {rep}: batch {batch}: {}: {:.0} msgs/s, sent {}, lost {}, dup {}, \
                     EVALSHA/op {}, cores: redis {:.2} gateway {:.2} load {:.2} others {:.2}",
                    workload.label(),
                    m.flow.msgs_per_second,
                    m.flow.sent,
                    m.flow.lost,
                    m.flow.duplicates,
                    per_op(m.observed.evalsha(), m.flow.ops()),
                    u.redis,
                    u.server,
                    u.load,
                    u.others
                );
                results.entry((b, w)).or_default().push(m);
            }
        }
    }

    println!();
    println!("### Throughput: send + receive + delete, one queue, 1 KiB");
    println!();
    println!(
        "| batch | workload | msgs/s per run | msgs/s median | vs ceiling | send p50 (ms) \
         | send p99 (ms) | sent | lost | duplicates |"
    );
    println!("|---|---|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut fractions = Vec::new();
    for (b, &batch) in batches.iter().enumerate() {
        let medians: Vec<f64> = (0..3)
            .map(|w| {
                median(
                    &results[&(b, w)]
                        .iter()
                        .map(|m| m.flow.msgs_per_second)
                        .collect::<Vec<_>>(),
                )
            })
            .collect();
        let ceiling = medians[2];
        for (w, workload) in Workload::ALL.into_iter().enumerate() {
            let ms_runs = &results[&(b, w)];
            let rates: Vec<f64> = ms_runs.iter().map(|m| m.flow.msgs_per_second).collect();
            let mut lat: Vec<Duration> = ms_runs
                .iter()
                .flat_map(|m| m.flow.send_latencies.iter().copied())
                .collect();
            lat.sort_unstable();
            println!(
                "| {batch} | {} | {} | **{:.0}** | {:.2} | {:.3} | {:.3} | {} | {} | {} |",
                workload.label(),
                runs(&rates),
                medians[w],
                medians[w] / ceiling,
                ms(quantile(&lat, 0.5)),
                ms(quantile(&lat, 0.99)),
                ms_runs.iter().map(|m| m.flow.sent).sum::<u64>(),
                ms_runs.iter().map(|m| m.flow.lost).sum::<u64>(),
                ms_runs.iter().map(|m| m.flow.duplicates).sum::<u64>(),
            );
        }
        let per_rep: Vec<f64> = results[&(b, 0)]
            .iter()
            .zip(&results[&(b, 2)])
            .map(|(s, c)| s.flow.msgs_per_second / c.flow.msgs_per_second)
            .collect();
        fractions.push((batch, medians[0] / ceiling, per_rep));
    }
    println!();
    for (batch, fraction, per_rep) in &fractions {
        println!(
            "* batches of {batch}: Sluice reaches **{fraction:.2}** of the ceiling (median over \
             median; per repetition {})",
            per_rep
                .iter()
                .map(|f| format!("{f:.2}"))
                .collect::<Vec<_>>()
                .join(", ")
        );
    }

    println!();
    println!("### Redis calls per operation and CPU (all repetitions; INFO commandstats, INFO cpu, /proc)");
    println!();
    println!(
        "| batch | workload | send calls | receive calls (empty) | delete calls | EVALSHA \
         | EVALSHA per op | other top-level cmds | cores: redis-server | gateway rt | load rt \
         | rest of machine |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---|---:|---:|---:|---:|");
    for (b, &batch) in batches.iter().enumerate() {
        for (w, workload) in Workload::ALL.into_iter().enumerate() {
            let ms_runs = &results[&(b, w)];
            let sum = |f: fn(&Measured) -> u64| ms_runs.iter().map(f).sum::<u64>();
            let evalsha = sum(|m| m.observed.evalsha());
            let ops = sum(|m| m.flow.ops());
            let mut others: BTreeMap<String, u64> = BTreeMap::new();
            for m in ms_runs {
                for (name, n) in &m.observed.calls {
                    if name != "evalsha" && !inside_scripts.contains(name) {
                        *others.entry(name.clone()).or_default() += n;
                    }
                }
            }
            let others = if others.is_empty() {
                "none".to_owned()
            } else {
                others
                    .iter()
                    .map(|(k, v)| format!("{} {v}", k.to_uppercase()))
                    .collect::<Vec<_>>()
                    .join(", ")
            };
            let usage = |f: fn(&Usage) -> f64| {
                median(
                    &ms_runs
                        .iter()
                        .map(|m| f(&m.observed.usage))
                        .collect::<Vec<_>>(),
                )
            };
            println!(
                "| {batch} | {} | {} | {} ({}) | {} | {evalsha} | **{}** | {others} | {:.2} | {:.2} \
                 | {:.2} | {:.2} |",
                workload.label(),
                sum(|m| m.flow.send_calls),
                sum(|m| m.flow.receive_calls),
                sum(|m| m.flow.empty_receives),
                sum(|m| m.flow.delete_calls),
                per_op(evalsha, ops),
                usage(|u| u.redis),
                usage(|u| u.server),
                usage(|u| u.load),
                usage(|u| u.others),
            );
        }
    }
    println!();
    println!("### CPU per message (all repetitions: CPU seconds over messages moved)");
    println!();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get()) as f64;
    println!(
        "| batch | workload | redis-server µs/msg | gateway rt µs/msg | load rt µs/msg \
         | total µs/msg | msgs/s one Redis core allows | CPU model: msgs/s on an idle \
         {cores:.0}-core machine | model vs ceiling |"
    );
    println!("|---|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut modelled = Vec::new();
    for (b, &batch) in batches.iter().enumerate() {
        let model: Vec<(f64, [f64; 3])> = (0..3)
            .map(|w| {
                let ms_runs = &results[&(b, w)];
                let messages = ms_runs.iter().map(|m| m.flow.messages).sum::<u64>() as f64;
                let micros = |f: fn(&Usage) -> f64| {
                    ms_runs.iter().map(|m| f(&m.observed.usage)).sum::<f64>() * 1e6 / messages
                };
                let us = [
                    micros(|u| u.redis_seconds),
                    micros(|u| u.server_seconds),
                    micros(|u| u.load_seconds),
                ];
                // Redis runs scripts on one thread; everything shares the cores.
                let rate = (1e6 / us[0]).min(cores * 1e6 / us.iter().sum::<f64>());
                (rate, us)
            })
            .collect();
        let ceiling = model[2].0;
        for (w, workload) in Workload::ALL.into_iter().enumerate() {
            let (rate, us) = model[w];
            println!(
                "| {batch} | {} | {:.1} | {:.1} | {:.1} | {:.1} | {:.0} | {rate:.0} | {:.2} |",
                workload.label(),
                us[0],
                us[1],
                us[2],
                us.iter().sum::<f64>(),
                1e6 / us[0],
                rate / ceiling,
            );
        }
        modelled.push((batch, model[0].0 / ceiling));
    }
    println!();
    println!(
        "CPU model: min(one core / redis-server µs per msg, {cores:.0} cores / total µs per msg), \
         from CPU time actually used, so less sensitive to other jobs on the machine than \
         msgs/s (contention still inflates CPU per message somewhat). Sluice vs ceiling in this \
         model: {}.",
        modelled
            .iter()
            .map(|(batch, f)| format!("batches of {batch} {f:.2}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    println!();
    println!(
        "Commands scripts issue themselves ({}) are counted by INFO commandstats too and left \
         out of \"other\"; HGET is one of them, so a top-level HGET (queue configuration cache \
         refresh) only shows in the MONITOR count below.",
        inside_scripts
            .iter()
            .map(|s| s.to_uppercase())
            .collect::<Vec<_>>()
            .join(" ")
    );

    // Exact counts by script, with MONITOR (not timed: MONITOR slows Redis down).
    println!();
    println!(
        "### Exact calls per Sluice operation (MONITOR, {:.1} s per batch size, not timed)",
        plan.monitor_window.as_secs_f64()
    );
    println!();
    println!(
        "| batch | HTTP sends | send scripts | per send | HTTP receives (empty) | receive scripts \
         | per receive | HTTP deletes | delete scripts | per delete | other top-level commands |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for &batch in &batches {
        let driver = bench.sluice(&format!("monitor-b{batch}")).await?;
        let monitor =
            MonitorCount::start(bench.redis.port(), &format!("sluice-bench-mark-{batch}"))?;
        let f = flow(driver, PRODUCERS, CONSUMERS, batch, plan.monitor_window).await?;
        let mut counts = monitor.finish()?;
        let mut take = |name: &str| counts.remove(name).unwrap_or(0);
        let sends = take("EVALSHA send");
        let receives = take("EVALSHA receive");
        let deletes = take("EVALSHA delete");
        counts.remove("INFO");
        let others = if counts.is_empty() {
            "none".to_owned()
        } else {
            counts
                .iter()
                .map(|(k, v)| format!("{k} {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        println!(
            "| {batch} | {} | {sends} | **{}** | {} ({}) | {receives} | **{}** | {} | {deletes} \
             | **{}** | {others} |",
            f.send_calls,
            per_op(sends, f.send_calls),
            f.receive_calls,
            f.empty_receives,
            per_op(receives, f.receive_calls),
            f.delete_calls,
            per_op(deletes, f.delete_calls),
        );
    }

    // One send at a time.
    let mut lone = Vec::new();
    for workload in Workload::ALL {
        let driver = workload
            .driver(bench, &format!("{}-latency", workload.tag()))
            .await?;
        lone.push((
            workload,
            lone_send_latency(driver, plan.latency_window).await?,
        ));
    }
    println!();
    println!("### Single-client send latency (one 1 KiB send at a time)");
    println!();
    println!("| path | samples | p50 (ms) | p99 (ms) | p99.9 (ms) | max (ms) |");
    println!("|---|---:|---:|---:|---:|---:|");
    for (workload, samples) in &lone {
        let label = match workload {
            Workload::Sluice => "Sluice: POST /messages over HTTP",
            Workload::Direct => "engine direct: RedisEngine::send",
            Workload::Ceiling => "raw: EVALSHA send",
        };
        println!(
            "| {label} | {} | {:.3} | {:.3} | {:.3} | {:.3} |",
            samples.len(),
            ms(quantile(samples, 0.5)),
            ms(quantile(samples, 0.99)),
            ms(quantile(samples, 0.999)),
            ms(samples.last().copied().unwrap_or_default()),
        );
    }
    Ok(())
}

fn main() -> BenchResult<()> {
    let quick = sluice_bench_support::quick();
    let plan = if quick { Plan::quick() } else { Plan::full() };
    let redis = RedisServer::start()?;
    let data = tempfile::Builder::new()
        .prefix("sluice-redis-bench-")
        .tempdir()?;
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("sluice-srv")
        .enable_all()
        .build()?;
    let load_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-load")
        .enable_all()
        .build()?;
    let http = server_rt.block_on(start_redis_gateway(&redis.url(), data.path()))?;
    let result = load_rt.block_on(async {
        let engine = RedisEngine::connect(
            &redis.url(),
            RedisOptions {
                key_prefix: DIRECT_PREFIX.into(),
                ..RedisOptions::default()
            },
        )
        .await?;
        let raw_conn = redis::Client::open(redis.url())?
            .get_multiplexed_async_connection()
            .await?;
        let bench = Bench {
            redis,
            http,
            engine: Arc::new(engine),
            raw_conn,
        };
        run(&plan, quick, &bench).await?;
        Ok::<Bench, Box<dyn Error + Send + Sync>>(bench)
    });
    // The load first, then the gateway, then Redis and the data folder.
    let bench = result?;
    drop(load_rt);
    drop(server_rt);
    drop(bench);
    drop(data);
    Ok(())
}
