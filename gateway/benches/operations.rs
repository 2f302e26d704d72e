//! What running Sluice costs beyond its queue work: the per-request price of the tenant rate
//! limiter and of Prometheus scrapes, and the resident memory of idle keep-alive connections
//! and of waiting long polls.
//!
//! 1. **Limiter and scrape cost**, in process (the real server on a free port, as `http`
//!    does): 8 producers + 8 consumers drive send + receive + delete (batches of 1, 1 KiB) on a
//!    fresh queue for a fixed window under three conditions, alternated every repetition:
//!    a tenant without a rate quota (the reference), a tenant whose `requests_per_second` and
//!    `burst` are far above the load (nothing is refused, the limiter runs on every request),
//!    and the reference tenant while another task scrapes `GET /metrics` every second. The
//!    metrics recorder is process-wide and cannot be switched off at runtime, so there is no
//!    "metrics off" arm: the scrape arm measures what a scraper adds on top.
//! 2. **Resident memory**, of the real `sluice serve` binary in a child process so that its
//!    RSS is its own: at rest, with N idle keep-alive connections (each sent one authenticated
//!    request, then held open), with N long polls waiting on an empty queue, and after each
//!    set closes, in alternating rounds, so growth from round to round would show.
//!
//! Run: `cargo bench -p sluice-gateway --bench operations`. `SLUICE_BENCH_QUICK=1` shrinks
//! every phase (500 connections, short windows). `SLUICE_BENCH_DIR` overrides the scratch
//! directory.

mod common;

use common::{expect_status, start_gateway, Http};
use sluice_bench_support::flow::{flow, Flow};
use sluice_bench_support::stats::{median_or_nan as median, runs};
use sluice_bench_support::system::{memory, scratch_base};
use sluice_bench_support::BenchResult;
use sluice_engine::TenantId;
use sluice_gateway::auth::{Auth, KeyMaterial, Scope};
use sluice_gateway::config::CommonArgs;
use sluice_gateway::secret::Secret;
use std::io::BufRead as _;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tokio::sync::Semaphore;

const PRODUCERS: usize = 8;
const CONSUMERS: usize = 8;
/// The secret `start_gateway` configures; minting with it gives tokens for other tenants.
const IN_PROCESS_SECRET_BYTE: u8 = b'x';
/// Far above any rate this machine reaches, so the limiter admits every request.
const GENEROUS_RATE: u64 = 1_000_000;
/// Connections opened at once while building up the idle and polling sets.
const OPEN_CONCURRENCY: usize = 256;
const SCRAPE_PERIOD: Duration = Duration::from_secs(1);

struct Plan {
    repetitions: usize,
    window: Duration,
    connections: usize,
    poll_wait_seconds: u64,
    memory_rounds: usize,
}

impl Plan {
    fn full() -> Self {
        Self {
            repetitions: 5,
            window: Duration::from_secs(5),
            connections: 10_000,
            poll_wait_seconds: 20,
            memory_rounds: 3,
        }
    }

    fn quick() -> Self {
        Self {
            repetitions: 1,
            window: Duration::from_secs(1),
            connections: 500,
            poll_wait_seconds: 3,
            memory_rounds: 2,
        }
    }
}

fn now_seconds() -> BenchResult<u64> {
    Ok(SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs())
}

fn bearer(auth: &Auth, tenant: Option<&str>, scopes: &[Scope]) -> BenchResult<String> {
    let tenant = tenant.map(TenantId::parse).transpose()?;
    let token = auth.mint(tenant.as_ref(), scopes, now_seconds()?, 3600)?;
    Ok(format!("Bearer {token}"))
}

const TENANT_SCOPES: [Scope; 3] = [
    Scope::QueuesManage,
    Scope::MessagesSend,
    Scope::MessagesConsume,
];

/// `PATCH /v1/admin/tenants/{tenant}` with a rate quota; answers the quota the server stored.
async fn set_rate_quota(admin: &Http, tenant: &str, rate: u64, burst: u64) -> BenchResult<u64> {
    let response = admin
        .client
        .patch(format!("{}/v1/admin/tenants/{tenant}", admin.base))
        .header("authorization", &admin.bearer)
        .header("content-type", "application/json")
        .body(format!(
            r#"{{"quotas":{{"requests_per_second":{rate},"burst":{burst}}}}}"#
        ))
        .send()
        .await?;
    let tenant: serde_json::Value = expect_status(response, &[200]).await?.json().await?;
    tenant["quotas"]["requests_per_second"]
        .as_u64()
        .ok_or_else(|| format!("no rate quota in {tenant}").into())
}

/// Scrapes `GET /metrics` every [`SCRAPE_PERIOD`] until aborted; counts scrapes and bytes.
fn spawn_scraper(target: &Http, scrapes: Arc<AtomicU64>, bytes: Arc<AtomicU64>) -> BenchResultTask {
    let (client, url) = (target.client.clone(), format!("{}/metrics", target.base));
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SCRAPE_PERIOD);
        loop {
            tick.tick().await;
            let response = client.get(&url).send().await?;
            let body = expect_status(response, &[200]).await?.bytes().await?;
            scrapes.fetch_add(1, Ordering::Relaxed);
            bytes.fetch_add(body.len() as u64, Ordering::Relaxed);
        }
    })
}

type BenchResultTask = tokio::task::JoinHandle<BenchResult<()>>;

#[derive(Clone, Copy, PartialEq, Eq)]
enum Arm {
    NoQuota,
    GenerousQuota,
    Scraped,
}

impl Arm {
    const ALL: [Arm; 3] = [Arm::NoQuota, Arm::GenerousQuota, Arm::Scraped];

    fn label(self) -> &'static str {
        match self {
            Arm::NoQuota => "no rate quota, no scrape (reference)",
            Arm::GenerousQuota => "generous rate quota (limiter on every request)",
            Arm::Scraped => "no rate quota, GET /metrics every 1 s",
        }
    }
}

async fn limiter_and_scrape_cost(plan: &Plan, data: &Path) -> BenchResult<()> {
    let open = start_gateway(
        CommonArgs {
            data_dir: Some(data.to_path_buf()),
            ..Default::default()
        },
        "open",
    )
    .await?;
    let auth = Auth::new(
        KeyMaterial::Secret(Secret::new(vec![IN_PROCESS_SECRET_BYTE; 40])),
        None,
        None,
    )?;
    let limited = Http {
        bearer: bearer(&auth, Some("limited"), &TENANT_SCOPES)?,
        ..open.clone()
    };
    let admin = Http {
        bearer: bearer(&auth, None, &[Scope::Admin])?,
        ..open.clone()
    };
    // The tenant exists once a token of it was used; then it can be given a quota.
    limited.put_queue("warmup").await?;
    let stored = set_rate_quota(&admin, "limited", GENEROUS_RATE, GENEROUS_RATE).await?;
    if stored != GENEROUS_RATE {
        return Err(format!("quota not stored: {stored}").into());
    }

    let mut rates: [Vec<f64>; 3] = Default::default();
    let mut flows: [Vec<Flow>; 3] = Default::default();
    let (scrapes, scraped_bytes) = (Arc::new(AtomicU64::new(0)), Arc::new(AtomicU64::new(0)));
    for rep in 1..=plan.repetitions {
        // The order turns every repetition, so no arm always runs first on a warmer process.
        let mut order = Arm::ALL;
        order.rotate_left((rep - 1) % Arm::ALL.len());
        for arm in order {
            let slot = arm as usize;
            let target = if arm == Arm::GenerousQuota {
                &limited
            } else {
                &open
            };
            let driver = Arc::new(target.driver(&format!("ops-{slot}-r{rep}")).await?);
            let scraper = (arm == Arm::Scraped)
                .then(|| spawn_scraper(&open, scrapes.clone(), scraped_bytes.clone()));
            let f = flow(driver, PRODUCERS, CONSUMERS, 1, plan.window).await;
            if let Some(scraper) = scraper {
                scraper.abort();
                if let Ok(Err(error)) = scraper.await {
                    return Err(error);
                }
            }
            let f = f?;
            eprintln!(
                "rep {rep}: {}: {:.0} msgs/s, {:.0} req/s, lost {}, duplicates {}",
                arm.label(),
                f.msgs_per_second,
                f.ops_per_second(),
                f.lost,
                f.duplicates
            );
            rates[slot].push(f.ops_per_second());
            flows[slot].push(f);
        }
    }

    // The limiter really runs for that tenant: a bucket of one refuses the second request.
    set_rate_quota(&admin, "limited", 1, 1).await?;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        let response = limited
            .client
            .get(format!("{}/v1/queues/warmup", limited.base))
            .header("authorization", &limited.bearer)
            .send()
            .await?;
        statuses.push(response.status().as_u16());
    }
    if !statuses.contains(&429) {
        return Err(format!("a quota of 1/s refused nothing: {statuses:?}").into());
    }

    println!();
    println!(
        "### Rate limiter and scrape cost ({PRODUCERS} producers + {CONSUMERS} consumers, \
         send + receive + delete, batches of 1, 1 KiB, {} x {:.0} s, order rotated)",
        plan.repetitions,
        plan.window.as_secs_f64()
    );
    println!();
    println!(
        "| arm                                            | HTTP req/s per run                 \
         | median req/s | vs reference (median of per-rep ratios) | lost | duplicates |"
    );
    println!(
        "|------------------------------------------------|------------------------------------\
         |-------------:|----------------------------------------:|-----:|-----------:|"
    );
    for arm in Arm::ALL {
        let slot = arm as usize;
        let ratios: Vec<f64> = rates[slot]
            .iter()
            .zip(&rates[Arm::NoQuota as usize])
            .map(|(r, reference)| r / reference)
            .collect();
        println!(
            "| {:<46} | {:<34} | {:>12.0} | {:>39.3} | {:>4} | {:>10} |",
            arm.label(),
            runs(&rates[slot]),
            median(&rates[slot]),
            median(&ratios),
            flows[slot].iter().map(|f| f.lost).sum::<u64>(),
            flows[slot].iter().map(|f| f.duplicates).sum::<u64>(),
        );
    }
    let scrape_count = scrapes.load(Ordering::Relaxed).max(1);
    println!();
    println!(
        "{} scrapes, {:.0} KiB of metrics text each on average; with a quota of 1/s and burst 1 \
         three requests answered {statuses:?} (the limiter was live)",
        scrapes.load(Ordering::Relaxed),
        scraped_bytes.load(Ordering::Relaxed) as f64 / scrape_count as f64 / 1024.0
    );
    Ok(())
}

/// The `sluice serve` child; killed when dropped, so an error does not leave it running.
struct Server {
    child: Child,
    addr: String,
    /// Held open: a closed pipe would make a later line on the server's stdout fail.
    _stdout: std::io::BufReader<std::process::ChildStdout>,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start(data: &Path, secret: &str) -> BenchResult<Self> {
        let mut child = Command::new(env!("CARGO_BIN_EXE_sluice"))
            .args(["serve", "--listen", "127.0.0.1:0", "--jwt-secret", secret])
            .arg("--data-dir")
            .arg(data)
            .args(["--max-waiting-polls", "20000", "--max-connections", "30000"])
            // The measurement takes longer than the 60 s default idle timeout could allow.
            .args(["--idle-timeout-seconds", "600"])
            .env("SLUICE_LOG", "warn")
            .stdout(Stdio::piped())
            .spawn()?;
        let stdout = child.stdout.take().ok_or("no stdout")?;
        let mut stdout = std::io::BufReader::new(stdout);
        let mut line = String::new();
        stdout.read_line(&mut line)?;
        let addr = line
            .trim()
            .strip_prefix("sluice listening on http://")
            .ok_or_else(|| format!("unexpected first line: {line:?}"))?
            .to_owned();
        Ok(Self {
            child,
            addr,
            _stdout: stdout,
        })
    }

    fn rss(&self) -> BenchResult<u64> {
        Ok(memory(self.child.id())?.0)
    }

    /// RSS once it has stopped moving (two samples 500 ms apart within 1%), or after 5 s.
    async fn settled_rss(&self) -> BenchResult<u64> {
        let mut last = self.rss()?;
        for _ in 0..10 {
            tokio::time::sleep(Duration::from_millis(500)).await;
            let now = self.rss()?;
            if now.abs_diff(last) * 100 <= last {
                return Ok(now);
            }
            last = now;
        }
        Ok(last)
    }
}

/// Reads one HTTP/1.1 response with a `Content-Length` body; answers its status and body.
async fn read_response(stream: &mut TcpStream) -> BenchResult<(u16, Vec<u8>)> {
    let mut buf = Vec::with_capacity(512);
    let mut chunk = [0u8; 4096];
    let head_end = loop {
        if let Some(at) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err("connection closed before a response".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    };
    let head = std::str::from_utf8(&buf[..head_end])?.to_owned();
    let status: u16 = head
        .split_whitespace()
        .nth(1)
        .ok_or("no status line")?
        .parse()?;
    let length: usize = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse().ok())?
        })
        .ok_or("response without content-length")?;
    while buf.len() < head_end + length {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err("connection closed mid-body".into());
        }
        buf.extend_from_slice(&chunk[..n]);
    }
    Ok((status, buf.split_off(head_end)))
}

/// Opens `count` connections, `OPEN_CONCURRENCY` at a time, each with `request` written; when
/// `await_response` it also reads the response (which must be 200) before answering it.
async fn open_connections(
    addr: &str,
    count: usize,
    request: Arc<[u8]>,
    await_response: bool,
) -> BenchResult<Vec<TcpStream>> {
    let gate = Arc::new(Semaphore::new(OPEN_CONCURRENCY));
    let mut tasks = Vec::with_capacity(count);
    for _ in 0..count {
        let (gate, request, addr) = (gate.clone(), request.clone(), addr.to_owned());
        tasks.push(tokio::spawn(async move {
            let _permit = gate.acquire_owned().await?;
            let mut stream = TcpStream::connect(&addr).await?;
            stream.write_all(&request).await?;
            if await_response {
                let (status, body) = read_response(&mut stream).await?;
                if status != 200 {
                    let body = String::from_utf8_lossy(&body);
                    return Err(format!("status {status}: {body}").into());
                }
            }
            Ok::<_, Box<dyn std::error::Error + Send + Sync>>(stream)
        }));
    }
    let mut streams = Vec::with_capacity(count);
    for task in tasks {
        streams.push(task.await??);
    }
    Ok(streams)
}

/// `sluice_long_polls_waiting` from the server's `/metrics`.
async fn waiting_polls(client: &reqwest::Client, addr: &str) -> BenchResult<u64> {
    let text = client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await?
        .text()
        .await?;
    Ok(text
        .lines()
        .find_map(|l| l.strip_prefix("sluice_long_polls_waiting "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0) as u64)
}

/// One memory round's figures, in bytes.
struct Round {
    label: &'static str,
    before: u64,
    open: u64,
    after: u64,
    seconds_to_open: f64,
}

/// Raises this process's soft descriptor limit to the hard one; answers (soft, hard) then.
fn raise_own_fd_limit() -> (Option<u64>, Option<u64>) {
    use rustix::process::{getrlimit, setrlimit, Resource};
    let mut limit = getrlimit(Resource::Nofile);
    if limit.current != limit.maximum {
        limit.current = limit.maximum;
        let _ = setrlimit(Resource::Nofile, limit);
    }
    let now = getrlimit(Resource::Nofile);
    (now.current, now.maximum)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

async fn connection_memory(plan: &Plan, data: &Path) -> BenchResult<()> {
    let (soft, hard) = raise_own_fd_limit();
    let secret = "s".repeat(40);
    let server = Server::start(data, &secret)?;
    let auth = Auth::new(
        KeyMaterial::Secret(Secret::new(secret.into_bytes())),
        None,
        None,
    )?;
    let token = bearer(&auth, Some("mem"), &TENANT_SCOPES)?;
    let http = Http {
        client: reqwest::Client::new(),
        base: format!("http://{}", server.addr),
        bearer: token.clone(),
    };
    http.put_queue("empty").await?;
    let n = plan.connections;
    let idle_request: Arc<[u8]> =
        format!("GET /v1/queues/empty HTTP/1.1\r\nhost: bench\r\nauthorization: {token}\r\n\r\n")
            .into_bytes()
            .into();
    let poll_body = format!(
        r#"{{"max_messages":1,"wait_seconds":{}}}"#,
        plan.poll_wait_seconds
    );
    let poll_request: Arc<[u8]> = format!(
        "POST /v1/queues/empty/messages/receive HTTP/1.1\r\nhost: bench\r\n\
         authorization: {token}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n\
         {poll_body}",
        poll_body.len()
    )
    .into_bytes()
    .into();

    let baseline = server.settled_rss().await?;
    eprintln!("baseline RSS {:.1} MiB", mib(baseline));
    let mut rounds = Vec::new();
    for round in 1..=plan.memory_rounds {
        // Idle keep-alive connections: one answered request each, then held open.
        let before = server.settled_rss().await?;
        let start = Instant::now();
        let streams = open_connections(&server.addr, n, idle_request.clone(), true).await?;
        let seconds_to_open = start.elapsed().as_secs_f64();
        let open = server.settled_rss().await?;
        drop(streams);
        let after = server.settled_rss().await?;
        eprintln!(
            "round {round}: {n} idle connections: {:.1} -> {:.1} -> {:.1} MiB",
            mib(before),
            mib(open),
            mib(after)
        );
        rounds.push(Round {
            label: "idle keep-alive connections",
            before,
            open,
            after,
            seconds_to_open,
        });

        // Long polls on an empty queue: sent, not yet answered.
        let before = server.settled_rss().await?;
        let start = Instant::now();
        let mut streams = open_connections(&server.addr, n, poll_request.clone(), false).await?;
        let wait_deadline = start + Duration::from_secs(plan.poll_wait_seconds);
        let mut waiting = 0;
        while Instant::now() < wait_deadline {
            waiting = waiting_polls(&http.client, &server.addr).await?;
            if waiting >= n as u64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let seconds_to_open = start.elapsed().as_secs_f64();
        if waiting < n as u64 {
            return Err(format!(
                "only {waiting} of {n} polls waiting within {} s",
                plan.poll_wait_seconds
            )
            .into());
        }
        // Two samples 500 ms apart, so the polls are still waiting when it is read.
        let open = server.rss()?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let open = open.max(server.rss()?);
        let still_waiting = waiting_polls(&http.client, &server.addr).await?;
        let mut answered_empty = 0usize;
        let mut tasks = Vec::with_capacity(n);
        for mut stream in streams.drain(..) {
            tasks.push(tokio::spawn(async move {
                let (status, body) = read_response(&mut stream).await?;
                Ok::<_, Box<dyn std::error::Error + Send + Sync>>((status, body))
            }));
        }
        for task in tasks {
            let (status, body) = task.await??;
            let answer: serde_json::Value = serde_json::from_slice(&body)?;
            let empty = answer["messages"].as_array().is_some_and(Vec::is_empty);
            if status != 200 || !empty {
                return Err(format!("a poll answered {status}: {answer}").into());
            }
            answered_empty += 1;
        }
        let after = server.settled_rss().await?;
        eprintln!(
            "round {round}: {n} polls ({still_waiting} still waiting at the sample, \
             {answered_empty} answered empty): {:.1} -> {:.1} -> {:.1} MiB",
            mib(before),
            mib(open),
            mib(after)
        );
        rounds.push(Round {
            label: "waiting long polls",
            before,
            open,
            after,
            seconds_to_open,
        });
    }
    let (_, peak) = memory(server.child.id())?;

    println!();
    println!(
        "### Resident memory of `sluice serve` (child process, embedded store): {n} at a time, \
         {} rounds",
        plan.memory_rounds
    );
    println!();
    println!(
        "descriptor limits: this bench soft {} / hard {} (the server raises its own soft limit \
         to the hard one); polls wait {} s on an empty queue; baseline RSS {:.1} MiB; peak \
         (VmHWM) {:.1} MiB",
        soft.map_or_else(|| "unlimited".into(), |v| v.to_string()),
        hard.map_or_else(|| "unlimited".into(), |v| v.to_string()),
        plan.poll_wait_seconds,
        mib(baseline),
        mib(peak)
    );
    println!();
    println!(
        "| round | set                          | opened in (s) | RSS before (MiB) | RSS open (MiB) \
         | bytes each | RSS after close (MiB) |"
    );
    println!(
        "|------:|------------------------------|--------------:|-----------------:|---------------:\
         |-----------:|----------------------:|"
    );
    for (i, r) in rounds.iter().enumerate() {
        println!(
            "| {:>5} | {:<28} | {:>13.1} | {:>16.1} | {:>14.1} | {:>10.0} | {:>21.1} |",
            i / 2 + 1,
            r.label,
            r.seconds_to_open,
            mib(r.before),
            mib(r.open),
            r.open.saturating_sub(r.before) as f64 / n as f64,
            mib(r.after)
        );
    }
    Ok(())
}

async fn run(plan: &Plan, quick: bool, data: &Path, fs: &str) -> BenchResult<()> {
    println!(
        "## sluice-gateway: operations{}",
        if quick { " (QUICK)" } else { "" }
    );
    println!();
    println!(
        "data dir {} ({fs}); {} cores shared by server and load generator",
        data.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let in_process = data.join("in-process");
    let child = data.join("child");
    std::fs::create_dir_all(&child)?;
    limiter_and_scrape_cost(plan, &in_process).await?;
    connection_memory(plan, &child).await
}

fn main() -> BenchResult<()> {
    let quick = sluice_bench_support::quick();
    let plan = if quick { Plan::quick() } else { Plan::full() };
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (base, fs) = scratch_base()?;
    let data = tempfile::Builder::new()
        .prefix("sluice-ops-bench-")
        .tempdir_in(&base)?;
    runtime.block_on(run(&plan, quick, data.path(), &fs))?;
    drop(runtime);
    drop(data);
    Ok(())
}
