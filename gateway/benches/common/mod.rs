//! What the gateway's in-process benches share: starting the real server (`Application::build`
//! and `run_until_stopped`) on a free port with a token for one tenant, and an HTTP client
//! that drives its message API as a [`Driver`] of the shared producer/consumer loop.

use serde_json::Value;
use sluice_bench_support::flow::{body_id, padded_body, Driver, Received};
use sluice_bench_support::BenchResult;
use sluice_engine::TenantId;
use sluice_gateway::auth::Scope;
use sluice_gateway::config::{CommonArgs, Settings};
use sluice_gateway::startup::Application;
use std::fmt::Write as _;
use std::time::{SystemTime, UNIX_EPOCH};

/// The gateway under test and how to reach it.
#[derive(Clone)]
pub(crate) struct Http {
    pub client: reqwest::Client,
    pub base: String,
    pub bearer: String,
}

impl Http {
    pub(crate) fn post(&self, path: &str, json: String) -> reqwest::RequestBuilder {
        self.client
            .post(format!("{}{path}", self.base))
            .header("authorization", &self.bearer)
            .header("content-type", "application/json")
            .body(json)
    }

    pub(crate) async fn put_queue(&self, queue: &str) -> BenchResult<()> {
        let response = self
            .client
            .put(format!("{}/v1/queues/{queue}", self.base))
            .header("authorization", &self.bearer)
            .send()
            .await?;
        expect_status(response, &[200, 201]).await?;
        Ok(())
    }

    /// Creates `queue` and drives it.
    pub(crate) async fn driver(&self, queue: &str) -> BenchResult<HttpDriver> {
        self.put_queue(queue).await?;
        Ok(HttpDriver {
            http: self.clone(),
            queue: queue.to_owned(),
        })
    }
}

/// The response if its status is one of `ok`, else an error with its body.
pub(crate) async fn expect_status(
    response: reqwest::Response,
    ok: &[u16],
) -> BenchResult<reqwest::Response> {
    let status = response.status().as_u16();
    if ok.contains(&status) {
        Ok(response)
    } else {
        let text = response.text().await.unwrap_or_default();
        Err(format!("unexpected status {status}: {text}").into())
    }
}

/// Starts the gateway on the current runtime with `args` (listen address and JWT secret filled
/// in), and answers a client holding a token for `tenant` with every message scope.
pub(crate) async fn start_gateway(args: CommonArgs, tenant: &str) -> BenchResult<Http> {
    let settings = Settings::resolve(&CommonArgs {
        listen: Some("127.0.0.1:0".into()),
        jwt_secret: Some("x".repeat(40).into()),
        ..args
    })?;
    let app = Application::build(&settings).await?;
    let addr = app.local_addr()?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    let token = app.state().auth.mint(
        Some(&TenantId::parse(tenant)?),
        &[
            Scope::QueuesManage,
            Scope::MessagesSend,
            Scope::MessagesConsume,
        ],
        now,
        3600,
    )?;
    tokio::spawn(app.run_until_stopped());
    Ok(Http {
        client: reqwest::Client::builder()
            .pool_max_idle_per_host(64)
            .tcp_nodelay(true)
            .build()?,
        base: format!("http://{addr}"),
        bearer: format!("Bearer {token}"),
    })
}

/// One queue over HTTP: batches of 1 use single send and single `DELETE`, larger batches the
/// batch endpoints; receives long-poll (`wait_seconds: 1`).
pub(crate) struct HttpDriver {
    pub http: Http,
    pub queue: String,
}

impl Driver for HttpDriver {
    async fn send(&self, first: u64, batch: usize, padding: &str) -> BenchResult<()> {
        let (http, queue) = (&self.http, &self.queue);
        if batch == 1 {
            let json = format!(r#"{{"body":"{}"}}"#, padded_body(first, padding));
            let response = http
                .post(&format!("/v1/queues/{queue}/messages"), json)
                .send()
                .await?;
            expect_status(response, &[201]).await?.bytes().await?;
        } else {
            let mut json = String::from(r#"{"entries":["#);
            for i in 0..batch as u64 {
                let sep = if i == 0 { "" } else { "," };
                let body = padded_body(first + i, padding);
                write!(json, r#"{sep}{{"id":"{i}","body":"{body}"}}"#)?;
            }
            json.push_str("]}");
            let response = http
                .post(&format!("/v1/queues/{queue}/messages/batch"), json)
                .send()
                .await?;
            let answer: Value = expect_status(response, &[200]).await?.json().await?;
            let failed = answer["failed"].as_array().map_or(0, Vec::len);
            if failed > 0 {
                return Err(format!("batch send: {failed} entries failed: {answer}").into());
            }
        }
        Ok(())
    }

    async fn receive(&self, max: usize) -> BenchResult<Vec<Received>> {
        let response = self
            .http
            .post(
                &format!("/v1/queues/{}/messages/receive", self.queue),
                format!(r#"{{"max_messages":{max},"wait_seconds":1}}"#),
            )
            .send()
            .await?;
        let answer: Value = expect_status(response, &[200]).await?.json().await?;
        let mut out = Vec::new();
        for m in answer["messages"].as_array().into_iter().flatten() {
            let id = body_id(m["body"].as_str().ok_or("message without body")?)?;
            let handle = m["receipt_handle"]
                .as_str()
                .ok_or("message without receipt_handle")?;
            out.push((id, handle.to_owned()));
        }
        Ok(out)
    }

    async fn delete(&self, handles: Vec<String>, batch: usize) -> BenchResult<u64> {
        let (http, queue) = (&self.http, &self.queue);
        if batch == 1 {
            for handle in &handles {
                let response = http
                    .client
                    .delete(format!("{}/v1/queues/{queue}/messages/{handle}", http.base))
                    .header("authorization", &http.bearer)
                    .send()
                    .await?;
                expect_status(response, &[204]).await?.bytes().await?;
            }
            return Ok(handles.len() as u64);
        }
        let mut json = String::from(r#"{"entries":["#);
        for (i, handle) in handles.iter().enumerate() {
            let sep = if i == 0 { "" } else { "," };
            write!(json, r#"{sep}{{"id":"{i}","receipt_handle":"{handle}"}}"#)?;
        }
        json.push_str("]}");
        let response = http
            .post(&format!("/v1/queues/{queue}/messages/delete"), json)
            .send()
            .await?;
        let answer: Value = expect_status(response, &[200]).await?.json().await?;
        let failed = answer["failed"].as_array().map_or(0, Vec::len);
        if failed > 0 {
            return Err(format!("batch delete: {failed} failed: {answer}").into());
        }
        Ok(1)
    }
}
