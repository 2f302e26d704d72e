//! Prometheus metrics: the process-wide recorder behind the `metrics` facade, the HTTP
//! request metrics every route records through one middleware layer, and `GET /metrics`,
//! which renders them. Domain counters and queue gauges are recorded by the services; this
//! module only collects and renders them.

use axum::extract::{MatchedPath, Request};
use axum::http::{header, Method};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use metrics_util::MetricKindMask;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// How often the queue sampler refreshes the queue gauges (and the recorder's upkeep runs).
pub const SAMPLE_PERIOD: Duration = Duration::from_secs(3);

/// The route label of requests no route matched: raw paths would make the label unbounded.
pub const UNMATCHED_ROUTE: &str = "unmatched";

const DURATION_BUCKETS: &[f64] = &[
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 25.0,
];

/// Requests per embedded group commit.
const BATCH_BUCKETS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 1024.0];

static HANDLE: OnceLock<PrometheusHandle> = OnceLock::new();

/// The process's recorder, installed on first use. Installing twice is an error in the facade,
/// and a process (a test binary) may build several applications, so every caller shares one.
pub fn handle() -> &'static PrometheusHandle {
    HANDLE.get_or_init(|| {
        let builder = || {
            PrometheusBuilder::new()
                // Every `…_duration_seconds` histogram: HTTP requests, background rounds,
                // embedded commits, Redis calls.
                .set_buckets_for_metric(
                    Matcher::Suffix("_duration_seconds".into()),
                    DURATION_BUCKETS,
                )
                .and_then(|builder| {
                    builder.set_buckets_for_metric(
                        Matcher::Full("sluice_embedded_commit_batch_jobs".into()),
                        BATCH_BUCKETS,
                    )
                })
                // Buckets for a constant, non-empty list cannot be refused.
                .unwrap_or_else(|_| PrometheusBuilder::new())
                // Gauges the sampler stops refreshing (queues deleted, or a store that stopped
                // answering) disappear rather than report stale counts forever; on a store
                // large enough for the sampler to pace itself, rounds may be minutes apart.
                .idle_timeout(
                    MetricKindMask::GAUGE,
                    Some(sluice_services::MAX_PACED_PAUSE * 2),
                )
        };
        builder().install_recorder().unwrap_or_else(|error| {
            // Another recorder owns the facade (an embedding program installed its own): keep
            // a private one so /metrics still answers, empty of what the facade records.
            tracing::warn!(%error, "metrics: cannot install the Prometheus recorder");
            builder().build_recorder().handle()
        })
    })
}

/// Runs the recorder's upkeep every [`SAMPLE_PERIOD`] until aborted, so histogram samples are
/// folded in even when nobody scrapes.
pub fn spawn_upkeep() -> tokio::task::JoinHandle<()> {
    let handle = handle();
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(SAMPLE_PERIOD);
        loop {
            tick.tick().await;
            handle.run_upkeep();
        }
    })
}

/// Counts every request and times it, labelled by the route's template.
pub async fn track(request: Request, next: Next) -> Response {
    let method = method_label(request.method());
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map_or_else(|| UNMATCHED_ROUTE.to_owned(), |p| p.as_str().to_owned());
    let started = Instant::now();
    let response = next.run(request).await;
    let status = response.status().as_u16().to_string();
    metrics::counter!("sluice_http_requests_total",
        "method" => method, "route" => route.clone(), "status" => status)
    .increment(1);
    metrics::histogram!("sluice_http_request_duration_seconds",
        "method" => method, "route" => route)
    .record(started.elapsed().as_secs_f64());
    response
}

/// A fixed set of method labels: an extension method is any token, so it is folded.
fn method_label(method: &Method) -> &'static str {
    match *method {
        Method::GET => "GET",
        Method::POST => "POST",
        Method::PUT => "PUT",
        Method::PATCH => "PATCH",
        Method::DELETE => "DELETE",
        Method::HEAD => "HEAD",
        Method::OPTIONS => "OPTIONS",
        _ => "other",
    }
}

/// Every metric in the Prometheus text format.
#[utoipa::path(get, path = "/metrics", tag = "operations", operation_id = "get_metrics",
    responses((status = 200, description = "Every metric, in the Prometheus text exposition \
        format (version 0.0.4)", content_type = "text/plain", body = String)),
    security(()))]
pub async fn render() -> Response {
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        handle().render(),
    )
        .into_response()
}
