//! A deleted and re-created topic delivers to its own subscriptions only: its record starts
//! its versions again, so the compiled-policy cache must not take the old incarnation's
//! subscriptions for the new one's (embedded engine; the e2e test `topics.rs` covers Redis).

use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{SystemClock, TenantId};
use sluice_services::{
    Limits, PublishRequest, QueueConfigPatch, ReceiveRequest, Services, SubscribeRequest,
    TopicConfigInput,
};
use std::sync::Arc;

async fn bodies(services: &Services, tenant: &TenantId, queue: &str) -> Vec<String> {
    let request = ReceiveRequest {
        max_messages: Some(10),
        visibility_timeout_seconds: Some(60),
        ..ReceiveRequest::default()
    };
    let received = services.receive(tenant, queue, request).await.unwrap();
    received.into_iter().map(|m| m.body).collect()
}

async fn publish(services: &Services, tenant: &TenantId, body: &str) {
    let request = PublishRequest {
        body: body.to_owned(),
        ..PublishRequest::default()
    };
    services.publish(tenant, "t", request).await.unwrap();
}

async fn subscribe(services: &Services, tenant: &TenantId, queue: &str) -> String {
    let request = SubscribeRequest {
        queue: queue.to_owned(),
        raw_delivery: Some(true),
        ..SubscribeRequest::default()
    };
    services.subscribe(tenant, "t", request).await.unwrap().0.id
}

#[tokio::test]
async fn a_recreated_topic_delivers_to_its_new_subscriptions_only() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(EmbeddedEngine::open(dir.path(), EmbeddedOptions::default()).unwrap());
    let services = Services::new(engine, Arc::new(SystemClock), Limits::default());
    let tenant = TenantId::parse("acme").unwrap();
    services.ensure_tenant(&tenant, None).await.unwrap();
    for queue in ["a", "b"] {
        services
            .put_queue(&tenant, queue, QueueConfigPatch::default())
            .await
            .unwrap();
    }
    let topic = || TopicConfigInput::default();
    services.put_topic(&tenant, "t", topic()).await.unwrap();
    subscribe(&services, &tenant, "a").await;
    publish(&services, &tenant, "first").await;

    services.delete_topic(&tenant, "t").await.unwrap();
    services.put_topic(&tenant, "t", topic()).await.unwrap();
    let id = subscribe(&services, &tenant, "b").await;
    publish(&services, &tenant, "second").await;

    assert_eq!(bodies(&services, &tenant, "a").await, ["first"]);
    assert_eq!(bodies(&services, &tenant, "b").await, ["second"]);
    let stats = services.get_subscription(&tenant, &id).await.unwrap().stats;
    assert_eq!(stats.delivered, 1);
}
