//! Opaque queue attributes (kept for the AWS endpoint's `Policy`, KMS settings, …): stored and
//! answered byte for byte, changed one by one, and tied to one creation of the queue, so a
//! queue deleted and created again under its name starts without them.

use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{ManualClock, TenantId};
use sluice_services::{Limits, QueueConfigPatch, Services};
use std::collections::BTreeMap;
use std::sync::Arc;

fn changes(pairs: &[(&str, Option<&str>)]) -> BTreeMap<String, Option<String>> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.map(str::to_owned)))
        .collect()
}

#[tokio::test]
async fn opaque_attributes_belong_to_one_creation_of_a_queue() {
    let dir = tempfile::tempdir().unwrap();
    let engine = Arc::new(EmbeddedEngine::open(dir.path(), EmbeddedOptions::default()).unwrap());
    let clock = Arc::new(ManualClock::new(1_000_000_000_000));
    let services = Services::new(engine, clock.clone(), Limits::default());
    let tenant = TenantId::parse("acme").unwrap();
    services.ensure_tenant(&tenant, None).await.unwrap();
    let (queue, _) = services
        .put_queue(&tenant, "q", QueueConfigPatch::default())
        .await
        .unwrap();
    let created = queue.created_at;

    let policy = " {\"Statement\" :[]} ";
    let stored = services
        .update_opaque_queue_attributes(
            &tenant,
            "q",
            created,
            changes(&[("Policy", Some(policy)), ("KmsMasterKeyId", Some("k"))]),
        )
        .await
        .unwrap();
    assert_eq!(stored.len(), 2);
    let stored = services
        .update_opaque_queue_attributes(&tenant, "q", created, changes(&[("KmsMasterKeyId", None)]))
        .await
        .unwrap();
    assert_eq!(
        stored,
        BTreeMap::from([("Policy".to_owned(), policy.to_owned())])
    );
    assert_eq!(
        services
            .opaque_queue_attributes(&tenant, "q", created)
            .await
            .unwrap(),
        stored
    );
    // Another creation of the name does not see them, and writing for it starts afresh.
    assert!(services
        .opaque_queue_attributes(&tenant, "q", created + 1)
        .await
        .unwrap()
        .is_empty());
    let fresh = services
        .update_opaque_queue_attributes(
            &tenant,
            "q",
            created + 1,
            changes(&[("KmsMasterKeyId", Some("j"))]),
        )
        .await
        .unwrap();
    assert_eq!(
        fresh,
        BTreeMap::from([("KmsMasterKeyId".to_owned(), "j".to_owned())])
    );

    // Deleting the queue removes them; the queue created again later has none.
    services.delete_queue(&tenant, "q").await.unwrap();
    clock.advance(1_000);
    let (again, _) = services
        .put_queue(&tenant, "q", QueueConfigPatch::default())
        .await
        .unwrap();
    assert!(services
        .opaque_queue_attributes(&tenant, "q", again.created_at)
        .await
        .unwrap()
        .is_empty());
    assert!(services
        .opaque_queue_attributes(&tenant, "q", created + 1)
        .await
        .unwrap()
        .is_empty());

    // Values past the limit are refused and change nothing.
    let refused = services
        .update_opaque_queue_attributes(
            &tenant,
            "q",
            again.created_at,
            changes(&[("Policy", Some(&"x".repeat(20_481)))]),
        )
        .await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(services
        .opaque_queue_attributes(&tenant, "q", again.created_at)
        .await
        .unwrap()
        .is_empty());
}
