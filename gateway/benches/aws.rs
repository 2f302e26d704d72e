//! The AWS-compatible endpoint, measured in one run against baselines of the same run:
//!
//! 1. **SQS vs REST, both engines**: the same producer/consumer loop
//!    (`sluice_bench_support::flow`: 8 producers + 8 consumers on one queue, 1 KiB bodies,
//!    batches of 10) driven once through the AWS endpoint with the Rust SDK (`aws-sdk-sqs`:
//!    AWS JSON 1.0, SigV4-signed `SendMessageBatch`, `ReceiveMessage` long-polling 1 s,
//!    `DeleteMessageBatch`) and once over REST (`common::HttpDriver`: batch send, receive,
//!    batch delete), alternating, on a fresh queue each time. On the embedded engine a third
//!    arm drives **moto's server** (`moto_server`, the emulator most users run locally) with the
//!    same SDK client and loop. Reported: msgs/s per run, medians, SQS/REST and Sluice/moto
//!    ratios, and the gateway's CPU per request.
//! 2. **SigV4 verification cost**: `sigv4::verify` (the gateway's verifier, with
//!    `parse_authorization`) timed in a loop on requests signed by AWS's own signer
//!    (`aws-sigv4`) as the SDK sends them: a `SendMessageBatch` of 10 × 1 KiB, and a
//!    `ReceiveMessage`. Shown next to phase 1's gateway CPU per SQS request (when phase 1 ran)
//!    so the share is visible.
//!
//! The gateway runs on its own tokio runtime (`sluice-srv`, 2 workers) and the load on another
//! (`bench-load`, 2 workers), so each side's CPU is read per thread; moto's is read from
//! `/proc/<pid>`.
//!
//! Run: `cargo bench -p sluice-gateway --bench aws` (needs `redis-server` on the PATH; moto's arm
//! needs `moto_server`: `SLUICE_BENCH_MOTO_SERVER=<path>`, else the PATH's, else the arm is
//! skipped with a note). `SLUICE_BENCH_PHASES=1` or `2` runs one phase;
//! `SLUICE_BENCH_QUICK=1` shrinks both.

mod common;
#[path = "common/phases.rs"]
mod phases;

use aws_credential_types::Credentials as SigningCredentials;
use aws_sdk_sqs::config::retry::RetryConfig;
use aws_sdk_sqs::config::timeout::TimeoutConfig;
use aws_sdk_sqs::config::{BehaviorVersion, Credentials, Region};
use aws_sdk_sqs::types::{DeleteMessageBatchRequestEntry, SendMessageBatchRequestEntry};
use aws_sigv4::http_request::{sign, SignableBody, SignableRequest, SigningSettings};
use aws_sigv4::sign::v4;
use common::{expect_status, Http};
use phases::{load_runtime, wanted, Store, Stores};
use serde_json::{json, Value};
use sluice_bench_support::flow::{body_id, flow, padded_body, Driver, Flow, Received, BODY_BYTES};
use sluice_bench_support::stats::{median_or_nan as median, runs};
use sluice_bench_support::system::{cpu_seconds, scratch_base, threads_cpu_seconds};
use sluice_bench_support::BenchResult;
use sluice_gateway::auth::{Auth, KeyMaterial, Scope};
use sluice_gateway::aws::sigv4;
use sluice_gateway::secret::Secret;
use sluice_testkit::RedisServer;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const TENANT: &str = "bench";
/// The secret `common::start_gateway` configures; the admin token is minted with it here.
const JWT_SECRET_BYTE: u8 = b'x';
const REGION: &str = "us-east-1";
const PRODUCERS: usize = 8;
const CONSUMERS: usize = 8;
const BATCH: usize = 10;

struct Plan {
    repetitions: usize,
    window: Duration,
    verify_iterations: u32,
}

impl Plan {
    fn full() -> Self {
        Self {
            repetitions: 3,
            window: Duration::from_secs(5),
            verify_iterations: 20_000,
        }
    }

    fn quick() -> Self {
        Self {
            repetitions: 1,
            window: Duration::from_secs(1),
            verify_iterations: 1_000,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// The SDK as a driver of the shared loop.

/// An SQS client for `endpoint` as an application would build one, minus what a benchmark must
/// not have: no retries (failures are counted, not hidden), no TLS stack (loopback HTTP).
fn sqs_client(endpoint: &str, (key_id, secret): (&str, &str)) -> aws_sdk_sqs::Client {
    let config = aws_sdk_sqs::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(REGION))
        .endpoint_url(endpoint)
        .credentials_provider(Credentials::new(key_id, secret, None, None, "sluice-bench"))
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .retry_config(RetryConfig::disabled())
        .timeout_config(
            TimeoutConfig::builder()
                .operation_timeout(Duration::from_secs(60))
                .build(),
        )
        .build();
    aws_sdk_sqs::Client::from_conf(config)
}

/// The SDK's error with its service error code, not only "service error".
fn sdk_error<E: std::error::Error + Send + Sync + 'static>(
    what: &str,
    e: E,
) -> Box<dyn std::error::Error + Send + Sync> {
    let detail = aws_sdk_sqs::error::DisplayErrorContext(&e).to_string();
    format!("{what}: {}", detail.chars().take(300).collect::<String>()).into()
}

/// One queue through the SQS API: `SendMessageBatch`, `ReceiveMessage` (long poll 1 s, as the
/// REST driver), `DeleteMessageBatch`.
struct SqsDriver {
    client: aws_sdk_sqs::Client,
    queue_url: String,
}

impl SqsDriver {
    async fn create(client: aws_sdk_sqs::Client, queue: &str) -> BenchResult<Self> {
        let queue_url = client
            .create_queue()
            .queue_name(queue)
            .send()
            .await
            .map_err(|e| sdk_error("CreateQueue", e))?
            .queue_url
            .ok_or("CreateQueue answered no QueueUrl")?;
        Ok(Self { client, queue_url })
    }
}

impl Driver for SqsDriver {
    async fn send(&self, first: u64, batch: usize, padding: &str) -> BenchResult<()> {
        let entries = (0..batch as u64)
            .map(|i| {
                SendMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .message_body(padded_body(first + i, padding))
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let answer = self
            .client
            .send_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| sdk_error("SendMessageBatch", e))?;
        if let Some(failed) = answer.failed().first() {
            return Err(format!(
                "SendMessageBatch: {} entries failed, first {failed:?}",
                answer.failed().len()
            )
            .into());
        }
        Ok(())
    }

    async fn receive(&self, max: usize) -> BenchResult<Vec<Received>> {
        let answer = self
            .client
            .receive_message()
            .queue_url(&self.queue_url)
            .max_number_of_messages(i32::try_from(max)?)
            .wait_time_seconds(1)
            .send()
            .await
            .map_err(|e| sdk_error("ReceiveMessage", e))?;
        answer
            .messages()
            .iter()
            .map(|m| {
                let id = body_id(m.body().ok_or("message without Body")?)?;
                let handle = m.receipt_handle().ok_or("message without ReceiptHandle")?;
                Ok((id, handle.to_owned()))
            })
            .collect()
    }

    async fn delete(&self, handles: Vec<String>, _batch: usize) -> BenchResult<u64> {
        let entries = handles
            .into_iter()
            .enumerate()
            .map(|(i, handle)| {
                DeleteMessageBatchRequestEntry::builder()
                    .id(i.to_string())
                    .receipt_handle(handle)
                    .build()
            })
            .collect::<Result<Vec<_>, _>>()?;
        let answer = self
            .client
            .delete_message_batch()
            .queue_url(&self.queue_url)
            .set_entries(Some(entries))
            .send()
            .await
            .map_err(|e| sdk_error("DeleteMessageBatch", e))?;
        if let Some(failed) = answer.failed().first() {
            return Err(format!(
                "DeleteMessageBatch: {} entries failed, first {failed:?}",
                answer.failed().len()
            )
            .into());
        }
        Ok(1)
    }
}

// ---------------------------------------------------------------------------------------------
// Setting up: an access key on the gateway, moto's server.

/// An admin token signed with the gateway's secret.
fn admin_token() -> BenchResult<String> {
    let auth = Auth::new(
        KeyMaterial::Secret(Secret::new(vec![JWT_SECRET_BYTE; 40])),
        None,
        None,
    )?;
    let now = SystemTime::now().duration_since(UNIX_EPOCH)?.as_secs();
    Ok(auth.mint(None, &[Scope::Admin], now, 7200)?)
}

/// A new access key for `TENANT` with the queue scopes, through the admin API (the tenant is
/// made by the first request of its token).
async fn access_key(http: &Http) -> BenchResult<(String, String)> {
    http.put_queue("key-setup").await?;
    let response = http
        .client
        .post(format!(
            "{}/v1/admin/tenants/{TENANT}/access-keys",
            http.base
        ))
        .header("authorization", format!("Bearer {}", admin_token()?))
        .json(&json!({"scopes": ["queues:manage", "messages:send", "messages:consume"]}))
        .send()
        .await?;
    let key: Value = expect_status(response, &[201]).await?.json().await?;
    let field = |name: &str| {
        key[name]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| format!("access key answer without {name}: {key}"))
    };
    Ok((field("access_key_id")?, field("secret_access_key")?))
}

/// A `moto_server` this bench started; killed on drop.
struct Moto {
    child: Child,
    endpoint: String,
}

impl Drop for Moto {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Starts `SLUICE_BENCH_MOTO_SERVER` (else the PATH's `moto_server`) on a free port; `None`
/// with the reason when there is none.
fn start_moto() -> BenchResult<Result<Moto, String>> {
    let program =
        std::env::var("SLUICE_BENCH_MOTO_SERVER").unwrap_or_else(|_| "moto_server".to_owned());
    let port = std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port();
    let child = match Command::new(&program)
        .args(["-H", "127.0.0.1", "-p", &port.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
    {
        Ok(child) => child,
        Err(e) => return Ok(Err(format!("{program}: {e}"))),
    };
    let moto = Moto {
        child,
        endpoint: format!("http://127.0.0.1:{port}"),
    };
    let deadline = Instant::now() + Duration::from_secs(30);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Ok(Ok(moto));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok(Err(format!(
        "{program} did not listen on {port} within 30 s"
    )))
}

// ---------------------------------------------------------------------------------------------
// Phase 1: throughput.

#[derive(Clone, Copy, PartialEq)]
enum Arm {
    Rest,
    Sqs,
    Moto,
}

impl Arm {
    fn label(self) -> &'static str {
        match self {
            Arm::Rest => "REST (batch send, receive, batch delete)",
            Arm::Sqs => "SQS JSON via aws-sdk-sqs (SigV4)",
            Arm::Moto => "moto_server, same SDK client",
        }
    }

    fn slot(self) -> usize {
        self as usize
    }
}

struct Run {
    flow: Flow,
    /// CPU seconds of the server (the gateway's threads, or moto's process).
    server_cpu: f64,
    /// CPU seconds of the load generator's threads.
    load_cpu: f64,
}

impl Run {
    fn server_cpu_per_request_us(&self) -> f64 {
        self.server_cpu / self.flow.ops() as f64 * 1e6
    }

    fn load_cpu_per_request_us(&self) -> f64 {
        self.load_cpu / self.flow.ops() as f64 * 1e6
    }
}

/// The loop on `driver`, with the CPU the server (`server_cpu`) and the load used meanwhile.
async fn measured<D: Driver>(
    driver: D,
    server_cpu: &dyn Fn() -> f64,
    plan: &Plan,
) -> BenchResult<Run> {
    let (server0, load0) = (server_cpu(), threads_cpu_seconds("bench-load"));
    let f = flow(Arc::new(driver), PRODUCERS, CONSUMERS, BATCH, plan.window).await?;
    Ok(Run {
        flow: f,
        server_cpu: server_cpu() - server0,
        load_cpu: threads_cpu_seconds("bench-load") - load0,
    })
}

/// Phase 1 on one engine: the arms alternate (the order rotates each repetition). Answers the
/// median gateway CPU per SQS request and per REST request, in µs.
fn throughput_phase(
    stores: &Stores,
    load: &tokio::runtime::Runtime,
    plan: &Plan,
    store: Store,
    moto: Option<&Moto>,
) -> BenchResult<(f64, f64)> {
    let (server, http) = stores.gateway(store, "throughput", "bench-aws".into(), TENANT)?;
    let key = load.block_on(access_key(&http))?;
    let sluice_sqs = sqs_client(&http.base, (&key.0, &key.1));
    let moto_client = moto.map(|m| sqs_client(&m.endpoint, ("bench", "bench")));
    let mut arms = vec![Arm::Rest, Arm::Sqs];
    if moto.is_some() {
        arms.push(Arm::Moto);
    }
    let gateway_cpu = || threads_cpu_seconds("sluice-");
    let moto_cpu = || moto.map_or(f64::NAN, |m| cpu_seconds(m.child.id()).unwrap_or(f64::NAN));
    let mut results: [Vec<Run>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    for rep in 0..plan.repetitions {
        arms.rotate_left(usize::from(rep > 0));
        for &arm in &arms {
            let queue = format!("q-{}-r{rep}", arm.slot());
            let run = match arm {
                Arm::Rest => load.block_on(async {
                    measured(http.driver(&queue).await?, &gateway_cpu, plan).await
                })?,
                Arm::Sqs => load.block_on(async {
                    let driver = SqsDriver::create(sluice_sqs.clone(), &queue).await?;
                    measured(driver, &gateway_cpu, plan).await
                })?,
                Arm::Moto => load.block_on(async {
                    let client = moto_client.clone().ok_or("no moto client")?;
                    measured(SqsDriver::create(client, &queue).await?, &moto_cpu, plan).await
                })?,
            };
            let f = &run.flow;
            eprintln!(
                "{} rep {}: {}: {:.0} msgs/s, {:.0} req/s, sent {}, lost {}, duplicates {}, \
                 empty receives {}, server {:.0} µs CPU/request, load {:.0} µs CPU/request",
                store.label(),
                rep + 1,
                arm.label(),
                f.msgs_per_second,
                f.ops_per_second(),
                f.sent,
                f.lost,
                f.duplicates,
                f.empty_receives,
                run.server_cpu_per_request_us(),
                run.load_cpu_per_request_us(),
            );
            // SQS (and so moto) may deliver twice; Sluice's standard queues do not, and nothing
            // acknowledged may go missing anywhere.
            if f.lost > 0 || (f.duplicates > 0 && arm != Arm::Moto) {
                return Err(format!(
                    "{}: {} lost, {} duplicates: the run does not count",
                    arm.label(),
                    f.lost,
                    f.duplicates
                )
                .into());
            }
            results[arm.slot()].push(run);
        }
    }
    drop(server);

    let msgs = |slot: usize| -> Vec<f64> {
        results[slot]
            .iter()
            .map(|r| r.flow.msgs_per_second)
            .collect()
    };
    let rest_m = median(&msgs(Arm::Rest.slot()));
    let sqs_m = median(&msgs(Arm::Sqs.slot()));
    for arm in [Arm::Rest, Arm::Sqs, Arm::Moto] {
        let rs = &results[arm.slot()];
        if rs.is_empty() {
            continue;
        }
        let m = median(&msgs(arm.slot()));
        let vs = match arm {
            Arm::Rest => "1.00x REST".to_owned(),
            Arm::Sqs => format!("{:.2}x REST", m / rest_m),
            Arm::Moto => format!("Sluice SQS = {:.1}x moto", sqs_m / m),
        };
        let per = |f: &dyn Fn(&Run) -> f64| median(&rs.iter().map(f).collect::<Vec<_>>());
        println!(
            "| {} | {} | {} | {m:.0} | {vs} | {:.0} | {:.0} | {:.0} | {} | {} |",
            store.label(),
            arm.label(),
            runs(&msgs(arm.slot())),
            per(&|r| r.flow.ops_per_second()),
            per(&Run::server_cpu_per_request_us),
            per(&Run::load_cpu_per_request_us),
            rs.iter().map(|r| r.flow.sent).sum::<u64>(),
            rs.iter().map(|r| r.flow.duplicates).sum::<u64>(),
        );
    }
    let cpu = |arm: Arm| {
        median(
            &results[arm.slot()]
                .iter()
                .map(Run::server_cpu_per_request_us)
                .collect::<Vec<_>>(),
        )
    };
    Ok((cpu(Arm::Sqs), cpu(Arm::Rest)))
}

// ---------------------------------------------------------------------------------------------
// Phase 2: SigV4 verification.

/// A request as the SDK sends `action` with `body` to `http://127.0.0.1:8080/`, signed now by
/// `aws-sigv4` with `secret`.
fn signed(
    action: &str,
    body: &str,
    secret: &str,
) -> BenchResult<(axum::http::Method, axum::http::Uri, axum::http::HeaderMap)> {
    let url = "http://127.0.0.1:8080/";
    let target = format!("AmazonSQS.{action}");
    let headers = [
        ("host", "127.0.0.1:8080"),
        ("content-type", "application/x-amz-json-1.0"),
        ("x-amz-target", target.as_str()),
    ];
    let identity =
        SigningCredentials::new("AKIABENCHBENCHBENCH0", secret, None, None, "bench").into();
    let params = v4::SigningParams::builder()
        .identity(&identity)
        .region(REGION)
        .name("sqs")
        .time(SystemTime::now())
        .settings(SigningSettings::default())
        .build()?
        .into();
    let signable = SignableRequest::new(
        "POST",
        url,
        headers.iter().copied(),
        SignableBody::Bytes(body.as_bytes()),
    )?;
    let (instructions, _) = sign(signable, &params)?.into_parts();
    let mut map = axum::http::HeaderMap::new();
    for (name, value) in headers.into_iter().chain(instructions.headers()) {
        map.insert(
            axum::http::HeaderName::from_bytes(name.as_bytes())?,
            value.parse()?,
        );
    }
    Ok((axum::http::Method::POST, url.parse()?, map))
}

/// Mean µs of one `parse_authorization` + `verify` of `action` with `body`.
fn verify_cost(action: &str, body: &str, iterations: u32) -> BenchResult<f64> {
    let secret = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY";
    let (method, uri, headers) = signed(action, body, secret)?;
    let now_ms = u64::try_from(SystemTime::now().duration_since(UNIX_EPOCH)?.as_millis())?;
    let once = || -> BenchResult<()> {
        let auth = sigv4::parse_authorization(&headers).map_err(|e| format!("{e:?}"))?;
        let request = sigv4::Request::new(&method, &uri, &headers, body.as_bytes());
        sigv4::verify(request, &auth, secret, REGION, now_ms).map_err(|e| format!("{e:?}"))?;
        Ok(())
    };
    // A request the verifier refuses would time an early return.
    once()?;
    let start = Instant::now();
    for _ in 0..iterations {
        once()?;
    }
    Ok(start.elapsed().as_secs_f64() * 1e6 / f64::from(iterations))
}

fn sigv4_phase(plan: &Plan, cpu_per_sqs_request: &[(Store, f64)]) -> BenchResult<()> {
    let queue_url = "http://127.0.0.1:8080/000000000000/q";
    let padding = "x".repeat(BODY_BYTES);
    let entries: Vec<Value> = (0..BATCH as u64)
        .map(|i| json!({"Id": i.to_string(), "MessageBody": padded_body(i, &padding)}))
        .collect();
    let send_batch = json!({"QueueUrl": queue_url, "Entries": entries}).to_string();
    let receive =
        json!({"QueueUrl": queue_url, "MaxNumberOfMessages": 10, "WaitTimeSeconds": 1}).to_string();
    let cases = [
        ("SendMessageBatch", &send_batch),
        ("ReceiveMessage", &receive),
    ];
    println!("| request | body bytes | verify µs (parse + verify, mean of {}) | share of the gateway's CPU per SQS request (phase 1 median, all actions) |", plan.verify_iterations);
    println!("|---|---:|---:|---|");
    for (action, body) in cases {
        let us = verify_cost(action, body, plan.verify_iterations)?;
        let share = if cpu_per_sqs_request.is_empty() {
            "phase 1 not run".to_owned()
        } else {
            cpu_per_sqs_request
                .iter()
                .map(|(store, cpu)| {
                    format!(
                        "{}: {:.1} % of {cpu:.0} µs",
                        store.label(),
                        us / cpu * 100.0
                    )
                })
                .collect::<Vec<_>>()
                .join("; ")
        };
        println!("| {action} | {} | {us:.1} | {share} |", body.len());
    }
    Ok(())
}

fn main() -> BenchResult<()> {
    let quick = sluice_bench_support::quick();
    let plan = if quick { Plan::quick() } else { Plan::full() };
    let (base, fs) = scratch_base()?;
    let scratch = tempfile::Builder::new()
        .prefix("sluice-aws-bench-")
        .tempdir_in(&base)?;
    let stores = Stores {
        redis: RedisServer::start()?,
        scratch: scratch.path().to_path_buf(),
    };
    let load = load_runtime()?;
    println!(
        "## sluice-gateway: AWS-compatible endpoint{}",
        if quick { " (QUICK)" } else { "" }
    );
    println!();
    println!(
        "data dir {} ({fs}); {} cores shared by server, load generator, redis-server and moto; \
         redis-server without persistence",
        scratch.path().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get()),
    );
    let mut cpu_per_sqs_request = Vec::new();
    let mut server_cpu_ratios = Vec::new();
    if wanted(1) {
        let moto = start_moto()?;
        println!();
        println!(
            "### 1. send + receive + delete through SQS vs REST ({PRODUCERS} producers + \
             {CONSUMERS} consumers, one queue, 1 KiB, batches of {BATCH}, {:.0} s windows, \
             {} alternating reps)",
            plan.window.as_secs_f64(),
            plan.repetitions
        );
        if let Err(why) = &moto {
            println!();
            println!("moto's arm skipped: {why}");
        }
        println!();
        println!("| engine | client | msgs/s (runs) | msgs/s median | ratio | requests/s | server CPU µs/request | load CPU µs/request | sent | duplicates |");
        println!("|---|---|---|---:|---|---:|---:|---:|---:|---:|");
        for store in [Store::Embedded, Store::Redis] {
            // moto is one arm of the embedded engine's runs: it has no engine to choose.
            let moto = moto.as_ref().ok().filter(|_| store == Store::Embedded);
            let (sqs, rest) = throughput_phase(&stores, &load, &plan, store, moto)?;
            cpu_per_sqs_request.push((store, sqs));
            server_cpu_ratios.push(format!("{} {:.2}x", store.label(), sqs / rest));
        }
        println!();
        println!(
            "gateway CPU per request, SQS / REST: {}",
            server_cpu_ratios.join(", ")
        );
    }
    if wanted(2) {
        println!();
        println!("### 2. SigV4 verification per request");
        println!();
        sigv4_phase(&plan, &cpu_per_sqs_request)?;
    }
    drop(load);
    drop(stores);
    drop(scratch);
    Ok(())
}
