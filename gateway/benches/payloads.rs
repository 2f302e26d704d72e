//! Large payloads spilled to S3, measured against the same S3 server in the same run:
//!
//! 1. **Sluice vs S3 direct, 1 MiB and 8 MiB bodies, both engines**: `N` messages, each sent,
//!    received and deleted over REST by one of 4 workers, through a gateway whose payload store
//!    is an S3-compatible server (moto's, started by the bench); then the same bytes `put`,
//!    `get` and `delete` straight to the same server by 4 workers with the same S3 client code
//!    the gateway uses (`sluice_payload::S3Store`). Alternating, 3 repetitions, medians; the
//!    ratio is Sluice's messages/s over S3's put+get+delete triples/s. Also shown: how long after
//!    the last REST delete the payload collector had emptied the bucket (the object deletes
//!    Sluice defers; the direct arm made them inline).
//! 2. **Redis memory per queued 1 MiB message**, with spill (the engine keeps a reference) vs
//!    without (the body in Redis): `used_memory` before and after queueing 256 (spilled) or 32
//!    (in Redis) messages.
//!
//! Run: `SLUICE_TEST_AWS_BIN=target/awstools/bin cargo bench -p sluice-gateway --bench payloads`
//! (moto's server from that folder or the PATH, `redis-server` on the PATH;
//! `tests/run.sh` installs moto into `target/awstools`). `SLUICE_BENCH_PHASES=1` or `2` runs
//! one phase; `SLUICE_BENCH_QUICK=1` shrinks phase 1.

// This bench drives single messages itself, not the shared loop's driver.
#[allow(dead_code)]
mod common;
#[path = "common/phases.rs"]
mod phases;

use axum::body::Bytes;
use common::{expect_status, Http};
use phases::{load_runtime, wanted, Store, Stores};
use serde_json::{json, Value};
use sluice_bench_support::stats::{median_or_nan as median, runs};
use sluice_bench_support::system::scratch_base;
use sluice_bench_support::BenchResult;
use sluice_payload::{PayloadKey, PayloadStore, S3Settings, S3Store};
use sluice_testkit::{RedisServer, S3Server};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

const TENANT: &str = "bench";
const WORKERS: usize = 4;
const MIB: usize = 1 << 20;

/// A body of `len` bytes (ASCII, so JSON carries it unescaped).
fn body_of(len: usize) -> String {
    (0..len)
        .map(|i| char::from(b'a' + (i % 26) as u8))
        .collect()
}

fn s3_settings(server: &S3Server, bucket: &str) -> BenchResult<S3Settings> {
    let mut settings = S3Settings::from_url(&format!("s3://{bucket}/p"), "us-east-1")?;
    settings.endpoint = Some(server.endpoint());
    settings.force_path_style = true;
    Ok(settings)
}

/// Runs `per_item` for items `0..n` on [`WORKERS`] tasks; answers the elapsed time.
async fn on_workers<F, Fut>(n: usize, per_item: F) -> BenchResult<Duration>
where
    F: Fn(usize) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = BenchResult<()>> + Send,
{
    let next = Arc::new(AtomicUsize::new(0));
    let per_item = Arc::new(per_item);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..WORKERS {
        let (next, per_item) = (next.clone(), per_item.clone());
        tasks.push(tokio::spawn(async move {
            loop {
                let item = next.fetch_add(1, Ordering::Relaxed);
                if item >= n {
                    return Ok::<(), Box<dyn std::error::Error + Send + Sync>>(());
                }
                per_item(item).await?;
            }
        }));
    }
    for task in tasks {
        task.await??;
    }
    Ok(started.elapsed())
}

/// One message through Sluice: send, then receive one and delete it.
async fn sluice_round(http: &Http, queue: &str, request: Bytes) -> BenchResult<()> {
    let sent = http
        .client
        .post(format!("{}/v1/queues/{queue}/messages", http.base))
        .header("authorization", &http.bearer)
        .header("content-type", "application/json")
        .body(request)
        .send()
        .await?;
    expect_status(sent, &[201]).await?;
    loop {
        let received = http
            .post(
                &format!("/v1/queues/{queue}/messages/receive"),
                json!({"max_messages": 1, "wait_seconds": 1, "visibility_timeout_seconds": 60})
                    .to_string(),
            )
            .send()
            .await?;
        let answer: Value = expect_status(received, &[200]).await?.json().await?;
        let Some(message) = answer["messages"].as_array().and_then(|m| m.first()) else {
            continue;
        };
        let handle = message["receipt_handle"]
            .as_str()
            .ok_or("a message without a receipt handle")?;
        let deleted = http
            .client
            .delete(format!("{}/v1/queues/{queue}/messages/{handle}", http.base))
            .header("authorization", &http.bearer)
            .send()
            .await?;
        expect_status(deleted, &[204]).await?;
        return Ok(());
    }
}

async fn put_queue(http: &Http, queue: &str, config: Value) -> BenchResult<()> {
    let response = http
        .client
        .put(format!("{}/v1/queues/{queue}", http.base))
        .header("authorization", &http.bearer)
        .json(&config)
        .send()
        .await?;
    expect_status(response, &[200, 201]).await?;
    Ok(())
}

async fn objects_in(store: &S3Store) -> BenchResult<usize> {
    let mut count = 0;
    let mut after: Option<String> = None;
    loop {
        let page = store.list(after.as_deref(), 1000).await?;
        count += page.objects.len();
        match page.next {
            Some(next) => after = Some(next),
            None => return Ok(count),
        }
    }
}

struct Arm {
    rates: Vec<f64>,
    collected_after: Vec<f64>,
}

fn phase_1(stores: &Stores, s3: &S3Server, quick: bool) -> BenchResult<()> {
    println!("## 1. Sluice (S3 payload store) vs the same S3 server direct");
    println!();
    println!("| engine | body | messages | Sluice msgs/s (runs) | S3 put+get+delete /s (runs) | ratio | bucket empty after |");
    println!("|---|---|---|---|---|---|---|");
    let load = load_runtime()?;
    let repetitions = if quick { 1 } else { 3 };
    for (size, count) in [
        (MIB, if quick { 16 } else { 64 }),
        (8 * MIB, if quick { 4 } else { 16 }),
    ] {
        let body = body_of(size);
        let request = Bytes::from(json!({ "body": body }).to_string());
        let object = Bytes::from(body);
        for store in [Store::Embedded, Store::Redis] {
            let bucket = format!("bench-{}-{}", store.label().to_lowercase(), size / MIB);
            let settings = s3_settings(s3, &bucket)?;
            let direct = load.block_on(async {
                let direct = S3Store::connect(settings.clone()).await;
                direct.create_bucket_if_missing().await?;
                BenchResult::Ok(Arc::new(direct))
            })?;
            let (server, http) = stores.gateway_with(
                store,
                &format!("spill-{}", size / MIB),
                format!("bench-spill-{}", size / MIB),
                TENANT,
                |args| {
                    args.payload_store = Some(format!("s3://{bucket}/p"));
                    args.s3_endpoint = Some(s3.endpoint());
                    args.s3_region = Some("us-east-1".into());
                    args.s3_force_path_style = Some(true);
                    args.max_message_bytes = Some(16 * MIB as u32);
                },
            )?;
            let mut sluice = Arm {
                rates: Vec::new(),
                collected_after: Vec::new(),
            };
            let mut s3_rates = Vec::new();
            for repetition in 0..repetitions {
                let queue = format!("q{repetition}");
                let (elapsed, collected) = load.block_on(async {
                    put_queue(&http, &queue, json!({"max_message_bytes": 16 * MIB})).await?;
                    let (http, queue2, request) = (http.clone(), queue.clone(), request.clone());
                    let elapsed = on_workers(count, move |_| {
                        let (http, queue, request) =
                            (http.clone(), queue2.clone(), request.clone());
                        async move { sluice_round(&http, &queue, request).await }
                    })
                    .await?;
                    let done = Instant::now();
                    while objects_in(&direct).await? > 0 {
                        if done.elapsed() > Duration::from_secs(120) {
                            return Err("the collector left objects for 2 minutes".into());
                        }
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                    BenchResult::Ok((elapsed, done.elapsed()))
                })?;
                sluice.rates.push(count as f64 / elapsed.as_secs_f64());
                sluice.collected_after.push(collected.as_secs_f64());
                let elapsed = load.block_on({
                    let (direct, object) = (direct.clone(), object.clone());
                    on_workers(count, move |_| {
                        let (direct, object) = (direct.clone(), object.clone());
                        async move {
                            let key = PayloadKey::generate(TENANT)?;
                            direct.put(&key, object.clone()).await?;
                            let read = direct.get(&key).await?;
                            if read.len() != object.len() {
                                return Err("S3 answered a short object".into());
                            }
                            direct.delete(&key).await?;
                            Ok(())
                        }
                    })
                })?;
                s3_rates.push(count as f64 / elapsed.as_secs_f64());
            }
            drop(server);
            let (ours, theirs) = (median(&sluice.rates), median(&s3_rates));
            println!(
                "| {} | {} MiB | {count} | {ours:.1} ({}) | {theirs:.1} ({}) | **{:.2}×** | {:.1} s |",
                store.label(),
                size / MIB,
                runs(&sluice.rates),
                runs(&s3_rates),
                ours / theirs,
                median(&sluice.collected_after),
            );
        }
    }
    println!();
    Ok(())
}

/// Redis's `used_memory`.
fn used_memory(redis: &RedisServer) -> BenchResult<u64> {
    let info = redis.query(&["INFO", "memory"])?;
    info.lines()
        .find_map(|line| line.strip_prefix("used_memory:"))
        .ok_or("INFO memory without used_memory")?
        .trim()
        .parse()
        .map_err(Into::into)
}

fn phase_2(stores: &Stores, s3: &S3Server) -> BenchResult<()> {
    // In Redis each message is ~1 MiB, so a few show; spilled ones cost so little that it takes
    // many to rise above the noise of Redis's own allocations.
    let queued = |spill: bool| if spill { 256 } else { 32 };
    println!("## 2. Redis memory per queued 1 MiB message");
    println!();
    println!("| payload store | bytes of Redis memory per message |");
    println!("|---|---|");
    let load = load_runtime()?;
    // Just under 1 MiB, so that without a store the message fits the default limit.
    let request = Bytes::from(json!({ "body": body_of(MIB - 1024) }).to_string());
    let mut per_message = Vec::new();
    for spill in [false, true] {
        let label = if spill {
            "S3 (spilled)"
        } else {
            "none (in Redis)"
        };
        let phase = if spill {
            "memory-spill"
        } else {
            "memory-inline"
        };
        let (server, http) = stores.gateway_with(
            Store::Redis,
            phase,
            format!("bench-{phase}"),
            TENANT,
            |args| {
                if spill {
                    args.payload_store = Some("s3://bench-memory/p".into());
                    args.s3_endpoint = Some(s3.endpoint());
                    args.s3_region = Some("us-east-1".into());
                    args.s3_force_path_style = Some(true);
                }
            },
        )?;
        let per = load.block_on(async {
            if spill {
                let store = S3Store::connect(s3_settings(s3, "bench-memory")?).await;
                store.create_bucket_if_missing().await?;
            }
            put_queue(&http, "memory", json!({})).await?;
            let before = used_memory(&stores.redis)?;
            for _ in 0..queued(spill) {
                let sent = http
                    .client
                    .post(format!("{}/v1/queues/memory/messages", http.base))
                    .header("authorization", &http.bearer)
                    .header("content-type", "application/json")
                    .body(request.clone())
                    .send()
                    .await?;
                expect_status(sent, &[201]).await?;
            }
            let after = used_memory(&stores.redis)?;
            BenchResult::Ok((after as f64 - before as f64) / queued(spill) as f64)
        })?;
        drop(server);
        println!("| {label} | {per:.0} |");
        per_message.push(per);
    }
    println!();
    println!(
        "Spilled / in Redis: {:.5}× ({:.0} vs {:.0} bytes per message).",
        per_message[1] / per_message[0],
        per_message[1],
        per_message[0]
    );
    println!();
    Ok(())
}

fn main() -> BenchResult<()> {
    if std::env::args().any(|a| a == "--list") {
        return Ok(());
    }
    // moto accepts any credentials; gateways and the direct client read the standard chain.
    std::env::set_var("AWS_ACCESS_KEY_ID", "bench");
    std::env::set_var("AWS_SECRET_ACCESS_KEY", "bench");
    let quick = sluice_bench_support::quick();
    let (base, _) = scratch_base()?;
    let scratch = tempfile::Builder::new()
        .prefix("sluice-payloads-bench-")
        .tempdir_in(&base)?;
    let stores = Stores {
        redis: RedisServer::start()?,
        scratch: scratch.path().to_path_buf(),
    };
    let s3 = S3Server::start()?;
    println!("# Large payloads{}", if quick { " (quick)" } else { "" });
    println!();
    if wanted(1) {
        phase_1(&stores, &s3, quick)?;
    }
    if wanted(2) {
        phase_2(&stores, &s3)?;
    }
    Ok(())
}
