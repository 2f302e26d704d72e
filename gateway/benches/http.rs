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
//! temp dir, or `bench-tmp` in the cargo target directory when that is a tmpfs).

mod common;

use common::{expect_status, start_gateway, Http};
use sluice_bench_support::flow::{flow, padded_body, Flow, BODY_BYTES};
use sluice_bench_support::stats::{median_or_nan as median, runs, Latencies};
use sluice_bench_support::system::{own_cpu_seconds as cpu_seconds, scratch_base};
use sluice_bench_support::BenchResult;
use sluice_gateway::config::CommonArgs;
use std::error::Error;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const PRODUCERS: usize = 8;
const CONSUMERS: usize = 8;

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

fn latency_row(latencies: &Latencies, label: &str) {
    let [p50, p99, p999, max] = latencies.millis();
    println!(
        "| {label:<36} | {:>8} | {p50:>9.3} | {p99:>9.3} | {p999:>10.3} | {max:>9.3} |",
        latencies.count
    );
}

/// `GET /healthz` from `clients` concurrent tasks for `window`: requests/s and cores busy.
async fn noop_ceiling(target: &Http, clients: usize, window: Duration) -> BenchResult<(f64, f64)> {
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

/// One end-to-end run on a new queue, and the CPU cores the process (server and load
/// generator) kept busy on average meanwhile.
async fn measured_flow(
    target: &Http,
    queue: &str,
    batch: usize,
    window: Duration,
) -> BenchResult<(Flow, f64)> {
    let driver = Arc::new(target.driver(queue).await?);
    let cpu_before = cpu_seconds();
    let start = Instant::now();
    let f = flow(driver, PRODUCERS, CONSUMERS, batch, window).await?;
    let cores_busy = (cpu_seconds() - cpu_before) / start.elapsed().as_secs_f64();
    Ok((f, cores_busy))
}

/// One producer, one send at a time: each request's latency.
async fn send_latency(target: &Http, queue: &str, window: Duration) -> BenchResult<Latencies> {
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
async fn noop_latency(target: &Http, window: Duration) -> BenchResult<Latencies> {
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

/// One row of the throughput table.
fn throughput_row(label: &str, runs_text: &str, msgs: Option<f64>, reqs: f64, vs: f64, tail: &str) {
    let msgs = msgs.map_or_else(|| "-".to_owned(), |m| format!("{m:.0}"));
    println!("| {label:<40} | {runs_text:<20} | {msgs:>13} | {reqs:>10.0} | {vs:>13.2}x | {tail}");
}

async fn run(plan: &Plan, quick: bool, data: &Path, fs: &str) -> BenchResult<()> {
    let args = CommonArgs {
        data_dir: Some(data.to_path_buf()),
        ..Default::default()
    };
    let target = start_gateway(args, "bench").await?;
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
    let mut flows: [Vec<(Flow, f64)>; 2] = [Vec::new(), Vec::new()];
    for rep in 1..=plan.repetitions {
        let (rate, cores) = noop_ceiling(&target, clients, plan.window).await?;
        eprintln!("rep {rep}: GET /healthz {rate:.0} req/s");
        ceiling.push(rate);
        ceiling_cores.push(cores);
        for (slot, batch) in [(0usize, 1usize), (1, 10)] {
            let (f, cores) =
                measured_flow(&target, &format!("b{batch}-r{rep}"), batch, plan.window).await?;
            eprintln!(
                "rep {rep}: batch {batch}: {:.0} msgs/s, {:.0} req/s, sent {}, lost {}, \
                 duplicates {}, empty receives {}",
                f.msgs_per_second,
                f.ops_per_second(),
                f.sent,
                f.lost,
                f.duplicates,
                f.empty_receives
            );
            flows[slot].push((f, cores));
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
        let msgs: Vec<f64> = f.iter().map(|(x, _)| x.msgs_per_second).collect();
        let reqs = median(
            &f.iter()
                .map(|(x, _)| x.ops_per_second())
                .collect::<Vec<_>>(),
        );
        let cores = median(&f.iter().map(|(_, c)| *c).collect::<Vec<_>>());
        msgs_medians[slot] = median(&msgs);
        throughput_row(
            &format!("send + receive + delete, {label}"),
            &runs(&msgs),
            Some(msgs_medians[slot]),
            reqs,
            reqs / ceiling_m,
            &format!(
                "{cores:>14.2} | {} | {} | {} |",
                f.iter().map(|(x, _)| x.sent).sum::<u64>(),
                f.iter().map(|(x, _)| x.lost).sum::<u64>(),
                f.iter().map(|(x, _)| x.duplicates).sum::<u64>(),
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
    latency_row(&noop, "GET /healthz (no-op)");
    latency_row(&send, "POST /messages, 1 KiB (durable send)");
    Ok(())
}

fn main() -> BenchResult<()> {
    let quick = sluice_bench_support::quick();
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
