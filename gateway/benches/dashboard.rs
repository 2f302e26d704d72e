//! The dashboard's render time, on both engines: how long the server takes to answer
//!
//! 1. **the overview** (`GET /dashboard/queues`, its first page and a page found by name
//!    prefix) for a tenant with 10,000 queues, and
//! 2. **a queue page** (`GET /dashboard/queues/{queue}?limit=100`) peeking at 100 visible
//!    messages of 1 KiB.
//!
//! Each figure is the round trip of one request at a time from a keep-alive client on the same
//! machine (so it includes loopback HTTP, which is well under a millisecond), after warm-up
//! requests; the aim is ≤ 100 ms p99. Every answer must be `200` and name what it should (the
//! first queue, the 100th message), or the run fails.
//!
//! Run: `cargo bench -p sluice-gateway --bench dashboard` (needs `redis-server` on the PATH).
//! `SLUICE_BENCH_PHASES=1` or `2` runs one phase; `SLUICE_BENCH_QUICK=1` uses 1,000 queues
//! and fewer samples.

mod common;
#[path = "common/phases.rs"]
mod phases;

use common::{expect_status, Http};
use futures_util::stream::{self, StreamExt, TryStreamExt};
use phases::{wanted, Store, Stores};
use sluice_bench_support::flow::{Driver as _, BODY_BYTES};
use sluice_bench_support::stats::Latencies;
use sluice_bench_support::system::scratch_base;
use sluice_bench_support::BenchResult;
use sluice_testkit::RedisServer;
use std::time::Instant;

const TENANT: &str = "bench";
/// Queues created at once while setting up phase 1.
const CREATE_CONCURRENCY: usize = 32;
const PEEKED: usize = 100;

struct Plan {
    queues: usize,
    warmup: usize,
    samples: usize,
}

/// The session cookie of `http`'s bearer token: the dashboard reads the token from it.
fn cookie(http: &Http) -> String {
    let token = http.bearer.trim_start_matches("Bearer ");
    format!("{}={token}", sluice_gateway::dashboard::session::COOKIE)
}

/// Times `samples` sequential `GET`s of `path` after `warmup` untimed ones; each answer must
/// be `200` and contain `expect`.
async fn time_page(http: &Http, path: &str, expect: &str, plan: &Plan) -> BenchResult<Latencies> {
    let cookie = cookie(http);
    let mut samples = Vec::with_capacity(plan.samples);
    for i in 0..plan.warmup + plan.samples {
        let started = Instant::now();
        let response = http
            .client
            .get(format!("{}{path}", http.base))
            .header("cookie", &cookie)
            .send()
            .await?;
        let page = expect_status(response, &[200]).await?.text().await?;
        let took = started.elapsed();
        if !page.contains(expect) {
            return Err(format!("{path}: the page does not contain {expect:?}").into());
        }
        if i >= plan.warmup {
            samples.push(took);
        }
    }
    Ok(Latencies::of(samples))
}

fn row(store: Store, what: &str, latencies: &Latencies) {
    let [p50, p99, _, max] = latencies.millis();
    println!(
        "| {} | {what} | {p50:.1} | {p99:.1} | {max:.1} | {} |",
        store.label(),
        latencies.count
    );
}

fn overview_phase(stores: &Stores, store: Store, plan: &Plan) -> BenchResult<()> {
    let (runtime, http) = stores.gateway(store, "overview", "bench-dash-1".into(), TENANT)?;
    let created = Instant::now();
    runtime.block_on(
        stream::iter(0..plan.queues)
            .map(|i| {
                let http = http.clone();
                async move { http.put_queue(&format!("q-{i:05}")).await }
            })
            .buffer_unordered(CREATE_CONCURRENCY)
            .try_collect::<Vec<()>>(),
    )?;
    eprintln!(
        "{}: {} queues created in {:.1} s",
        store.label(),
        plan.queues,
        created.elapsed().as_secs_f64()
    );
    let first = runtime.block_on(time_page(&http, "/dashboard/queues", "q-00000", plan))?;
    row(
        store,
        &format!("overview, first page of {}", plan.queues),
        &first,
    );
    let middle = format!("q-{:05}", plan.queues / 2);
    let by_prefix = runtime.block_on(time_page(
        &http,
        &format!("/dashboard/queues?prefix={}", &middle[..middle.len() - 1]),
        &middle,
        plan,
    ))?;
    row(store, "overview, a prefix search", &by_prefix);
    drop(runtime);
    Ok(())
}

fn queue_phase(stores: &Stores, store: Store, plan: &Plan) -> BenchResult<()> {
    let (runtime, http) = stores.gateway(store, "queue", "bench-dash-2".into(), TENANT)?;
    let padding = "x".repeat(BODY_BYTES);
    let latencies = runtime.block_on(async {
        let driver = http.driver("peeked").await?;
        for first in (0..PEEKED as u64).step_by(10) {
            driver.send(first, 10, &padding).await?;
        }
        // Peek shows messages oldest first; the last one sent must be on the page.
        let last = format!("{:016x}", PEEKED - 1);
        time_page(&http, "/dashboard/queues/peeked?limit=100", &last, plan).await
    })?;
    row(store, "queue page, 100 peeked messages", &latencies);
    drop(runtime);
    Ok(())
}

fn main() -> BenchResult<()> {
    let quick = sluice_bench_support::quick();
    let plan = if quick {
        Plan {
            queues: 1_000,
            warmup: 5,
            samples: 50,
        }
    } else {
        Plan {
            queues: 10_000,
            warmup: 20,
            samples: 300,
        }
    };
    let (base, fs) = scratch_base()?;
    let scratch = tempfile::Builder::new()
        .prefix("sluice-dashboard-bench-")
        .tempdir_in(&base)?;
    let stores = Stores {
        redis: RedisServer::start()?,
        scratch: scratch.path().to_path_buf(),
    };
    println!(
        "## sluice-gateway: dashboard render time{}",
        if quick { " (QUICK)" } else { "" }
    );
    println!();
    println!(
        "data dir {} ({fs}); {} cores; redis-server without persistence; {} sequential \
         requests after {} warm-up, ms",
        scratch.path().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        plan.samples,
        plan.warmup,
    );
    println!();
    println!("| engine | page | p50 | p99 | max | samples |");
    println!("|---|---|---:|---:|---:|---:|");
    for store in [Store::Embedded, Store::Redis] {
        if wanted(1) {
            overview_phase(&stores, store, &plan)?;
        }
        if wanted(2) {
            queue_phase(&stores, store, &plan)?;
        }
    }
    drop(stores);
    Ok(())
}
