//! What a payload-event read costs on Redis: proportional to the logs with unacknowledged
//! events (the pending set), not to every log that ever held one (the registry), with a
//! full walk of the registry every [`FULL_WALK_EVERY`] reads so an event whose pending mark
//! was never written is still read. Commands are counted by the test's own `redis-server`.

use sluice_engine::{Messages, Millis, NewMessage, PayloadRef, Payloads, QueueConfig, QueueKey};
use sluice_engine::{QueueName, Queues, TenantId};
use sluice_redis::{RedisEngine, RedisOptions, FULL_WALK_EVERY};
use sluice_testkit::RedisServer;
use std::collections::BTreeMap;

const NOW: Millis = 1_767_225_600_000;
/// Logs that held a payload once and are drained.
const N: usize = 40;

fn key(i: usize) -> QueueKey {
    QueueKey::new(
        TenantId::parse("acme").unwrap(),
        QueueName::parse(&format!("q{i}")).unwrap(),
    )
}

fn spilled(id: &str) -> NewMessage {
    NewMessage {
        payload: Some(PayloadRef {
            key: format!("acme/{id:0>32}"),
            size: 4096,
            enveloped: false,
        }),
        message_id: id.to_owned(),
        body: String::new(),
        attributes: BTreeMap::new(),
        visible_at: NOW,
        group_id: None,
        deduplication_id: None,
    }
}

async fn engine(server: &RedisServer) -> RedisEngine {
    let options = RedisOptions {
        key_prefix: "plogs".into(),
        ..RedisOptions::default()
    };
    RedisEngine::connect(&server.url(), options).await.unwrap()
}

/// Reads and acknowledges until nothing is left; answers how many events.
async fn drain(engine: &RedisEngine) -> usize {
    let mut n = 0;
    loop {
        let batch = engine.payload_events(100).await.unwrap();
        if batch.events.is_empty() {
            return n;
        }
        n += batch.events.len();
        engine.ack_payload_events(&batch).await.unwrap();
    }
}

/// Calls per command since the last reset, then resets.
fn calls(server: &RedisServer) -> BTreeMap<String, u64> {
    let stats = server.query(&["INFO", "commandstats"]).unwrap();
    server.query(&["CONFIG", "RESETSTAT"]).unwrap();
    stats
        .lines()
        .filter_map(|l| {
            let (name, rest) = l.strip_prefix("cmdstat_")?.split_once(":calls=")?;
            Some((name.to_owned(), rest.split(',').next()?.parse().ok()?))
        })
        .collect()
}

fn count(calls: &BTreeMap<String, u64>, command: &str) -> u64 {
    calls.get(command).copied().unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_costs_the_pending_logs_not_every_log_that_ever_held_a_payload() {
    let server = RedisServer::start().unwrap();
    let engine = engine(&server).await;
    for i in 0..N {
        engine
            .put_queue(&key(i), QueueConfig::with_defaults(262_144), NOW)
            .await
            .unwrap();
        engine
            .send(&key(i), vec![spilled(&format!("m{i}"))], NOW)
            .await
            .unwrap();
        engine.purge(&key(i)).await.unwrap();
    }
    assert_eq!(
        drain(&engine).await,
        2 * N,
        "an Added and a Released per queue"
    );
    calls(&server);

    // Drained: a read walks the (empty) pending set, not the N registered logs.
    assert!(engine.payload_events(100).await.unwrap().events.is_empty());
    let idle = calls(&server);
    assert_eq!(count(&idle, "xrange"), 0, "{idle:?}");
    assert!(idle.values().sum::<u64>() <= 2, "{idle:?}");

    // One log with an event: one XRANGE for it.
    engine
        .send(&key(7), vec![spilled("late")], NOW)
        .await
        .unwrap();
    calls(&server);
    let batch = engine.payload_events(100).await.unwrap();
    assert_eq!(batch.events.len(), 1);
    engine.ack_payload_events(&batch).await.unwrap();
    let one = calls(&server);
    assert_eq!(count(&one, "xrange"), 1, "{one:?}");
    assert!(one.values().sum::<u64>() <= 5, "{one:?}");
    // The next read finds it drained and drops it from the pending set; then nothing.
    assert!(engine.payload_events(100).await.unwrap().events.is_empty());
    assert_eq!(count(&calls(&server), "xrange"), 1);
    assert!(engine.payload_events(100).await.unwrap().events.is_empty());
    assert_eq!(count(&calls(&server), "xrange"), 0);
}

/// An event whose writer never told the pending set (a process that wrote and died before its
/// next read) is still read: by the full walk, within `FULL_WALK_EVERY` reads.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_without_a_pending_mark_is_found_by_the_full_walk() {
    let server = RedisServer::start().unwrap();
    let reader = engine(&server).await;
    reader
        .put_queue(&key(1), QueueConfig::with_defaults(262_144), NOW)
        .await
        .unwrap();
    assert_eq!(drain(&reader).await, 0);
    {
        // Writes, never reads: its mark stays in its memory and dies with it.
        let writer = engine(&server).await;
        writer
            .send(&key(1), vec![spilled("orphaned")], NOW)
            .await
            .unwrap();
    }
    calls(&server);
    let mut reads = 0;
    let found = loop {
        reads += 1;
        let batch = reader.payload_events(100).await.unwrap();
        if !batch.events.is_empty() {
            break batch;
        }
        assert!(reads <= FULL_WALK_EVERY, "never found");
    };
    assert_eq!(found.events[0].message_id, "orphaned");
    let walked = calls(&server);
    assert_eq!(count(&walked, "xlen"), 1, "one full walk: {walked:?}");
}
