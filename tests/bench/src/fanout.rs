//! `sluice-bench fanout`: one message published, one copy in each of N queues, against a
//! Sluice topic (N raw-delivery subscriptions; publish batches) or a RabbitMQ fanout exchange
//! (durable, N durable queues bound to it; persistent messages, publisher confirms: a producer
//! publishes a batch back to back, then waits for all its confirms). Producers run for the
//! window; copies per second is copies receivable (the queues' depths, polled until they reach
//! N × the acknowledged messages) over the time from the first publish to that moment. Each
//! queue must end with exactly the acknowledged count. `fanout-report` prints the table.

use crate::append_json;
use anyhow::{bail, Context, Result};
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, ExchangeDeclareOptions, ExchangeDeleteOptions,
    QueueBindOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Confirmation, Connection, ConnectionProperties, ExchangeKind};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One run's record (a line of the results file).
#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct FanoutRecord {
    pub label: String,
    pub rep: u32,
    pub queues: usize,
    pub batch: usize,
    pub producers: usize,
    pub size: usize,
    pub messages: u64,
    pub copies: u64,
    pub copies_per_second: f64,
    pub publishes_per_second: f64,
    pub settle_seconds: f64,
    pub exact_queues: usize,
    pub server_cores: Option<f64>,
    pub errors: u64,
}

pub(crate) struct FanoutPlan {
    pub queues: usize,
    pub producers: usize,
    pub batch: usize,
    pub size: usize,
    pub duration: Duration,
    pub amqp_connections: usize,
}

fn body(id: u64, size: usize) -> String {
    let mut b = format!("{id:016x}");
    while b.len() < size {
        b.push('x');
    }
    b
}

/// Drives one fan-out run; `depths` answers the current depth of every queue.
async fn drive<P, PF, D, DF>(
    plan: &FanoutPlan,
    servers: &crate::stats::Processes,
    publish: P,
    depths: D,
) -> Result<(u64, Vec<u64>, Duration, Duration, u64, Option<f64>)>
where
    P: Fn(usize, u64) -> PF + Send + Sync + 'static,
    PF: std::future::Future<Output = Result<u64>> + Send,
    D: Fn() -> DF,
    DF: std::future::Future<Output = Result<Vec<u64>>>,
{
    let publish = Arc::new(publish);
    let next = Arc::new(AtomicU64::new(0));
    let acked = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let cpu0 = servers.cpu_seconds();
    let start = Instant::now();
    let deadline = start + plan.duration;
    let mut tasks = Vec::new();
    for p in 0..plan.producers {
        let (publish, next, acked, errors) = (
            Arc::clone(&publish),
            Arc::clone(&next),
            Arc::clone(&acked),
            Arc::clone(&errors),
        );
        let batch = plan.batch as u64;
        tasks.push(tokio::spawn(async move {
            while Instant::now() < deadline {
                let first = next.fetch_add(batch, Ordering::Relaxed);
                match publish(p, first).await {
                    Ok(n) => {
                        acked.fetch_add(n, Ordering::Relaxed);
                    }
                    Err(e) => {
                        if errors.fetch_add(1, Ordering::Relaxed) == 0 {
                            eprintln!("error: publish: {e:#}");
                        }
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await?;
    }
    let produced = start.elapsed();
    let messages = acked.load(Ordering::Relaxed);
    let want = messages * plan.queues as u64;
    let mut seen;
    loop {
        seen = depths().await?;
        if seen.iter().sum::<u64>() >= want || start.elapsed() > produced + Duration::from_secs(30)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let receivable = start.elapsed();
    let cores = match (cpu0, servers.cpu_seconds()) {
        (Some(a), Some(b)) => Some((b - a) / receivable.as_secs_f64()),
        _ => None,
    };
    Ok((
        messages,
        seen,
        produced,
        receivable,
        errors.load(Ordering::Relaxed),
        cores,
    ))
}

fn record(
    label: &str,
    rep: u32,
    plan: &FanoutPlan,
    outcome: (u64, Vec<u64>, Duration, Duration, u64, Option<f64>),
) -> FanoutRecord {
    let (messages, depths, produced, receivable, errors, server_cores) = outcome;
    let copies: u64 = depths.iter().sum();
    FanoutRecord {
        label: label.to_owned(),
        rep,
        queues: plan.queues,
        batch: plan.batch,
        producers: plan.producers,
        size: plan.size,
        messages,
        copies,
        copies_per_second: copies as f64 / receivable.as_secs_f64(),
        publishes_per_second: messages as f64 / produced.as_secs_f64(),
        settle_seconds: (receivable - produced).as_secs_f64(),
        exact_queues: depths.iter().filter(|&&d| d == messages).count(),
        server_cores,
        errors,
    }
}

/// Sluice: a topic with `plan.queues` raw subscriptions, publish batches of `plan.batch`.
pub(crate) async fn sluice(
    base: &str,
    token: &str,
    label: &str,
    rep: u32,
    plan: &FanoutPlan,
    servers: &crate::stats::Processes,
) -> Result<FanoutRecord> {
    let client = crate::drivers::sluice::http_client()?;
    let base = base.trim_end_matches('/').to_owned();
    let bearer = format!("Bearer {token}");
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() % 1_000_000_000);
    let topic = format!("fan-{rep}-{nonce}");
    let queues: Vec<String> = (0..plan.queues).map(|i| format!("{topic}-q{i}")).collect();
    let call = |method: reqwest::Method, path: String, json: Option<String>| {
        let mut r = client
            .request(method, format!("{base}{path}"))
            .header("authorization", &bearer);
        if let Some(json) = json {
            r = r.header("content-type", "application/json").body(json);
        }
        r
    };
    let ok = |r: reqwest::Response, what: String| async move {
        let status = r.status();
        if !status.is_success() {
            let text = r.text().await.unwrap_or_default();
            bail!("{what}: HTTP {status} {text}");
        }
        Ok(r)
    };
    let response = call(
        reqwest::Method::PUT,
        format!("/v1/topics/{topic}"),
        Some("{}".into()),
    )
    .send()
    .await?;
    ok(response, format!("PUT topic {topic}")).await?;
    for q in &queues {
        let response = call(
            reqwest::Method::PUT,
            format!("/v1/queues/{q}"),
            Some("{}".into()),
        )
        .send()
        .await?;
        ok(response, format!("PUT queue {q}")).await?;
        let response = call(
            reqwest::Method::POST,
            format!("/v1/topics/{topic}/subscriptions"),
            Some(format!(r#"{{"queue":"{q}","raw_delivery":true}}"#)),
        )
        .send()
        .await?;
        ok(response, format!("subscribe {q}")).await?;
    }
    let (size, batch) = (plan.size, plan.batch);
    let publish_url = format!("{base}/v1/topics/{topic}/messages/batch");
    let (c, b) = (client.clone(), bearer.clone());
    let publish = move |_p: usize, first: u64| {
        let (client, bearer, url) = (c.clone(), b.clone(), publish_url.clone());
        async move {
            let mut json = String::from(r#"{"entries":["#);
            for i in 0..batch as u64 {
                let sep = if i == 0 { "" } else { "," };
                write!(
                    json,
                    r#"{sep}{{"id":"{i}","body":"{}"}}"#,
                    body(first + i, size)
                )?;
            }
            json.push_str("]}");
            let r = client
                .post(&url)
                .header("authorization", &bearer)
                .header("content-type", "application/json")
                .body(json)
                .send()
                .await?;
            let status = r.status();
            let text = r.bytes().await.context("publish answer")?;
            let answer: serde_json::Value =
                serde_json::from_slice(&text).context("publish answer")?;
            if !status.is_success() {
                bail!("publish: HTTP {status} {answer}");
            }
            let failed = answer["failed"].as_array().map_or(0, Vec::len);
            if failed > 0 {
                bail!("publish: {failed} entries failed: {answer}");
            }
            Ok(answer["successful"].as_array().map_or(0, Vec::len) as u64)
        }
    };
    let depths = || async {
        let mut out = Vec::new();
        for q in &queues {
            let r = call(reqwest::Method::GET, format!("/v1/queues/{q}"), None)
                .send()
                .await?;
            let text = ok(r, format!("GET {q}")).await?.bytes().await?;
            let v: serde_json::Value = serde_json::from_slice(&text)?;
            out.push(v["stats"]["visible"].as_u64().unwrap_or(0));
        }
        Ok(out)
    };
    let outcome = drive(plan, servers, publish, depths).await?;
    let record = record(label, rep, plan, outcome);
    // Clean up: a Redis-backed Sluice keeps every copy in memory.
    call(reqwest::Method::DELETE, format!("/v1/topics/{topic}"), None)
        .send()
        .await?;
    for q in &queues {
        call(reqwest::Method::DELETE, format!("/v1/queues/{q}"), None)
            .send()
            .await?;
    }
    Ok(record)
}

/// RabbitMQ: a durable fanout exchange bound to `plan.queues` durable queues; persistent
/// messages, publisher confirms, producers' channels on `plan.amqp_connections` connections.
pub(crate) async fn rabbitmq(
    uri: &str,
    label: &str,
    rep: u32,
    plan: &FanoutPlan,
    servers: &crate::stats::Processes,
) -> Result<FanoutRecord> {
    let admin_connection = Connection::connect(uri, ConnectionProperties::default())
        .await
        .with_context(|| format!("connecting to {uri}"))?;
    let admin = admin_connection.create_channel().await?;
    let nonce = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_micros() % 1_000_000_000);
    let exchange = format!("fan-{rep}-{nonce}");
    admin
        .exchange_declare(
            exchange.as_str().into(),
            ExchangeKind::Fanout,
            ExchangeDeclareOptions {
                durable: true,
                ..ExchangeDeclareOptions::default()
            },
            FieldTable::default(),
        )
        .await
        .context("exchange.declare")?;
    let queues: Vec<String> = (0..plan.queues)
        .map(|i| format!("{exchange}-q{i}"))
        .collect();
    for q in &queues {
        admin
            .queue_declare(
                q.as_str().into(),
                QueueDeclareOptions {
                    durable: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .context("queue.declare")?;
        admin
            .queue_bind(
                q.as_str().into(),
                exchange.as_str().into(),
                "".into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .context("queue.bind")?;
    }
    let mut connections = Vec::new();
    for _ in 0..plan.amqp_connections.max(1) {
        connections.push(Connection::connect(uri, ConnectionProperties::default()).await?);
    }
    let mut channels = Vec::new();
    for p in 0..plan.producers {
        let channel = connections[p % connections.len()].create_channel().await?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .context("confirm.select")?;
        channels.push(channel);
    }
    let channels = Arc::new(channels);
    let (size, batch, ex) = (plan.size, plan.batch, exchange.clone());
    let publish = move |p: usize, first: u64| {
        let channels = Arc::clone(&channels);
        let exchange = ex.clone();
        async move {
            let channel = &channels[p];
            let mut confirms = Vec::with_capacity(batch);
            for i in 0..batch as u64 {
                let confirm = channel
                    .basic_publish(
                        exchange.as_str().into(),
                        "".into(),
                        BasicPublishOptions::default(),
                        body(first + i, size).as_bytes(),
                        BasicProperties::default().with_delivery_mode(2),
                    )
                    .await
                    .context("basic.publish")?;
                confirms.push(confirm);
            }
            let mut n = 0;
            for confirm in confirms {
                match confirm.await.context("publisher confirm")? {
                    Confirmation::Ack(_) => n += 1,
                    _ => bail!("broker nacked a publish"),
                }
            }
            Ok(n)
        }
    };
    let depths = || async {
        let mut out = Vec::new();
        for q in &queues {
            let state = admin
                .queue_declare(
                    q.as_str().into(),
                    QueueDeclareOptions {
                        passive: true,
                        durable: true,
                        ..QueueDeclareOptions::default()
                    },
                    FieldTable::default(),
                )
                .await
                .context("queue.declare passive")?;
            out.push(u64::from(state.message_count()));
        }
        Ok(out)
    };
    let outcome = drive(plan, servers, publish, depths).await?;
    let record = record(label, rep, plan, outcome);
    for q in &queues {
        admin
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await?;
    }
    admin
        .exchange_delete(exchange.as_str().into(), ExchangeDeleteOptions::default())
        .await?;
    Ok(record)
}

pub(crate) fn save(path: Option<&Path>, record: &FanoutRecord) -> Result<()> {
    println!(
        "{} rep {}: {:.0} copies/s ({} messages, {} copies, {}/{} queues exact, settle {:.3} s, \
         server cores {}, errors {})",
        record.label,
        record.rep,
        record.copies_per_second,
        record.messages,
        record.copies,
        record.exact_queues,
        record.queues,
        record.settle_seconds,
        record
            .server_cores
            .map_or_else(|| "-".to_owned(), |c| format!("{c:.2}")),
        record.errors
    );
    if let Some(path) = path {
        append_json(path, record)?;
    }
    Ok(())
}

fn median(mut v: Vec<f64>) -> f64 {
    v.retain(|x| x.is_finite());
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    }
}

/// Prints the Markdown table of a fan-out results file: per target, its runs and median, and
/// the median of per-repetition ratios of every Sluice target against `baseline`.
pub(crate) fn report(results: &Path, baseline: &str) -> Result<()> {
    let text = std::fs::read_to_string(results)
        .with_context(|| format!("reading {}", results.display()))?;
    let mut by_label: BTreeMap<String, Vec<FanoutRecord>> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let r: FanoutRecord = serde_json::from_str(line)?;
        by_label.entry(r.label.clone()).or_default().push(r);
    }
    println!("| target | copies/s per run | **median copies/s** | publishes/s (median) | server cores | messages | copies | queues exact | errors |");
    println!("|---|---|--:|--:|--:|--:|--:|--:|--:|");
    for (label, rs) in &by_label {
        println!(
            "| {label} | {} | **{:.0}** | {:.0} | {:.2} | {} | {} | {}/{} | {} |",
            rs.iter()
                .map(|r| format!("{:.0}", r.copies_per_second))
                .collect::<Vec<_>>()
                .join(", "),
            median(rs.iter().map(|r| r.copies_per_second).collect()),
            median(rs.iter().map(|r| r.publishes_per_second).collect()),
            median(rs.iter().filter_map(|r| r.server_cores).collect()),
            rs.iter().map(|r| r.messages).sum::<u64>(),
            rs.iter().map(|r| r.copies).sum::<u64>(),
            rs.iter().map(|r| r.exact_queues).sum::<usize>(),
            rs.iter().map(|r| r.queues).sum::<usize>(),
            rs.iter().map(|r| r.errors).sum::<u64>(),
        );
    }
    let Some(base) = by_label.get(baseline) else {
        return Ok(());
    };
    println!();
    println!("| ratio | per repetition | **median** |");
    println!("|---|---|--:|");
    for (label, rs) in by_label.iter().filter(|(l, _)| l.as_str() != baseline) {
        let ratios: Vec<f64> = rs
            .iter()
            .filter_map(|r| {
                base.iter()
                    .find(|b| b.rep == r.rep)
                    .map(|b| r.copies_per_second / b.copies_per_second)
            })
            .collect();
        println!(
            "| {label} / {baseline} | {} | **{:.2}x** |",
            ratios
                .iter()
                .map(|x| format!("{x:.2}"))
                .collect::<Vec<_>>()
                .join(", "),
            median(ratios.clone())
        );
    }
    Ok(())
}
