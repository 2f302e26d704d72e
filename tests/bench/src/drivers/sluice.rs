//! Sluice's REST API v1, the message operations (see `docs/rest-guide.md`): send and batch send,
//! receive with long polling, single and batch delete. The same code drives the no-op ceiling
//! server (`noop.rs`), which answers these requests with canned bodies: only `verifies` differs.
//!
//! Request bodies are written by hand rather than through `serde_json::to_string` of a struct:
//! the bodies contain nothing that needs escaping (see `make_body`), and the load generator
//! shares the machine's two cores with the server, so its own cost should stay small.

use super::{Delivery, Driver, Outcome, Outgoing, Producer, QueueSpec, Unsupported};
use anyhow::{anyhow, bail, Context, Result};
use serde::Deserialize;
use std::borrow::Cow;
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

struct Inner {
    client: reqwest::Client,
    bearer: Option<String>,
    /// `{base}/v1/queues/{queue}`.
    queue_url: String,
    fifo: bool,
    verifies: bool,
}

#[derive(Clone)]
pub(crate) struct SluiceDriver(Arc<Inner>);

/// One HTTP client for all producers and consumers: reqwest keeps a pool of keep-alive
/// connections, one per concurrently active task, so 8 + 8 tasks hold 16 connections.
pub(crate) fn http_client() -> Result<reqwest::Client> {
    Ok(reqwest::Client::builder()
        .pool_max_idle_per_host(256)
        .tcp_nodelay(true)
        // Long polls last `wait` (≤ 20 s); anything past this is a hung server.
        .timeout(Duration::from_secs(60))
        .build()?)
}

impl SluiceDriver {
    /// Creates (or replaces) the queue. A 400 for a FIFO queue means this server has no FIFO yet.
    pub(crate) async fn open(
        client: reqwest::Client,
        base: &str,
        token: Option<&str>,
        spec: &QueueSpec,
        verifies: bool,
    ) -> Result<Self> {
        let inner = Inner {
            client,
            bearer: token.map(|t| format!("Bearer {t}")),
            queue_url: format!("{}/v1/queues/{}", base.trim_end_matches('/'), spec.name),
            fifo: spec.fifo,
            verifies,
        };
        let response = inner
            .request(reqwest::Method::PUT, &inner.queue_url)
            .header("content-type", "application/json")
            .body("{}")
            .send()
            .await
            .with_context(|| format!("PUT {}", inner.queue_url))?;
        let status = response.status().as_u16();
        if status == 400 && spec.fifo {
            let text = response.text().await.unwrap_or_default();
            let message = serde_json::from_str::<serde_json::Value>(&text)
                .ok()
                .and_then(|v| v["error"]["message"].as_str().map(str::to_owned))
                .unwrap_or(text);
            return Err(
                Unsupported(format!("creating a FIFO queue answered 400: {message}")).into(),
            );
        }
        if status != 200 && status != 201 {
            let text = response.text().await.unwrap_or_default();
            bail!("creating queue {}: HTTP {status} {text}", spec.name);
        }
        Ok(Self(Arc::new(inner)))
    }
}

impl Inner {
    fn request(&self, method: reqwest::Method, url: &str) -> reqwest::RequestBuilder {
        let builder = self.client.request(method, url);
        match &self.bearer {
            Some(b) => builder.header("authorization", b),
            None => builder,
        }
    }

    async fn post(&self, path: &str, json: String) -> Result<reqwest::Response> {
        Ok(self
            .request(reqwest::Method::POST, &format!("{}{path}", self.queue_url))
            .header("content-type", "application/json")
            .body(json)
            .send()
            .await?)
    }
}

/// Turns a non-success answer into an error naming the status and Sluice's error code, which
/// is what the per-kind error counts group by.
async fn check(what: &str, response: reqwest::Response, ok: &[u16]) -> Result<bytes::Bytes> {
    let status = response.status().as_u16();
    let body = response
        .bytes()
        .await
        .with_context(|| format!("{what}: reading body"))?;
    if ok.contains(&status) {
        return Ok(body);
    }
    #[derive(Deserialize)]
    struct ErrorBody<'a> {
        #[serde(borrow)]
        error: ErrorInner<'a>,
    }
    #[derive(Deserialize)]
    struct ErrorInner<'a> {
        #[serde(borrow)]
        code: Cow<'a, str>,
    }
    let code = serde_json::from_slice::<ErrorBody>(&body)
        .map(|e| e.error.code.into_owned())
        .unwrap_or_default();
    Err(anyhow!("{what}: HTTP {status} {code}"))
}

#[derive(Deserialize)]
struct BatchAnswer<'a> {
    #[serde(borrow)]
    successful: Vec<BatchEntry<'a>>,
    #[serde(borrow, default)]
    failed: Vec<BatchFailure<'a>>,
}

#[derive(Deserialize)]
struct BatchEntry<'a> {
    #[serde(borrow)]
    id: Cow<'a, str>,
}

#[derive(Deserialize)]
struct BatchFailure<'a> {
    #[serde(borrow)]
    code: Cow<'a, str>,
}

#[derive(Deserialize)]
struct ReceiveAnswer<'a> {
    #[serde(borrow)]
    messages: Vec<ReceivedMessage<'a>>,
}

#[derive(Deserialize)]
struct ReceivedMessage<'a> {
    #[serde(borrow)]
    body: Cow<'a, str>,
    receipt_handle: String,
}

impl Driver for SluiceDriver {
    type Producer = SluiceProducer;
    type Consumer = SluiceConsumer;

    fn verifies(&self) -> bool {
        self.0.verifies
    }

    async fn producer(&self) -> Result<SluiceProducer> {
        Ok(SluiceProducer(Arc::clone(&self.0)))
    }

    async fn consumer(&self, max: usize, wait: Duration) -> Result<SluiceConsumer> {
        Ok(SluiceConsumer {
            inner: Arc::clone(&self.0),
            receive_json: format!(
                r#"{{"max_messages":{max},"wait_seconds":{}}}"#,
                wait.as_secs()
            ),
        })
    }

    async fn delete_queue(&self) -> Result<()> {
        let response = self
            .0
            .request(reqwest::Method::DELETE, &self.0.queue_url)
            .send()
            .await?;
        check("delete queue", response, &[204, 404]).await?;
        Ok(())
    }
}

pub(crate) struct SluiceProducer(Arc<Inner>);

impl SluiceProducer {
    fn fifo_fields(&self, json: &mut String, m: &Outgoing) -> Result<()> {
        if self.0.fifo {
            if let Some(g) = &m.group {
                write!(json, r#","group_id":"{g}""#)?;
            }
            if let Some(d) = &m.dedup {
                write!(json, r#","deduplication_id":"{d}""#)?;
            }
        }
        Ok(())
    }
}

impl Producer for SluiceProducer {
    async fn send(&mut self, batch: &[Outgoing]) -> Result<Outcome<Vec<bool>>> {
        if let [m] = batch {
            let mut json = String::with_capacity(m.body.len() + 64);
            write!(json, r#"{{"body":"{}""#, m.body)?;
            self.fifo_fields(&mut json, m)?;
            json.push('}');
            let response = self.0.post("/messages", json).await.context("send")?;
            // 200 is a FIFO deduplication hit: acknowledged, not stored twice.
            check("send", response, &[201, 200]).await?;
            return Ok(Outcome::ok(vec![true]));
        }
        let mut json = String::with_capacity(batch.iter().map(|m| m.body.len() + 96).sum());
        json.push_str(r#"{"entries":["#);
        for (i, m) in batch.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(json, r#"{sep}{{"id":"{i}","body":"{}""#, m.body)?;
            self.fifo_fields(&mut json, m)?;
            json.push('}');
        }
        json.push_str("]}");
        let response = self
            .0
            .post("/messages/batch", json)
            .await
            .context("send batch")?;
        let body = check("send batch", response, &[200]).await?;
        if !self.0.verifies {
            // The no-op server's canned answer does not echo our entry ids.
            return Ok(Outcome::ok(vec![true; batch.len()]));
        }
        let answer: BatchAnswer = serde_json::from_slice(&body).context("send batch answer")?;
        let mut acked = vec![false; batch.len()];
        for entry in &answer.successful {
            if let Some(slot) = entry
                .id
                .parse::<usize>()
                .ok()
                .and_then(|i| acked.get_mut(i))
            {
                *slot = true;
            }
        }
        // Partial success still counts the successful entries; the failure is reported.
        let failure = answer
            .failed
            .first()
            .map(|f| format!("send batch: entry failed: {}", f.code));
        Ok(Outcome {
            value: acked,
            failure,
        })
    }
}

pub(crate) struct SluiceConsumer {
    inner: Arc<Inner>,
    receive_json: String,
}

impl super::Consumer for SluiceConsumer {
    type Handle = String;

    async fn receive(&mut self) -> Result<Vec<Delivery<String>>> {
        let response = self
            .inner
            .post("/messages/receive", self.receive_json.clone())
            .await
            .context("receive")?;
        let body = check("receive", response, &[200]).await?;
        let answer: ReceiveAnswer = serde_json::from_slice(&body).context("receive answer")?;
        Ok(answer
            .messages
            .into_iter()
            .map(|m| Delivery {
                body: m.body.into_owned().into_bytes(),
                handle: m.receipt_handle,
            })
            .collect())
    }

    async fn delete(&mut self, handles: Vec<String>) -> Result<Outcome<usize>> {
        if let [handle] = handles.as_slice() {
            let url = format!("{}/messages/{handle}", self.inner.queue_url);
            let response = self
                .inner
                .request(reqwest::Method::DELETE, &url)
                .send()
                .await
                .context("delete")?;
            check("delete", response, &[204]).await?;
            return Ok(Outcome::ok(1));
        }
        let mut json = String::with_capacity(handles.iter().map(|h| h.len() + 32).sum());
        json.push_str(r#"{"entries":["#);
        for (i, h) in handles.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(json, r#"{sep}{{"id":"{i}","receipt_handle":"{h}"}}"#)?;
        }
        json.push_str("]}");
        let response = self
            .inner
            .post("/messages/delete", json)
            .await
            .context("delete batch")?;
        let body = check("delete batch", response, &[200]).await?;
        if !self.inner.verifies {
            return Ok(Outcome::ok(handles.len()));
        }
        let answer: BatchAnswer = serde_json::from_slice(&body).context("delete batch answer")?;
        let failure = answer
            .failed
            .first()
            .map(|f| format!("delete batch: entry failed: {}", f.code));
        Ok(Outcome {
            value: answer.successful.len(),
            failure,
        })
    }
}
