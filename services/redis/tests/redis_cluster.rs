//! Redis Cluster specifics: queues spread over the masters, scripts re-loaded on every node
//! after `SCRIPT FLUSH`, wake-ups broadcast across nodes, and recovery after a master restarts.

use sluice_engine::{
    EngineError, Messages, Millis, NewMessage, QueueConfig, QueueKey, QueueName, Queues, RateLimit,
    RateLimiter, TenantId, Upkeep,
};
use sluice_redis::{RedisEngine, RedisOptions};
use sluice_testkit::{shared_cluster, unique_prefix, RedisCluster};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

const NOW: Millis = 1_767_225_600_000;

fn key(name: &str) -> QueueKey {
    QueueKey::new(
        TenantId::parse("acme").unwrap(),
        QueueName::parse(name).unwrap(),
    )
}

fn message(body: &str) -> NewMessage {
    NewMessage {
        payload: None,
        message_id: format!("id-{body}"),
        body: body.to_owned(),
        attributes: BTreeMap::new(),
        visible_at: NOW,
        group_id: None,
        deduplication_id: None,
    }
}

fn config() -> QueueConfig {
    QueueConfig::with_defaults(262_144)
}

async fn engine(url: &str, prefix: &str, timeout: Duration) -> RedisEngine {
    let options = RedisOptions {
        key_prefix: prefix.to_owned(),
        command_timeout: timeout,
        ..RedisOptions::default()
    };
    RedisEngine::connect(url, options)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// Enough queues that every master owns some (checked through `CLUSTER KEYSLOT`).
fn spread_queues(cluster: &RedisCluster, prefix: &str) -> Vec<QueueKey> {
    let queues: Vec<QueueKey> = (0..12).map(|i| key(&format!("q{i}"))).collect();
    let node = &cluster.nodes()[0];
    let slots: Vec<u16> = queues
        .iter()
        .map(|q| {
            node.query(&[
                "CLUSTER",
                "KEYSLOT",
                &format!("{{{prefix}:acme:{}}}:meta", q.name),
            ])
            .unwrap()
            .parse()
            .unwrap()
        })
        .collect();
    // Three masters split 16384 slots into thirds; twelve random tags miss one third only
    // with negligible probability, but say so if they do.
    for third in 0..3u16 {
        let (lo, hi) = (third * 5462, (third + 1) * 5462);
        assert!(
            slots.iter().any(|s| (lo..hi).contains(s)),
            "no queue landed in slots {lo}..{hi}: {slots:?}"
        );
    }
    queues
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_loaded_again_on_every_node_after_script_flush() {
    let cluster = shared_cluster();
    let prefix = unique_prefix("flush");
    let engine = engine(&cluster.url(), &prefix, Duration::from_secs(5)).await;
    let queues = spread_queues(cluster, &prefix);
    for q in &queues {
        engine.put_queue(q, config(), NOW).await.unwrap();
    }
    for node in cluster.nodes() {
        node.query(&["SCRIPT", "FLUSH"]).unwrap();
    }
    for q in &queues {
        engine.send(q, vec![message("m")], NOW).await.unwrap();
        let got = engine.receive(q, 10, 30, None, NOW).await.unwrap();
        assert_eq!(got.messages.len(), 1, "{q}");
    }
    engine.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wake_ups_cross_nodes_and_engines() {
    let cluster = shared_cluster();
    let prefix = unique_prefix("wake");
    let a = engine(&cluster.url(), &prefix, Duration::from_secs(5)).await;
    let b = engine(&cluster.url(), &prefix, Duration::from_secs(5)).await;
    for q in spread_queues(cluster, &prefix) {
        a.put_queue(&q, config(), NOW).await.unwrap();
        let mut listener = a.listen(&q).await.unwrap();
        b.send(&q, vec![message("x")], NOW).await.unwrap();
        tokio::time::timeout(Duration::from_millis(100), listener.changed())
            .await
            .unwrap_or_else(|_| panic!("a send to {q} through B wakes A within 100 ms"));
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_master_is_used_again_without_help() {
    let cluster = RedisCluster::start(3).unwrap();
    let prefix = "restart";
    let timeout = Duration::from_millis(500);
    let engine = engine(&cluster.url(), prefix, timeout).await;
    let queues = spread_queues(&cluster, prefix);
    for q in &queues {
        engine.put_queue(q, config(), NOW).await.unwrap();
    }
    // Stay well within the cluster's node timeout (5 s), so the others never mark it failed.
    let victim = &cluster.nodes()[1];
    victim.kill();
    let started = Instant::now();
    let mut refused = 0;
    for q in &queues {
        match engine.send(q, vec![message("during")], NOW).await {
            Ok(_) => {}
            Err(EngineError::Unavailable(_)) => refused += 1,
            Err(other) => panic!("{other:?}"),
        }
    }
    assert!(refused > 0, "some queues live on the stopped master");
    assert!(
        started.elapsed() < timeout * (queues.len() as u32 + 1),
        "each call gave up within its timeout"
    );
    let ping = engine.ping().await;
    assert!(
        matches!(ping, Err(EngineError::Unavailable(_))),
        "ping with a master down: {ping:?}"
    );
    victim.restart().unwrap();

    // Without persistence the master comes back empty: its queues are gone, the others kept.
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut ok = true;
        for q in &queues {
            ok &= engine.put_queue(q, config(), NOW).await.is_ok()
                && engine.send(q, vec![message("after")], NOW).await.is_ok();
        }
        if ok {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the cluster never served every queue again"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    engine.ping().await.unwrap();
}

/// Each tenant's rate bucket lives under its own hash tag (so tenants' buckets land on
/// different masters) and two engines on the cluster share each one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limit_buckets_work_across_the_masters() {
    let cluster = shared_cluster();
    let prefix = unique_prefix("rate");
    let a = engine(&cluster.url(), &prefix, Duration::from_secs(5)).await;
    let b = engine(&cluster.url(), &prefix, Duration::from_secs(5)).await;
    let limit = RateLimit { rate: 1, burst: 2 };
    for i in 0..12 {
        let tenant = TenantId::parse(&format!("t{i}")).unwrap();
        assert!(a.admit(&tenant, limit, NOW).await.unwrap().allowed);
        assert!(b.admit(&tenant, limit, NOW).await.unwrap().allowed);
        let refused = a.admit(&tenant, limit, NOW).await.unwrap();
        assert!(!refused.allowed, "tenant t{i}");
        assert_eq!(refused.retry_after_ms, 1_000);
    }
}
