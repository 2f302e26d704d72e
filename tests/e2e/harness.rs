//! Starts and stops `sluice` processes for the tests and mints their tokens.

use jsonwebtoken::{EncodingKey, Header};
use reqwest::{Client, Method, RequestBuilder, Response};
use serde_json::{json, Value};
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

pub(crate) const SECRET: &str = "e2e-test-secret-that-is-long-enough-0123456789";
pub(crate) const ALL_TENANT_SCOPES: &str =
    "queues:manage messages:send messages:consume topics:manage topics:publish";

pub(crate) fn binary() -> &'static str {
    env!("CARGO_BIN_EXE_sluice")
}

pub(crate) fn now_seconds() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A running `sluice serve`; killed on drop.
pub(crate) struct Server {
    pub base: String,
    pub child: Child,
    pub client: Client,
    _temp: Option<tempfile::TempDir>,
}

/// A gateway on the Redis store at `store` under the key prefix `prefix` (the test secret, a
/// fresh data folder, then `extra`). The folder is returned with it: it must outlive the server.
pub(crate) fn redis_gateway(
    store: &str,
    prefix: &str,
    extra: &[&str],
) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let mut args = vec![
        "--jwt-secret",
        SECRET,
        "--store",
        store,
        "--redis-key-prefix",
        prefix,
    ];
    args.extend_from_slice(extra);
    let server = Server::start_in(dir.path(), &args);
    (dir, server)
}

impl Server {
    /// A server with a shared secret in a fresh data folder.
    pub(crate) fn start() -> Server {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().to_path_buf();
        let mut server = Server::start_in(&dir, &["--jwt-secret", SECRET]);
        server._temp = Some(temp);
        server
    }

    /// A server on `data_dir` with extra flags.
    pub(crate) fn start_in(data_dir: &Path, extra: &[&str]) -> Server {
        let mut command = Command::new(binary());
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data_dir)
            .args(extra)
            .env_remove("SLUICE_CONFIG")
            .env("SLUICE_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit());
        Server::spawn(command)
    }

    /// Runs `command` (a `sluice serve`) and waits for its listening line.
    pub(crate) fn spawn(command: Command) -> Server {
        Server::spawn_reading(command, |_| true).0
    }

    /// Runs `command` (a `sluice serve`), waits for its listening line, and answers the lines
    /// it printed after it, up to and with the first that `last` accepts (none if `last`
    /// accepts the listening line).
    pub(crate) fn spawn_reading(
        mut command: Command,
        last: impl Fn(&str) -> bool,
    ) -> (Server, Vec<String>) {
        let mut child = command.spawn().expect("sluice starts");
        let stdout = child.stdout.take().unwrap();
        let mut lines = BufReader::new(stdout).lines();
        let first = lines.next().expect("a listening line").unwrap();
        let base = first
            .strip_prefix("sluice listening on ")
            .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
            .to_owned();
        let mut printed = Vec::new();
        if !last(&first) {
            for line in lines.by_ref() {
                let line = line.unwrap();
                let done = last(&line);
                printed.push(line);
                if done {
                    break;
                }
            }
        }
        // Keep draining stdout so the child never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let server = Server {
            base,
            child,
            client: Client::builder()
                .timeout(Duration::from_secs(30))
                .build()
                .unwrap(),
            _temp: None,
        };
        (server, printed)
    }

    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    /// A request with `token` as bearer.
    pub(crate) fn request(&self, method: Method, path: &str, token: &str) -> RequestBuilder {
        self.client
            .request(method, self.url(path))
            .header("authorization", format!("Bearer {token}"))
    }

    /// Sends `method path` with an optional JSON body; answers status and parsed JSON (Null
    /// for empty bodies).
    pub(crate) async fn call(
        &self,
        method: Method,
        path: &str,
        token: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut request = self.request(method, path, token);
        if let Some(body) = body {
            request = request.json(&body);
        }
        decode(request.send().await.unwrap()).await
    }

    /// SIGTERM, then waits for the process to end: its exit status, or a panic after 10 s.
    pub(crate) async fn terminate(&mut self) -> std::process::ExitStatus {
        let signalled = std::process::Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(signalled.success());
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the server did not stop within 10 s of SIGTERM"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// SIGKILL: no chance to flush or shut down.
    pub(crate) fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

pub(crate) async fn decode(response: Response) -> (u16, Value) {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    let value = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("not JSON ({e}): {text}"))
    };
    (status, value)
}

/// An HS256 token signed with [`SECRET`].
pub(crate) fn token(tenant: Option<&str>, scopes: &str) -> String {
    token_with(tenant, scopes, now_seconds() + 3600, SECRET)
}

pub(crate) fn token_with(tenant: Option<&str>, scopes: &str, exp: u64, secret: &str) -> String {
    let mut claims = json!({"scope": scopes, "exp": exp});
    if let Some(tenant) = tenant {
        claims["tenant"] = json!(tenant);
    }
    jsonwebtoken::encode(
        &Header::default(),
        &claims,
        &EncodingKey::from_secret(secret.as_bytes()).unwrap(),
    )
    .unwrap()
}

/// A token with every tenant scope for `tenant`.
pub(crate) fn tenant_token(tenant: &str) -> String {
    token(Some(tenant), ALL_TENANT_SCOPES)
}

/// Asserts an error answer: status, code, and that the request id is present.
#[track_caller]
pub(crate) fn assert_error(answer: &(u16, Value), status: u16, code: &str) {
    assert_eq!(answer.0, status, "{}", answer.1);
    assert_eq!(answer.1["error"]["code"], code, "{}", answer.1);
    assert!(answer.1["error"]["request_id"]
        .as_str()
        .is_some_and(|id| !id.is_empty()));
}

/// Bodies acknowledged (201) by a stream of sends, shared with the producing tasks.
pub(crate) type Acknowledged = std::sync::Arc<std::sync::Mutex<Vec<String>>>;

/// Starts `producers` tasks that each send `p<i>-<n>` bodies to `queue` one at a time, up to
/// `max_each`, until a send fails (as it does when the server or its store dies). Answers the
/// acknowledged bodies and the tasks to await.
pub(crate) fn stream_sends(
    server: &Server,
    queue: &str,
    token: &str,
    producers: usize,
    max_each: usize,
) -> (Acknowledged, Vec<tokio::task::JoinHandle<()>>) {
    let acknowledged = Acknowledged::default();
    let tasks = (0..producers)
        .map(|producer| {
            let client = server.client.clone();
            let url = server.url(&format!("/v1/queues/{queue}/messages"));
            let token = token.to_owned();
            let acknowledged = acknowledged.clone();
            tokio::spawn(async move {
                for n in 0..max_each {
                    let body = format!("p{producer}-{n}");
                    let sent = client
                        .post(&url)
                        .header("authorization", format!("Bearer {token}"))
                        .json(&json!({"body": body}))
                        .send()
                        .await;
                    match sent {
                        Ok(response) if response.status() == 201 => {
                            acknowledged.lock().unwrap().push(body)
                        }
                        _ => return,
                    }
                }
            })
        })
        .collect();
    (acknowledged, tasks)
}

/// Receives (hiding for 10 minutes) until the queue answers empty, riding out 503s while the
/// store comes back; answers every body received.
pub(crate) async fn drain(server: &Server, queue: &str, token: &str) -> Vec<String> {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut bodies = Vec::new();
    loop {
        assert!(
            std::time::Instant::now() < deadline,
            "draining {queue} took too long"
        );
        let (status, answer) = server
            .call(
                Method::POST,
                &format!("/v1/queues/{queue}/messages/receive"),
                token,
                Some(json!({"max_messages": 10, "visibility_timeout_seconds": 600})),
            )
            .await;
        if status == 503 {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        }
        assert_eq!(status, 200, "{answer}");
        let messages = answer["messages"].as_array().unwrap();
        if messages.is_empty() {
            return bodies;
        }
        bodies.extend(
            messages
                .iter()
                .map(|m| m["body"].as_str().unwrap().to_owned()),
        );
    }
}

/// Asserts every acknowledged body was received, exactly once.
#[track_caller]
pub(crate) fn assert_none_lost(acknowledged: &[String], received: &[String]) {
    let set: std::collections::HashSet<&String> = received.iter().collect();
    assert_eq!(set.len(), received.len(), "no message twice");
    let lost: Vec<&String> = acknowledged.iter().filter(|b| !set.contains(b)).collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged sends lost, e.g. {:?}",
        lost.len(),
        acknowledged.len(),
        &lost[..lost.len().min(5)]
    );
}

impl Server {
    /// The text of `GET /metrics`.
    pub(crate) async fn metrics_text(&self) -> String {
        self.client
            .get(self.url("/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// Creates the queue `dlq` and the queue `work`, whose messages move to `dlq` on the
    /// receive after their first (no visibility timeout, so every receive redelivers).
    /// How many messages `queue` stores (visible, in flight and delayed).
    pub(crate) async fn message_count(&self, queue: &str, token: &str) -> u64 {
        let (status, answer) = self
            .call(Method::GET, &format!("/v1/queues/{queue}"), token, None)
            .await;
        assert_eq!(status, 200, "{answer}");
        let stats = &answer["stats"];
        ["visible", "in_flight", "delayed"]
            .iter()
            .map(|state| stats[*state].as_u64().unwrap_or(0))
            .sum()
    }

    /// Waits (at most 30 s) until `queues` hold `total` messages together: moves between
    /// queues that a killed or busy gateway left half-done are finished by transfer recovery,
    /// after its grace period, so counting right after a task ends can catch them on the way.
    pub(crate) async fn await_settled(&self, queues: &[&str], total: u64, token: &str) {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let mut held = 0;
            for queue in queues {
                held += self.message_count(queue, token).await;
            }
            if held == total {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{queues:?} hold {held} messages, not {total}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    pub(crate) async fn dead_lettering_queues(&self, token: &str) {
        assert_eq!(
            self.call(Method::PUT, "/v1/queues/dlq", token, None)
                .await
                .0,
            201
        );
        let (status, answer) = self
            .call(
                Method::PUT,
                "/v1/queues/work",
                token,
                Some(json!({
                    "visibility_timeout_seconds": 0,
                    "redrive_policy": {"dead_letter_queue": "dlq", "max_receive_count": 1}
                })),
            )
            .await;
        assert_eq!(status, 201, "{answer}");
    }

    /// The status of an unauthenticated GET (health and readiness probes).
    pub(crate) async fn probe(&self, path: &str) -> u16 {
        self.client
            .get(self.url(path))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    }
}
