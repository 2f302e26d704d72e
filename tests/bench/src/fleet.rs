//! Scenario (e): many queues holding few messages. Creates `count` queues, puts `per_queue`
//! messages in each, lets the server settle, and reports the growth of its resident memory per
//! queue. Optionally deletes the queues again, so a shared peer (RabbitMQ) is left as found.
//!
//! Works on Sluice (REST), RabbitMQ (durable queues, persistent confirmed messages) and SQS.
//! Every phase is bounded by `max_duration`.

use crate::drivers::{error_kind, make_body, sqs};
use crate::stats::Processes;
use anyhow::{bail, Context, Result};
use lapin::options::{
    BasicPublishOptions, ConfirmSelectOptions, QueueDeclareOptions, QueueDeleteOptions,
};
use lapin::types::FieldTable;
use lapin::{BasicProperties, Connection, ConnectionProperties};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub(crate) enum FleetTarget {
    Sluice {
        client: reqwest::Client,
        base: String,
        bearer: Option<String>,
    },
    Amqp {
        uri: String,
    },
    Sqs {
        client: aws_sdk_sqs::Client,
    },
}

#[derive(Clone, Debug)]
pub(crate) struct FleetPlan {
    pub count: usize,
    pub per_queue: usize,
    pub size: usize,
    pub concurrency: usize,
    pub prefix: String,
    pub cleanup: bool,
    pub max_duration: Duration,
}

#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct FleetReport {
    pub record: String,
    pub scenario: String,
    pub target: String,
    pub unix_time: u64,
    pub queues: u64,
    pub per_queue: usize,
    pub size: usize,
    pub create_seconds: f64,
    pub queues_per_second: f64,
    pub rss_before: Option<u64>,
    pub rss_after: Option<u64>,
    /// (RSS after − RSS before) / queues.
    pub bytes_per_queue: Option<f64>,
    pub server_hwm: Option<u64>,
    pub errors: u64,
    pub error_kinds: BTreeMap<String, u64>,
}

/// One worker's connection: HTTP shares a pool, AMQP needs its own channel.
enum Worker {
    Sluice {
        client: reqwest::Client,
        base: String,
        bearer: Option<String>,
    },
    /// Boxed: a lapin channel and connection are several hundred bytes.
    Amqp(Box<(lapin::Channel, Connection)>),
    Sqs {
        client: aws_sdk_sqs::Client,
    },
}

impl FleetTarget {
    async fn worker(&self) -> Result<Worker> {
        Ok(match self {
            FleetTarget::Sluice {
                client,
                base,
                bearer,
            } => Worker::Sluice {
                client: client.clone(),
                base: base.trim_end_matches('/').to_owned(),
                bearer: bearer.clone(),
            },
            FleetTarget::Amqp { uri } => {
                let connection = Connection::connect(uri, ConnectionProperties::default())
                    .await
                    .with_context(|| format!("connecting to {uri}"))?;
                let channel = connection.create_channel().await?;
                channel
                    .confirm_select(ConfirmSelectOptions::default())
                    .await?;
                Worker::Amqp(Box::new((channel, connection)))
            }
            FleetTarget::Sqs { client } => Worker::Sqs {
                client: client.clone(),
            },
        })
    }
}

impl Worker {
    fn http(
        client: &reqwest::Client,
        bearer: &Option<String>,
        method: reqwest::Method,
        url: String,
    ) -> reqwest::RequestBuilder {
        let b = client.request(method, url);
        match bearer {
            Some(t) => b.header("authorization", t),
            None => b,
        }
    }

    async fn create_and_fill(&self, name: &str, bodies: &[String]) -> Result<()> {
        match self {
            Worker::Sluice {
                client,
                base,
                bearer,
            } => {
                let url = format!("{base}/v1/queues/{name}");
                let r = Self::http(client, bearer, reqwest::Method::PUT, url.clone())
                    .header("content-type", "application/json")
                    .body("{}")
                    .send()
                    .await?;
                if !r.status().is_success() {
                    bail!("create queue: HTTP {}", r.status().as_u16());
                }
                for body in bodies {
                    let r = Self::http(
                        client,
                        bearer,
                        reqwest::Method::POST,
                        format!("{url}/messages"),
                    )
                    .header("content-type", "application/json")
                    .body(format!(r#"{{"body":"{body}"}}"#))
                    .send()
                    .await?;
                    if !r.status().is_success() {
                        bail!("send: HTTP {}", r.status().as_u16());
                    }
                }
            }
            Worker::Amqp(amqp) => {
                let channel = &amqp.0;
                channel
                    .queue_declare(
                        name.into(),
                        QueueDeclareOptions {
                            durable: true,
                            ..QueueDeclareOptions::default()
                        },
                        FieldTable::default(),
                    )
                    .await
                    .context("queue.declare")?;
                for body in bodies {
                    channel
                        .basic_publish(
                            "".into(),
                            name.into(),
                            BasicPublishOptions::default(),
                            body.as_bytes(),
                            BasicProperties::default().with_delivery_mode(2),
                        )
                        .await
                        .context("basic.publish")?
                        .await
                        .context("publisher confirm")?;
                }
            }
            Worker::Sqs { client } => {
                let url = client
                    .create_queue()
                    .queue_name(name)
                    .send()
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "CreateQueue: {}",
                            aws_sdk_sqs::error::DisplayErrorContext(&e)
                        )
                    })?
                    .queue_url
                    .context("no QueueUrl")?;
                for body in bodies {
                    client
                        .send_message()
                        .queue_url(&url)
                        .message_body(body)
                        .send()
                        .await
                        .map_err(|e| {
                            anyhow::anyhow!(
                                "SendMessage: {}",
                                aws_sdk_sqs::error::DisplayErrorContext(&e)
                            )
                        })?;
                }
            }
        }
        Ok(())
    }

    async fn delete(&self, name: &str) -> Result<()> {
        match self {
            Worker::Sluice {
                client,
                base,
                bearer,
            } => {
                let r = Self::http(
                    client,
                    bearer,
                    reqwest::Method::DELETE,
                    format!("{base}/v1/queues/{name}"),
                )
                .send()
                .await?;
                if !r.status().is_success() {
                    bail!("delete queue: HTTP {}", r.status().as_u16());
                }
            }
            Worker::Amqp(amqp) => {
                amqp.0
                    .queue_delete(name.into(), QueueDeleteOptions::default())
                    .await
                    .context("queue.delete")?;
            }
            Worker::Sqs { client } => {
                let url = client
                    .get_queue_url()
                    .queue_name(name)
                    .send()
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "GetQueueUrl: {}",
                            aws_sdk_sqs::error::DisplayErrorContext(&e)
                        )
                    })?
                    .queue_url
                    .context("no QueueUrl")?;
                client
                    .delete_queue()
                    .queue_url(url)
                    .send()
                    .await
                    .map_err(|e| {
                        anyhow::anyhow!(
                            "DeleteQueue: {}",
                            aws_sdk_sqs::error::DisplayErrorContext(&e)
                        )
                    })?;
            }
        }
        Ok(())
    }
}

/// Runs `op` over queue indexes 0..count with `concurrency` workers, until done or `deadline`.
async fn for_each_queue(
    target: &FleetTarget,
    plan: &FleetPlan,
    deadline: Instant,
    errors: &Arc<Mutex<BTreeMap<String, u64>>>,
    create: bool,
) -> Result<u64> {
    let next = Arc::new(AtomicU64::new(0));
    let done = Arc::new(AtomicU64::new(0));
    let bodies: Arc<Vec<String>> = Arc::new(
        (0..plan.per_queue as u64)
            .map(|i| make_body(i, 0, plan.size))
            .collect(),
    );
    let mut tasks = Vec::new();
    for _ in 0..plan.concurrency {
        let worker = target.worker().await?;
        let (next, done, bodies, errors) = (
            Arc::clone(&next),
            Arc::clone(&done),
            Arc::clone(&bodies),
            Arc::clone(errors),
        );
        let (count, prefix) = (plan.count as u64, plan.prefix.clone());
        tasks.push(tokio::spawn(async move {
            let mut consecutive = 0u32;
            loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                if i >= count || Instant::now() >= deadline {
                    return Ok::<(), anyhow::Error>(());
                }
                let name = format!("{prefix}{i:06}");
                let result = if create {
                    worker.create_and_fill(&name, &bodies).await
                } else {
                    worker.delete(&name).await
                };
                match result {
                    Ok(()) => {
                        done.fetch_add(1, Ordering::Relaxed);
                        consecutive = 0;
                    }
                    Err(e) => {
                        if let Ok(mut k) = errors.lock() {
                            *k.entry(error_kind(&e)).or_insert(0) += 1;
                        }
                        consecutive += 1;
                        if consecutive >= 100 {
                            return Err(e.context("100 errors in a row"));
                        }
                    }
                }
            }
        }));
    }
    for t in tasks {
        t.await.context("worker panicked")??;
    }
    Ok(done.load(Ordering::Relaxed))
}

pub(crate) async fn run(
    target: &FleetTarget,
    plan: &FleetPlan,
    servers: &Processes,
    scenario: &str,
    label: &str,
) -> Result<FleetReport> {
    let errors = Arc::new(Mutex::new(BTreeMap::new()));
    let rss_before = servers.rss();
    let start = Instant::now();
    let deadline = start + plan.max_duration;
    let created = for_each_queue(target, plan, deadline, &errors, true).await?;
    let create_seconds = start.elapsed().as_secs_f64();
    eprintln!(
        "[{scenario}/{label}] {created} queues with {} messages each in {create_seconds:.1} s",
        plan.per_queue
    );
    // Let background work (commits, caches, the allocator) settle before reading memory.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rss_after = servers.rss();
    let server_hwm = servers.hwm();
    if plan.cleanup {
        let t = Instant::now();
        let deleted = for_each_queue(target, plan, t + plan.max_duration, &errors, false).await?;
        eprintln!(
            "[{scenario}/{label}] deleted {deleted} queues in {:.1} s",
            t.elapsed().as_secs_f64()
        );
    }
    let error_kinds = errors.lock().map(|e| e.clone()).unwrap_or_default();
    Ok(FleetReport {
        record: "queues".into(),
        scenario: scenario.into(),
        target: label.into(),
        unix_time: SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs(),
        queues: created,
        per_queue: plan.per_queue,
        size: plan.size,
        create_seconds,
        queues_per_second: created as f64 / create_seconds,
        rss_before,
        rss_after,
        bytes_per_queue: match (rss_before, rss_after) {
            (Some(b), Some(a)) if created > 0 => Some((a as f64 - b as f64) / created as f64),
            _ => None,
        },
        server_hwm,
        errors: error_kinds.values().sum(),
        error_kinds,
    })
}

/// A fleet target on an SQS endpoint (moto).
pub(crate) fn sqs_target(endpoint: &str) -> FleetTarget {
    FleetTarget::Sqs {
        client: sqs::client(endpoint),
    }
}
