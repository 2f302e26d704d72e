//! `sluice-bench`: the load generator and peer benchmark tool.
//!
//! Subcommands:
//!
//! * `load`: N producers and M consumers against one queue of one target (Sluice's REST API,
//!   the no-op HTTP ceiling, RabbitMQ over AMQP, or SQS/moto), with message size, batch size,
//!   queue kind (standard, FIFO with K groups), target rate or unbounded, duration or message
//!   count; checks that every message is received and counts duplicates; prints a progress
//!   line, then a summary, and appends a JSON record to `--json-out`.
//! * `queues`: many queues with few messages each (memory per idle queue).
//! * `fanout`: one publish, one copy in each of N queues: a Sluice topic with N subscriptions
//!   or a RabbitMQ fanout exchange with N bound queues; `fanout-report` prints its table.
//! * `noop-server`: the HTTP ceiling server.
//! * `note`: appends a record saying a scenario was not available, or extra figures (e.g.
//!   `redis-benchmark`'s).
//! * `report`: rewrites the peer comparison section of BENCHMARKS.md from the records.
//!
//! `tests/bench/run.sh` drives all of it; BENCHMARKS.md documents the script.

mod drivers;
mod fanout;
mod fleet;
mod load;
mod noop;
mod report;
mod stats;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand, ValueEnum};
use drivers::{
    amqp::AmqpDriver, sluice::SluiceDriver, sqs::SqsDriver, Driver, QueueSpec, Unsupported,
};
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "sluice-bench",
    about = "Load generator and peer benchmarks for Sluice"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Drive one queue of one target with producers and consumers.
    Load(LoadArgs),
    /// Create many queues with few messages each and report memory per queue.
    Queues(QueuesArgs),
    /// Publish to a topic (Sluice) or fanout exchange (RabbitMQ) bound to N queues.
    Fanout(FanoutArgs),
    /// Print the Markdown table of a `fanout` results file.
    FanoutReport {
        #[arg(long)]
        results: PathBuf,
        /// The label the ratios are taken against.
        #[arg(long, default_value = "rabbitmq")]
        baseline: String,
    },
    /// The disk's latency floor: `write` + `fdatasync` of one message in a loop, in DIR.
    FsyncProbe {
        /// A folder on the disk the servers write to.
        #[arg(long)]
        dir: PathBuf,
        #[arg(long, default_value_t = 5.0)]
        duration: f64,
        #[arg(long, default_value_t = 1024)]
        size: usize,
        /// Append a `ceiling` note record with the figures to this file.
        #[arg(long)]
        json_out: Option<PathBuf>,
    },
    /// Serve the no-op HTTP ceiling (prints `sluice-bench noop listening on http://ADDR`).
    NoopServer {
        #[arg(long, default_value = "127.0.0.1:0")]
        listen: String,
        /// Body size of the canned messages a receive answers.
        #[arg(long, default_value_t = 1024)]
        body_size: usize,
    },
    /// Append a note record (scenario not available, or extra figures) to the results file.
    Note {
        #[arg(long)]
        json_out: PathBuf,
        #[arg(long)]
        scenario: String,
        #[arg(long)]
        target: String,
        /// e.g. "not available", "failed", "ok".
        #[arg(long)]
        status: String,
        #[arg(long, default_value = "")]
        detail: String,
        /// Figures as NAME=NUMBER, repeatable.
        #[arg(long = "value")]
        values: Vec<String>,
    },
    /// Rewrite the results section of a Markdown file between the peer markers.
    Report {
        /// The JSON-lines results file of the run.
        #[arg(long)]
        results: PathBuf,
        /// The Markdown file to update (between `<!-- peers:start -->` and `<!-- peers:end -->`).
        #[arg(long)]
        markdown: PathBuf,
        /// Run facts for the header table as KEY=VALUE, repeatable (date, mode, command,
        /// machine, versions...), in the order given.
        #[arg(long = "meta")]
        meta: Vec<String>,
    },
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Target {
    /// Sluice's REST API.
    Sluice,
    /// The no-op HTTP ceiling (`noop-server`), through the same client code as Sluice.
    Noop,
    /// RabbitMQ over AMQP 0-9-1.
    Amqp,
    /// An SQS endpoint (moto).
    Sqs,
}

#[derive(clap::Args)]
struct TargetArgs {
    #[arg(long, value_enum)]
    target: Target,
    /// Base URL: http://HOST:PORT (Sluice, no-op, SQS) or amqp://USER:PASS@HOST:PORT/%2f.
    #[arg(long)]
    url: String,
    /// Bearer token (Sluice).
    #[arg(long, env = "SLUICE_BENCH_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Name of the target in reports (e.g. sluice-embedded, rabbitmq).
    #[arg(long)]
    label: Option<String>,
    /// Scenario name in reports (e.g. a, b, c).
    #[arg(long, default_value = "adhoc")]
    scenario: String,
    /// Server process ids to watch (CPU, memory), repeatable.
    #[arg(long = "server-pid")]
    server_pids: Vec<u32>,
    /// Append the JSON record to this file.
    #[arg(long)]
    json_out: Option<PathBuf>,
    /// Hard bound on the whole command, in seconds.
    #[arg(long, default_value_t = 600.0)]
    max_seconds: f64,
}

#[derive(clap::Args)]
struct LoadArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[arg(long, default_value_t = 1)]
    rep: u32,
    #[arg(long, default_value_t = 8)]
    producers: usize,
    #[arg(long, default_value_t = 8)]
    consumers: usize,
    /// Message body size in bytes (at least 32: the id and timestamp header).
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Messages per send request (1–10).
    #[arg(long, default_value_t = 10)]
    batch: usize,
    /// Messages per receive/delete request (1–10); defaults to --batch.
    #[arg(long)]
    receive_batch: Option<usize>,
    /// FIFO queue with this many message groups (standard queue when absent).
    #[arg(long)]
    fifo_groups: Option<u32>,
    /// Total target send rate in msgs/s (unbounded when absent).
    #[arg(long)]
    rate: Option<f64>,
    /// Producers stop after this many seconds...
    #[arg(long)]
    duration: Option<f64>,
    /// ...or after this many messages in all.
    #[arg(long)]
    messages: Option<u64>,
    /// Seconds consumers may keep draining after the producers stop.
    #[arg(long, default_value_t = 30.0)]
    drain_timeout: f64,
    /// Long-poll wait of each receive, in whole seconds.
    #[arg(long, default_value_t = 1)]
    wait: u64,
    /// Fill the queue first (producers only), then drain it (consumers only).
    #[arg(long)]
    backlog: bool,
    /// AMQP consumer prefetch (messages the broker pushes ahead of acks).
    #[arg(long, default_value_t = 20)]
    prefetch: u16,
    /// AMQP connections shared by all producers and consumers (a channel each); 0 gives each
    /// its own connection. Default 2: lapin runs a thread per connection, and on 2 cores 16
    /// of them cost RabbitMQ about a quarter of its throughput here.
    #[arg(long, default_value_t = 2)]
    amqp_connections: usize,
    /// Queue name (default: generated, unique per run).
    #[arg(long)]
    queue: Option<String>,
    /// Leave the queue in place after the run.
    #[arg(long)]
    keep_queue: bool,
    /// Seconds between progress lines.
    #[arg(long, default_value_t = 2.0)]
    progress: f64,
}

#[derive(clap::Args)]
struct QueuesArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[arg(long, default_value_t = 10_000)]
    count: usize,
    /// Messages sent to each queue.
    #[arg(long, default_value_t = 2)]
    per_queue: usize,
    #[arg(long, default_value_t = 1024)]
    size: usize,
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Delete the queues again after measuring.
    #[arg(long)]
    cleanup: bool,
}

#[derive(clap::Args)]
struct FanoutArgs {
    #[command(flatten)]
    target: TargetArgs,
    #[arg(long, default_value_t = 1)]
    rep: u32,
    /// Queues (subscriptions, or queues bound to the exchange).
    #[arg(long, default_value_t = 10)]
    queues: usize,
    #[arg(long, default_value_t = 8)]
    producers: usize,
    /// Messages per publish request (Sluice: publish batch; RabbitMQ: publishes before
    /// waiting for their confirms).
    #[arg(long, default_value_t = 10)]
    batch: usize,
    #[arg(long, default_value_t = 1024)]
    size: usize,
    /// Seconds the producers publish.
    #[arg(long, default_value_t = 5.0)]
    duration: f64,
    /// AMQP connections the producers' channels share.
    #[arg(long, default_value_t = 2)]
    amqp_connections: usize,
}

async fn fanout_command(args: FanoutArgs) -> Result<()> {
    let t = &args.target;
    let label = t
        .label
        .clone()
        .unwrap_or_else(|| format!("{:?}", t.target).to_lowercase());
    anyhow::ensure!((1..=10).contains(&args.batch), "--batch must be 1–10");
    let plan = fanout::FanoutPlan {
        queues: args.queues,
        producers: args.producers,
        batch: args.batch,
        size: args.size.max(16),
        duration: secs(args.duration)?,
        amqp_connections: args.amqp_connections,
    };
    let servers = stats::Processes(t.server_pids.clone());
    let work = async {
        match t.target {
            Target::Sluice => {
                let token = t.token.as_deref().context("--token is needed for Sluice")?;
                fanout::sluice(&t.url, token, &label, args.rep, &plan, &servers).await
            }
            Target::Amqp => fanout::rabbitmq(&t.url, &label, args.rep, &plan, &servers).await,
            other => anyhow::bail!("fanout supports sluice and amqp, not {other:?}"),
        }
    };
    let record = tokio::time::timeout(secs(t.max_seconds)?, work)
        .await
        .context("the run took longer than --max-seconds")??;
    fanout::save(t.json_out.as_deref(), &record)
}

fn secs(s: f64) -> Result<Duration> {
    Duration::try_from_secs_f64(s).with_context(|| format!("invalid duration {s}"))
}

/// A queue name unique to this run, valid for every target (`[A-Za-z0-9_-]`, ≤ 80 with `.fifo`).
fn queue_name(scenario: &str, label: &str, rep: u32) -> String {
    let clean: String = format!("bench-{scenario}-{label}")
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '-'
            }
        })
        .take(50)
        .collect();
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() % 1_000_000_000);
    format!("{clean}-r{rep}-{nonce}")
}

fn append_json(path: &Path, value: &impl serde::Serialize) -> Result<()> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .with_context(|| format!("opening {}", path.display()))?;
    writeln!(file, "{}", serde_json::to_string(value)?)?;
    Ok(())
}

async fn drive<D: Driver>(
    driver: D,
    args: &LoadArgs,
    plan: &load::Plan,
    label: &str,
) -> Result<load::RunReport> {
    let driver = Arc::new(driver);
    let servers = stats::Processes(args.target.server_pids.clone());
    let result = load::run(
        Arc::clone(&driver),
        plan,
        &servers,
        (&args.target.scenario, label, args.rep),
    )
    .await;
    if !args.keep_queue {
        // Best effort, bounded: the figures are already taken.
        match tokio::time::timeout(Duration::from_secs(30), driver.delete_queue()).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => eprintln!("warning: deleting the queue: {e:#}"),
            Err(_) => eprintln!("warning: deleting the queue timed out"),
        }
    }
    result
}

async fn load_command(args: LoadArgs) -> Result<()> {
    let t = &args.target;
    let label = t
        .label
        .clone()
        .unwrap_or_else(|| format!("{:?}", t.target).to_lowercase());
    anyhow::ensure!((1..=10).contains(&args.batch), "--batch must be 1–10");
    let receive_batch = args.receive_batch.unwrap_or(args.batch);
    anyhow::ensure!(
        (1..=10).contains(&receive_batch),
        "--receive-batch must be 1–10"
    );
    anyhow::ensure!(args.rate.is_none_or(|r| r > 0.0), "--rate must be positive");
    let duration = args.duration.map(secs).transpose()?;
    anyhow::ensure!(
        duration.is_some() || args.messages.is_some(),
        "give --duration or --messages (every run is bounded)"
    );
    let plan = load::Plan {
        producers: args.producers,
        consumers: args.consumers,
        size: args.size.max(drivers::HEADER_BYTES),
        batch: args.batch,
        receive_batch,
        groups: args.fifo_groups,
        rate: args.rate,
        duration,
        messages: args.messages,
        drain_timeout: secs(args.drain_timeout)?,
        wait: Duration::from_secs(args.wait),
        backlog: args.backlog,
        max_duration: secs(t.max_seconds)?,
        progress_every: secs(args.progress)?,
    };
    let fifo = args.fifo_groups.is_some();
    let mut name = args
        .queue
        .clone()
        .unwrap_or_else(|| queue_name(&t.scenario, &label, args.rep));
    if fifo && !name.ends_with(".fifo") {
        name.push_str(".fifo");
    }
    let spec = QueueSpec { name, fifo };
    let report = match t.target {
        Target::Sluice | Target::Noop => {
            let driver = SluiceDriver::open(
                drivers::sluice::http_client()?,
                &t.url,
                t.token.as_deref(),
                &spec,
                t.target == Target::Sluice,
            )
            .await?;
            drive(driver, &args, &plan, &label).await?
        }
        Target::Amqp => {
            let driver =
                AmqpDriver::open(&t.url, &spec, args.prefetch, args.amqp_connections).await?;
            drive(driver, &args, &plan, &label).await?
        }
        Target::Sqs => {
            let driver = SqsDriver::open(drivers::sqs::client(&t.url), &spec).await?;
            drive(driver, &args, &plan, &label).await?
        }
    };
    println!("{}", load::summary(&report));
    if let Some(path) = &t.json_out {
        append_json(path, &report)?;
    }
    Ok(())
}

async fn queues_command(args: QueuesArgs) -> Result<()> {
    let t = &args.target;
    let label = t
        .label
        .clone()
        .unwrap_or_else(|| format!("{:?}", t.target).to_lowercase());
    let target = match t.target {
        Target::Sluice | Target::Noop => fleet::FleetTarget::Sluice {
            client: drivers::sluice::http_client()?,
            base: t.url.clone(),
            bearer: t.token.as_ref().map(|t| format!("Bearer {t}")),
        },
        Target::Amqp => fleet::FleetTarget::Amqp { uri: t.url.clone() },
        Target::Sqs => fleet::sqs_target(&t.url),
    };
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() % 1_000_000);
    let plan = fleet::FleetPlan {
        count: args.count,
        per_queue: args.per_queue,
        size: args.size.max(drivers::HEADER_BYTES),
        concurrency: args.concurrency.max(1),
        prefix: format!("idle-{nonce}-"),
        cleanup: args.cleanup,
        max_duration: secs(t.max_seconds)?,
    };
    let servers = stats::Processes(t.server_pids.clone());
    let report = fleet::run(&target, &plan, &servers, &t.scenario, &label).await?;
    println!(
        "{}/{}: {} queues x {} messages in {:.1} s ({:.0} queues/s); RSS {} -> {} MiB: {:.0} B per queue; errors {}",
        report.scenario,
        report.target,
        report.queues,
        report.per_queue,
        report.create_seconds,
        report.queues_per_second,
        report.rss_before.map_or("?".into(), |b| format!("{:.1}", b as f64 / 1048576.0)),
        report.rss_after.map_or("?".into(), |b| format!("{:.1}", b as f64 / 1048576.0)),
        report.bytes_per_queue.unwrap_or(f64::NAN),
        report.errors,
    );
    for (kind, n) in &report.error_kinds {
        println!("  error x{n}: {kind}");
    }
    if let Some(path) = &t.json_out {
        append_json(path, &report)?;
    }
    Ok(())
}

fn note_command(
    json_out: &Path,
    scenario: String,
    target: String,
    status: String,
    detail: String,
    values: &[String],
) -> Result<()> {
    let mut figures = serde_json::Map::new();
    for v in values {
        let (k, n) = v
            .split_once('=')
            .with_context(|| format!("--value {v:?}: expected NAME=NUMBER"))?;
        let n: f64 = n
            .trim()
            .parse()
            .with_context(|| format!("--value {v:?}: not a number"))?;
        figures.insert(k.trim().to_owned(), serde_json::json!(n));
    }
    append_json(
        json_out,
        &serde_json::json!({
            "record": "note",
            "scenario": scenario,
            "target": target,
            "status": status,
            "detail": detail,
            "values": figures,
        }),
    )
}

/// Appends `size` bytes and `fdatasync`s, one at a time, for `duration` (at most a million
/// times): what one durable write costs on this disk right now, next to which the services'
/// send latencies can be read.
fn fsync_probe(dir: &Path, duration: f64, size: usize, json_out: Option<&Path>) -> Result<()> {
    let path = dir.join(format!("fsync-probe-{}", std::process::id()));
    let mut file =
        std::fs::File::create(&path).with_context(|| format!("creating {}", path.display()))?;
    let block = vec![b'x'; size];
    let mut latency = stats::Latency::new();
    let start = std::time::Instant::now();
    let window = secs(duration)?;
    let mut ops = 0u64;
    while start.elapsed() < window && ops < 1_000_000 {
        let t = std::time::Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        latency.record(t.elapsed());
        ops += 1;
    }
    let elapsed = start.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    let p = latency.summary().context("no samples")?;
    println!(
        "fdatasync probe in {}: {:.0} ops/s, {}",
        dir.display(),
        ops as f64 / elapsed,
        p.short()
    );
    if let Some(out) = json_out {
        note_command(
            out,
            "ceiling".into(),
            format!("write {size} B + fdatasync, one at a time, in the data folder"),
            "ok".into(),
            format!("{ops} operations in {elapsed:.1} s"),
            &[
                format!("ops/s={:.0}", ops as f64 / elapsed),
                format!("p50 ms={}", p.p50_ms),
                format!("p99 ms={}", p.p99_ms),
                format!("p99.9 ms={}", p.p999_ms),
            ],
        )?;
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(r) => r,
        Err(e) => {
            eprintln!("error: starting the runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    let result = runtime.block_on(async {
        match cli.command {
            Command::Load(args) => load_command(args).await,
            Command::Queues(args) => queues_command(args).await,
            Command::Fanout(args) => fanout_command(args).await,
            Command::FanoutReport { results, baseline } => fanout::report(&results, &baseline),
            Command::NoopServer { listen, body_size } => noop::serve(&listen, body_size).await,
            Command::FsyncProbe {
                dir,
                duration,
                size,
                json_out,
            } => fsync_probe(&dir, duration, size, json_out.as_deref()),
            Command::Note {
                json_out,
                scenario,
                target,
                status,
                detail,
                values,
            } => note_command(&json_out, scenario, target, status, detail, &values),
            Command::Report {
                results,
                markdown,
                meta,
            } => report::rewrite(&results, &markdown, &meta),
        }
    });
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<Unsupported>().is_some() => {
            eprintln!("{e:#}");
            // 3: the target does not offer this; the script reports "not available".
            ExitCode::from(3)
        }
        Err(e) => {
            eprintln!("error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
