//! Group commit benchmark of the embedded engine, in process (no HTTP).
//!
//! The embedded engine answers a send only once its data is fsynced, and batches the commits
//! that arrive while an fsync is in flight into one transaction and one fsync. This bench checks
//! that claim on this machine, in one run, with ratios rather than absolute numbers (the
//! machine is shared and noisy):
//!
//! 1. **Raw ceiling**: a loop of `write 1 KiB + fdatasync` on a plain file in the same
//!    directory, i.e. the physical limit of "one fsync per acknowledged write".
//! 2. **Sends/s with 64 concurrent producers** (tokio tasks, one 1 KiB message per send), with
//!    [`CommitMode::Group`] and with the same engine forced to [`CommitMode::FsyncEachWrite`].
//!    The target is group commit at least 10x faster. Each measurement opens a fresh
//!    engine; the three are repeated in alternation (5 times) and medians are reported.
//! 3. **Single-producer send latency** (p50/p99), group commit, next to the raw fdatasync
//!    latency.
//! 4. **Resident memory per queued message**: VmRSS before and after enqueueing 1,000,000 small
//!    messages in one queue (the engine keeps bodies on disk and only a compact index in memory).
//!
//! Run: `cargo bench -p sluice-embedded --bench group_commit`. `SLUICE_BENCH_QUICK=1` shrinks
//! every phase (smoke run); `SLUICE_BENCH_MEMORY_MESSAGES=<n>` changes how many messages the
//! memory phase enqueues. `SLUICE_BENCH_DIR` overrides the scratch directory (default: the
//! system temp dir, or `bench-tmp` in the cargo target directory when that is a tmpfs).

use sluice_bench_support::flow::BODY_BYTES;
use sluice_bench_support::stats::{median_or_nan as median, Latencies};
use sluice_bench_support::system::{
    own_cpu_seconds as cpu_seconds, resident_bytes, scratch_base, threads_cpu_seconds,
};
use sluice_bench_support::BenchResult;
use sluice_embedded::{CommitMode, EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{
    Messages, Millis, NewMessage, QueueConfig, QueueKey, QueueName, Queues, TenantId,
};
use std::collections::BTreeMap;
use std::error::Error;
use std::io::Write;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const PRODUCERS: usize = 64;

/// Sizes of every phase; [`Plan::quick`] for smoke runs.
struct Plan {
    repetitions: usize,
    /// Length of each throughput measurement (raw, group, fsync-each).
    window: Duration,
    /// Length of the single-producer latency measurement.
    latency_window: Duration,
    /// Messages enqueued for the memory measurement.
    memory_messages: u64,
}

impl Plan {
    fn full() -> Self {
        Self {
            repetitions: 5,
            window: Duration::from_secs(3),
            latency_window: Duration::from_secs(4),
            memory_messages: 1_000_000,
        }
    }

    fn quick() -> Self {
        Self {
            repetitions: 1,
            window: Duration::from_millis(500),
            latency_window: Duration::from_millis(500),
            memory_messages: 50_000,
        }
    }
}

fn now_millis() -> Millis {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as Millis)
}

fn queue_key() -> BenchResult<QueueKey> {
    Ok(QueueKey::new(
        TenantId::parse("bench")?,
        QueueName::parse("q")?,
    ))
}

/// A message like the services would hand down: a 36-character id, no attributes.
fn message(n: u64, body: &str, now: Millis) -> NewMessage {
    NewMessage {
        payload: None,
        message_id: format!("{:08x}-0000-4000-8000-{:012x}", n >> 48, n),
        body: body.to_owned(),
        attributes: BTreeMap::new(),
        visible_at: now,
        group_id: None,
        deduplication_id: None,
    }
}

fn body(bytes: usize) -> String {
    "x".repeat(bytes)
}

fn latency_row(latencies: &Latencies, label: &str) {
    let [p50, p99, p999, max] = latencies.millis();
    println!(
        "| {label:<38} | {:>8} | {p50:>9.3} | {p99:>9.3} | {p999:>9.3} | {max:>9.3} |",
        latencies.count
    );
}

/// `write 1 KiB + fdatasync` on a plain file for `window`: the physical ceiling of one fsync
/// per acknowledged write. Answers fsyncs/s and, optionally, each call's latency.
fn raw_fdatasync(dir: &Path, window: Duration, keep: bool) -> BenchResult<(f64, Vec<Duration>)> {
    let path = dir.join("raw-fdatasync.bin");
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)?;
    let block = vec![b'x'; BODY_BYTES];
    let mut samples = Vec::new();
    let mut count = 0u64;
    let start = Instant::now();
    while start.elapsed() < window {
        let t = Instant::now();
        file.write_all(&block)?;
        file.sync_data()?;
        if keep {
            samples.push(t.elapsed());
        }
        count += 1;
    }
    let rate = count as f64 / start.elapsed().as_secs_f64();
    drop(file);
    std::fs::remove_file(&path)?;
    Ok((rate, samples))
}

/// One throughput measurement: what `PRODUCERS` tasks sending one message at a time achieve.
struct Throughput {
    sends_per_second: f64,
    /// Sends per committed transaction (1 without group commit).
    sends_per_commit: f64,
    /// CPU cores this process kept busy on average (1.0 = one core).
    cores_busy: f64,
    /// Share of the window the commit thread spent on a CPU (the rest: waiting for the disk
    /// or for work).
    commit_thread_busy: f64,
}

/// The per-run figures of one measurement, for medians.
#[derive(Default)]
struct Series {
    rates: Vec<f64>,
    per_fsync: Vec<f64>,
    cores: Vec<f64>,
    writer: Vec<f64>,
}

impl Series {
    fn push(&mut self, t: &Throughput) {
        self.rates.push(t.sends_per_second);
        self.per_fsync.push(t.sends_per_commit);
        self.cores.push(t.cores_busy);
        self.writer.push(t.commit_thread_busy);
    }

    fn row(&self, label: &str, raw_median: f64) {
        let rates: Vec<String> = self.rates.iter().map(|x| format!("{x:.0}")).collect();
        let med = median(&self.rates);
        println!(
            "| {label:<34} | {:<34} | {med:>11.0} | {:>15.2}x | {:>16.1} | {:>14.2} | {:>16.0}% |",
            rates.join(", "),
            med / raw_median,
            median(&self.per_fsync),
            median(&self.cores),
            100.0 * median(&self.writer),
        );
    }
}

async fn open_engine(
    base: &Path,
    mode: CommitMode,
) -> BenchResult<(tempfile::TempDir, Arc<EmbeddedEngine>, QueueKey)> {
    let dir = tempfile::Builder::new()
        .prefix("sluice-bench-")
        .tempdir_in(base)?;
    let engine = EmbeddedEngine::open(dir.path(), EmbeddedOptions { commit_mode: mode })?;
    let key = queue_key()?;
    engine
        .put_queue(&key, QueueConfig::with_defaults(1 << 20), now_millis())
        .await?;
    Ok((dir, Arc::new(engine), key))
}

async fn concurrent_sends(
    base: &Path,
    mode: CommitMode,
    window: Duration,
) -> BenchResult<Throughput> {
    let (dir, engine, key) = open_engine(base, mode).await?;
    let body = Arc::new(body(BODY_BYTES));
    let sent = Arc::new(AtomicU64::new(0));
    let commits_before = engine.commit_count();
    let cpu_before = cpu_seconds();
    let commit_cpu_before = commit_thread_cpu_seconds();
    let start = Instant::now();
    let deadline = start + window;
    let mut tasks = Vec::with_capacity(PRODUCERS);
    for producer in 0..PRODUCERS {
        let (engine, key, body, sent) = (
            Arc::clone(&engine),
            key.clone(),
            Arc::clone(&body),
            Arc::clone(&sent),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = (producer as u64) << 40;
            while Instant::now() < deadline {
                let now = now_millis();
                let answers = engine.send(&key, vec![message(n, &body, now)], now).await?;
                if answers.iter().any(Result::is_err) {
                    return Err::<(), Box<dyn Error + Send + Sync>>("a send was refused".into());
                }
                sent.fetch_add(1, Ordering::Relaxed);
                n += 1;
            }
            Ok(())
        }));
    }
    for task in tasks {
        task.await??;
    }
    let elapsed = start.elapsed().as_secs_f64();
    let cores_busy = (cpu_seconds() - cpu_before) / elapsed;
    let commit_thread_busy = (commit_thread_cpu_seconds() - commit_cpu_before) / elapsed;
    let sends = sent.load(Ordering::Relaxed);
    let commits = engine.commit_count() - commits_before;
    drop(engine);
    drop(dir);
    Ok(Throughput {
        sends_per_second: sends as f64 / elapsed,
        sends_per_commit: sends as f64 / commits.max(1) as f64,
        cores_busy,
        commit_thread_busy,
    })
}

async fn single_producer_latency(
    base: &Path,
    mode: CommitMode,
    window: Duration,
) -> BenchResult<Latencies> {
    let (dir, engine, key) = open_engine(base, mode).await?;
    let body = body(BODY_BYTES);
    let mut samples = Vec::new();
    let start = Instant::now();
    let mut n = 0u64;
    while start.elapsed() < window {
        let now = now_millis();
        let t = Instant::now();
        engine.send(&key, vec![message(n, &body, now)], now).await?;
        samples.push(t.elapsed());
        n += 1;
    }
    drop(engine);
    drop(dir);
    Ok(Latencies::of(samples))
}

/// CPU time used so far by the engine's commit thread (the one named `sluice-commit`; one engine
/// is open at a time here), or NaN if it cannot be found.
fn commit_thread_cpu_seconds() -> f64 {
    threads_cpu_seconds("sluice-commit")
}

/// Enqueues `total` small messages in one queue, sampling VmRSS at each quarter.
async fn memory_per_message(base: &Path, total: u64) -> BenchResult<()> {
    const BATCH: u64 = 10;
    const SENDERS: u64 = 64;
    let (dir, engine, key) = open_engine(base, CommitMode::Group).await?;
    let before = resident_bytes()?;
    let start = Instant::now();
    let mut checkpoints = vec![(0u64, before)];
    let quarter = total / 4;
    for step in 1..=4u64 {
        let from = (step - 1) * quarter;
        let to = if step == 4 { total } else { step * quarter };
        let next = Arc::new(AtomicU64::new(from / BATCH));
        let last_batch = to.div_ceil(BATCH);
        let mut tasks = Vec::new();
        for _ in 0..SENDERS {
            let (engine, key, next) = (Arc::clone(&engine), key.clone(), Arc::clone(&next));
            tasks.push(tokio::spawn(async move {
                loop {
                    let batch = next.fetch_add(1, Ordering::Relaxed);
                    if batch >= last_batch {
                        return Ok::<(), Box<dyn Error + Send + Sync>>(());
                    }
                    let now = now_millis();
                    let messages = (batch * BATCH..(batch + 1) * BATCH)
                        .map(|n| message(n, &format!("small message {n:>10}"), now))
                        .collect();
                    let answers = engine.send(&key, messages, now).await?;
                    if answers.iter().any(Result::is_err) {
                        return Err("a send was refused".into());
                    }
                }
            }));
        }
        for task in tasks {
            task.await??;
        }
        checkpoints.push((to.div_ceil(BATCH) * BATCH, resident_bytes()?));
    }
    let elapsed = start.elapsed();
    let stored = engine
        .get_queue(&key, now_millis())
        .await?
        .map_or(0, |q| q.stats.visible);
    let (n, after) = checkpoints[checkpoints.len() - 1];
    let (half_n, half_rss) = checkpoints[2];

    println!();
    println!(
        "### Resident memory per queued message ({n} messages of ~25 B, batches of {BATCH}, \
         {SENDERS} concurrent senders, {:.1} s, {:.0} msgs/s; queue reports {stored} visible)",
        elapsed.as_secs_f64(),
        n as f64 / elapsed.as_secs_f64()
    );
    println!();
    println!("| messages queued | VmRSS (MiB) | delta from start (MiB) | delta / message (B) |");
    println!("|----------------:|------------:|-----------------------:|--------------------:|");
    for &(count, rss) in &checkpoints {
        let delta = rss.saturating_sub(before);
        let per = if count == 0 {
            "-".to_owned()
        } else {
            format!("{:.0}", delta as f64 / count as f64)
        };
        println!(
            "| {count:>15} | {:>11.1} | {:>22.1} | {per:>19} |",
            rss as f64 / 1048576.0,
            delta as f64 / 1048576.0,
        );
    }
    println!();
    println!(
        "memory per queued message: {:.0} B overall (target <= 300 B); {:.0} B marginal over \
         the second half",
        after.saturating_sub(before) as f64 / n as f64,
        after.saturating_sub(half_rss) as f64 / (n - half_n) as f64
    );
    drop(engine);
    drop(dir);
    Ok(())
}

fn main() -> BenchResult<()> {
    let quick = sluice_bench_support::quick();
    let mut plan = if quick { Plan::quick() } else { Plan::full() };
    if let Some(n) = std::env::var("SLUICE_BENCH_MEMORY_MESSAGES")
        .ok()
        .and_then(|v| v.parse().ok())
    {
        plan.memory_messages = n;
    }
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (base, fs) = scratch_base()?;
    println!(
        "## sluice-embedded: group commit{}",
        if quick { " (QUICK)" } else { "" }
    );
    println!();
    println!(
        "scratch dir {} ({fs}); {} cores; {PRODUCERS} producers; {BODY_BYTES} B bodies; \
         {} x {:.1} s windows, alternating",
        base.display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        plan.repetitions,
        plan.window.as_secs_f64()
    );

    // First, while the allocator holds nothing freed by earlier phases that a new index could
    // reuse without growing the resident set.
    runtime.block_on(memory_per_message(&base, plan.memory_messages))?;

    let (mut raw, mut group, mut each) = (Series::default(), Series::default(), Series::default());
    let mut ratios = Vec::new();
    for rep in 1..=plan.repetitions {
        let scratch = tempfile::Builder::new()
            .prefix("sluice-raw-")
            .tempdir_in(&base)?;
        let cpu_before = cpu_seconds();
        let raw_start = Instant::now();
        let (raw_rate, _) = raw_fdatasync(scratch.path(), plan.window, false)?;
        let raw_cores = (cpu_seconds() - cpu_before) / raw_start.elapsed().as_secs_f64();
        let g = runtime.block_on(concurrent_sends(&base, CommitMode::Group, plan.window))?;
        let e = runtime.block_on(concurrent_sends(
            &base,
            CommitMode::FsyncEachWrite,
            plan.window,
        ))?;
        eprintln!(
            "rep {rep}: raw {raw_rate:.0} fsyncs/s, group {:.0} sends/s ({:.1} sends/commit), \
             fsync-each {:.0} sends/s",
            g.sends_per_second, g.sends_per_commit, e.sends_per_second
        );
        // The raw loop runs on the main thread: its writer thread is the whole process.
        raw.push(&Throughput {
            sends_per_second: raw_rate,
            sends_per_commit: 1.0,
            cores_busy: raw_cores,
            commit_thread_busy: raw_cores,
        });
        group.push(&g);
        each.push(&e);
        ratios.push(g.sends_per_second / e.sends_per_second);
    }
    let raw_m = median(&raw.rates);
    let group_m = median(&group.rates);
    let each_m = median(&each.rates);
    let ratio_m = median(&ratios);

    println!();
    println!("### Throughput, {PRODUCERS} concurrent producers, one 1 KiB message per send");
    println!();
    println!(
        "| measurement                        | per run (/s)                       | median (/s) \
         | vs raw fdatasync | writes per fsync | CPU cores busy | writer thread CPU |"
    );
    println!(
        "|------------------------------------|------------------------------------|------------:\
         |-----------------:|-----------------:|---------------:|------------------:|"
    );
    raw.row("raw `write 1 KiB + fdatasync` loop", raw_m);
    group.row("engine send, group commit", raw_m);
    each.row("engine send, one fsync per send", raw_m);
    println!();
    let per_run: Vec<String> = ratios.iter().map(|r| format!("{r:.1}x")).collect();
    println!(
        "group commit / one fsync per send: {ratio_m:.1}x (median of per-run ratios {}); \
         target >= 10x: {}",
        per_run.join(", "),
        if ratio_m >= 10.0 { "MET" } else { "MISSED" }
    );
    println!(
        "one fsync per send reaches {:.0}% of the raw fdatasync ceiling; group commit {:.1}x it",
        100.0 * each_m / raw_m,
        group_m / raw_m
    );

    let scratch = tempfile::Builder::new()
        .prefix("sluice-raw-")
        .tempdir_in(&base)?;
    let (_, raw_samples) = raw_fdatasync(scratch.path(), plan.latency_window, true)?;
    let raw_latency = Latencies::of(raw_samples);
    let group_latency = runtime.block_on(single_producer_latency(
        &base,
        CommitMode::Group,
        plan.latency_window,
    ))?;
    let each_latency = runtime.block_on(single_producer_latency(
        &base,
        CommitMode::FsyncEachWrite,
        plan.latency_window,
    ))?;
    println!();
    println!("### Single-producer latency (one 1 KiB message per send, one at a time)");
    println!();
    println!(
        "| operation                              |  samples |  p50 (ms) |  p99 (ms) | p99.9 (ms)|  max (ms) |"
    );
    println!(
        "|----------------------------------------|---------:|----------:|----------:|----------:|----------:|"
    );
    latency_row(&raw_latency, "raw `write 1 KiB + fdatasync`");
    latency_row(&group_latency, "engine send, group commit");
    latency_row(&each_latency, "engine send, one fsync per send");
    Ok(())
}
