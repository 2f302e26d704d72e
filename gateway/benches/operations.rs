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
use sluice_bench_support::system::{machine_cpu, memory, own_cpu_seconds, scratch_base};
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
            memory_rounds: 4,
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
    // CPU microseconds this process (server and load generator) spent per request, and the
    // cores other processes kept busy meanwhile: CPU per request moves far less than the rate
    // when neighbours take cores away.
    let mut cpu_per_request: [Vec<f64>; 3] = Default::default();
    let mut others_busy: [Vec<f64>; 3] = Default::default();
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
            let (own_before, (machine_before, _)) = (own_cpu_seconds(), machine_cpu());
            let started = Instant::now();
            let f = flow(driver, PRODUCERS, CONSUMERS, 1, plan.window).await;
            let own = own_cpu_seconds() - own_before;
            let machine = machine_cpu().0 - machine_before;
            let elapsed = started.elapsed().as_secs_f64();
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
            cpu_per_request[slot].push(own * 1e6 / f.ops() as f64);
            others_busy[slot].push((machine - own).max(0.0) / elapsed);
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

    // What one scrape costs on its own, with no load: CPU and wall time per scrape.
    let metrics_url = format!("{}/metrics", open.base);
    // /proc counts CPU in 10 ms ticks: enough scrapes that their total spans many.
    let idle_scrapes = 500;
    let own_before = own_cpu_seconds();
    let mut scrape_times = Vec::with_capacity(idle_scrapes);
    let mut scrape_bytes = 0;
    for _ in 0..idle_scrapes {
        let t = Instant::now();
        let response = open.client.get(&metrics_url).send().await?;
        scrape_bytes = expect_status(response, &[200]).await?.bytes().await?.len();
        scrape_times.push(t.elapsed().as_secs_f64() * 1e3);
    }
    let scrape_cpu_ms = (own_cpu_seconds() - own_before) * 1e3 / idle_scrapes as f64;

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
         | median req/s | req/s vs reference | CPU µs / request | CPU vs reference \
         | others' cores busy | lost | duplicates |"
    );
    println!(
        "|------------------------------------------------|------------------------------------\
         |-------------:|-------------------:|-----------------:|-----------------:\
         |-------------------:|-----:|-----------:|"
    );
    for arm in Arm::ALL {
        let slot = arm as usize;
        // Medians of the per-repetition ratios: each arm against the reference run beside it.
        let ratio = |values: &[Vec<f64>; 3]| {
            let per_rep: Vec<f64> = values[slot]
                .iter()
                .zip(&values[Arm::NoQuota as usize])
                .map(|(v, reference)| v / reference)
                .collect();
            median(&per_rep)
        };
        println!(
            "| {:<46} | {:<34} | {:>12.0} | {:>18.3} | {:>16.0} | {:>16.3} | {:>18.2} \
             | {:>4} | {:>10} |",
            arm.label(),
            runs(&rates[slot]),
            median(&rates[slot]),
            ratio(&rates),
            median(&cpu_per_request[slot]),
            ratio(&cpu_per_request),
            median(&others_busy[slot]),
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
    println!(
        "one scrape without load ({idle_scrapes} in a row, {:.0} KiB): {scrape_cpu_ms:.2} ms of CPU \
         (server and client), {:.2} ms wall (median); at one scrape a second that is {:.2}% of \
         one core",
        scrape_bytes as f64 / 1024.0,
        median(&scrape_times),
        scrape_cpu_ms / 10.0
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

/// One set's figures, in bytes.
struct Round {
    kind: &'static str,
    label: String,
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

/// A `sluice serve` child with one empty queue, and the raw requests the sets send it.
struct MemoryTarget {
    server: Server,
    metrics_client: reqwest::Client,
    idle_request: Arc<[u8]>,
    poll_request: Arc<[u8]>,
    baseline: u64,
}

impl MemoryTarget {
    async fn start(data: &Path, poll_wait_seconds: u64) -> BenchResult<Self> {
        std::fs::create_dir_all(data)?;
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
        let idle_request: Arc<[u8]> = format!(
            "GET /v1/queues/empty HTTP/1.1\r\nhost: bench\r\nauthorization: {token}\r\n\r\n"
        )
        .into_bytes()
        .into();
        let poll_body = format!(r#"{{"max_messages":1,"wait_seconds":{poll_wait_seconds}}}"#);
        let poll_request: Arc<[u8]> = format!(
            "POST /v1/queues/empty/messages/receive HTTP/1.1\r\nhost: bench\r\n\
             authorization: {token}\r\ncontent-type: application/json\r\n\
             content-length: {}\r\n\r\n{poll_body}",
            poll_body.len()
        )
        .into_bytes()
        .into();
        let baseline = server.settled_rss().await?;
        Ok(Self {
            server,
            metrics_client: http.client,
            idle_request,
            poll_request,
            baseline,
        })
    }

    /// `n` keep-alive connections, each answered one authenticated request, then held open.
    async fn idle_set(&self, n: usize, label: String) -> BenchResult<Round> {
        const KIND: &str = "idle connections";
        let before = self.server.settled_rss().await?;
        let start = Instant::now();
        let streams =
            open_connections(&self.server.addr, n, self.idle_request.clone(), true).await?;
        let seconds_to_open = start.elapsed().as_secs_f64();
        let open = self.server.settled_rss().await?;
        drop(streams);
        let after = self.server.settled_rss().await?;
        eprintln!(
            "{label}: {n} idle connections: {:.1} -> {:.1} -> {:.1} MiB",
            mib(before),
            mib(open),
            mib(after)
        );
        Ok(Round {
            kind: KIND,
            label,
            before,
            open,
            after,
            seconds_to_open,
        })
    }

    /// `n` long polls on the empty queue, sampled while all wait, then read to their (empty)
    /// answers and closed.
    async fn poll_set(&self, n: usize, wait_seconds: u64, label: String) -> BenchResult<Round> {
        const KIND: &str = "long polls";
        let (server, addr) = (&self.server, self.server.addr.as_str());
        let before = server.settled_rss().await?;
        let start = Instant::now();
        let mut streams = open_connections(addr, n, self.poll_request.clone(), false).await?;
        let wait_deadline = start + Duration::from_secs(wait_seconds);
        let mut waiting = 0;
        while Instant::now() < wait_deadline {
            waiting = waiting_polls(&self.metrics_client, addr).await?;
            if waiting >= n as u64 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let seconds_to_open = start.elapsed().as_secs_f64();
        if waiting < n as u64 {
            return Err(
                format!("only {waiting} of {n} polls waiting within {wait_seconds} s").into(),
            );
        }
        // Two samples 500 ms apart, taken while every poll still waits (checked after).
        let first = server.rss()?;
        tokio::time::sleep(Duration::from_millis(500)).await;
        let open = first.max(server.rss()?);
        let still_waiting = waiting_polls(&self.metrics_client, addr).await?;
        if still_waiting < n as u64 {
            return Err(
                format!("only {still_waiting} of {n} polls still waiting at the sample").into(),
            );
        }
        let mut tasks = Vec::with_capacity(n);
        for mut stream in streams.drain(..) {
            tasks.push(tokio::spawn(
                async move { read_response(&mut stream).await },
            ));
        }
        for task in tasks {
            let (status, body) = task.await??;
            let answer: serde_json::Value = serde_json::from_slice(&body)?;
            let empty = answer["messages"].as_array().is_some_and(Vec::is_empty);
            if status != 200 || !empty {
                return Err(format!("a poll answered {status}: {answer}").into());
            }
        }
        let after = server.settled_rss().await?;
        eprintln!(
            "{label}: {n} polls, all waiting at the sample, all answered empty: \
             {:.1} -> {:.1} -> {:.1} MiB",
            mib(before),
            mib(open),
            mib(after)
        );
        Ok(Round {
            kind: KIND,
            label,
            before,
            open,
            after,
            seconds_to_open,
        })
    }
}

async fn connection_memory(plan: &Plan, data: &Path) -> BenchResult<()> {
    let (soft, hard) = raise_own_fd_limit();
    let (n, wait) = (plan.connections, plan.poll_wait_seconds);

    // Cold figures: each set into a fresh process, so no heap freed by an earlier set is
    // reused and the growth is what the set itself costs.
    let cold_idle_target = MemoryTarget::start(&data.join("cold-idle"), wait).await?;
    let cold_idle = cold_idle_target.idle_set(n, "fresh process".into()).await?;
    drop(cold_idle_target);
    let cold_poll_target = MemoryTarget::start(&data.join("cold-poll"), wait).await?;
    let cold_poll = cold_poll_target
        .poll_set(n, wait, "fresh process".into())
        .await?;
    drop(cold_poll_target);

    // Repeated sets on one process: RSS after each close shows whether memory is kept.
    let target = MemoryTarget::start(&data.join("rounds"), wait).await?;
    let mut rounds = Vec::new();
    for round in 1..=plan.memory_rounds {
        rounds.push(
            target
                .idle_set(n, format!("same server, round {round}"))
                .await?,
        );
        rounds.push(
            target
                .poll_set(n, wait, format!("same server, round {round}"))
                .await?,
        );
    }
    let (_, peak) = memory(target.server.child.id())?;

    println!();
    println!(
        "### Resident memory of `sluice serve` (child process, embedded store), {n} at a time"
    );
    println!();
    println!(
        "descriptor limits: this bench soft {} / hard {} (the server raises its own soft limit \
         to the hard one); polls wait {wait} s on an empty queue; RSS of a fresh server \
         {:.1} MiB; peak (VmHWM) of the repeated-rounds server {:.1} MiB",
        soft.map_or_else(|| "unlimited".into(), |v| v.to_string()),
        hard.map_or_else(|| "unlimited".into(), |v| v.to_string()),
        mib(target.baseline),
        mib(peak)
    );
    println!();
    println!(
        "| set                                      | opened in (s) | RSS before (MiB) | RSS open (MiB) \
         | bytes each | RSS after close (MiB) |"
    );
    println!(
        "|------------------------------------------|--------------:|-----------------:|---------------:\
         |-----------:|----------------------:|"
    );
    let row = |r: &Round| {
        println!(
            "| {:<40} | {:>13.1} | {:>16.1} | {:>14.1} | {:>10.0} | {:>21.1} |",
            format!("{}, {}", r.kind, r.label),
            r.seconds_to_open,
            mib(r.before),
            mib(r.open),
            r.open.saturating_sub(r.before) as f64 / n as f64,
            mib(r.after)
        );
    };
    row(&cold_idle);
    row(&cold_poll);
    for r in &rounds {
        row(r);
    }
    let poll_over_idle = cold_poll.open.saturating_sub(cold_poll.before) as f64 / n as f64
        - cold_idle.open.saturating_sub(cold_idle.before) as f64 / n as f64;
    println!();
    println!(
        "a waiting poll costs about {poll_over_idle:.0} bytes more than an idle connection \
         (fresh processes)"
    );
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
    limiter_and_scrape_cost(plan, &data.join("in-process")).await?;
    connection_memory(plan, &data.join("child")).await
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
