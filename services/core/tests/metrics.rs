//! The retention sweep counts what it removes in `sluice_messages_total{event="expired"}`,
//! and its supervisor counts its rounds in `sluice_background_runs_total`.
//! Retention lasts at least a minute, so this runs on a manual clock rather than end to end.

use metrics_exporter_prometheus::PrometheusBuilder;
use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{ManualClock, TenantId};
use sluice_services::{Background, Limits, QueueConfigPatch, SendRequest, Services};
use std::sync::Arc;
use std::time::Duration;

#[tokio::test]
async fn the_retention_sweep_counts_expired_messages() {
    let handle = PrometheusBuilder::new().install_recorder().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(EmbeddedEngine::open(dir.path(), EmbeddedOptions::default()).unwrap());
    let clock = ManualClock::new(1_000_000_000_000);
    let services = Services::new(engine, Arc::new(clock.clone()), Limits::default());
    let tenant = TenantId::parse("acme").unwrap();
    services.ensure_tenant(&tenant, None).await.unwrap();
    let patch = QueueConfigPatch {
        message_retention_seconds: Some(60),
        ..Default::default()
    };
    services.put_queue(&tenant, "q", patch).await.unwrap();
    for body in ["a", "b"] {
        let request = SendRequest {
            body: body.into(),
            ..Default::default()
        };
        services.send(&tenant, "q", request).await.unwrap();
    }
    let background =
        Background::start(&services, Duration::from_secs(1), Duration::from_secs(3600));
    let expired = "sluice_messages_total{event=\"expired\"} 2";
    clock.advance(61_000);
    // Each step passes one sweep's deadline; the sweep's own store call needs real time.
    for _ in 0..500 {
        if handle.render().contains(expired) {
            break;
        }
        clock.advance(1_000);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let text = handle.render();
    assert!(text.contains(expired), "{text}");
    assert!(
        text.contains("sluice_messages_total{tenant=\"acme\",queue=\"q\",event=\"sent\"} 2"),
        "{text}"
    );
    // The supervisor counts each round of the job by outcome.
    assert!(
        text.contains("sluice_background_runs_total{job=\"retention_expiry\",outcome=\"ok\"}"),
        "{text}"
    );
    background.stop();
}
