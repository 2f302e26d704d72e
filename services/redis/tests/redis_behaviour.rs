//! What only the Redis engine has to get right, beyond the conformance suite: scripts survive
//! `SCRIPT FLUSH`, one Redis call per hot operation, wake-ups across engines, concurrent
//! expiry, tenant-deletion fences, outages, the eviction-policy check, replicas with `WAIT`,
//! and durability with `appendfsync always` across a SIGKILL. Tests that change a server's state get a server of
//! their own; the others share one and isolate themselves by key prefix.

use sluice_engine::{
    Engine, EngineError, ManualClock, Messages, Millis, NewMessage, QueueConfig, QueueKey,
    QueueName, Queues, Quotas, RateLimit, RateLimiter, TenantId, Tenants, Upkeep,
};
use sluice_redis::{RedisEngine, RedisOptions};
use sluice_services::{
    ChangeVisibilityEntry, DeleteEntry, Limits, QueueConfigPatch, ReceiveRequest, SendEntry,
    SendRequest, Services,
};
use sluice_testkit::{shared_server, unique_prefix, RedisServer};
use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const NOW: Millis = 1_767_225_600_000;

fn key(name: &str) -> QueueKey {
    QueueKey::new(
        TenantId::parse("acme").unwrap(),
        QueueName::parse(name).unwrap(),
    )
}

fn message(body: &str, now: Millis) -> NewMessage {
    NewMessage {
        payload: None,
        message_id: format!("id-{body}"),
        body: body.to_owned(),
        attributes: BTreeMap::new(),
        visible_at: now,
        group_id: None,
        deduplication_id: None,
    }
}

fn config() -> QueueConfig {
    QueueConfig::with_defaults(262_144)
}

fn options(prefix: &str) -> RedisOptions {
    RedisOptions {
        key_prefix: prefix.to_owned(),
        ..RedisOptions::default()
    }
}

async fn engine(url: &str, prefix: &str) -> RedisEngine {
    RedisEngine::connect(url, options(prefix))
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}

/// Reads a server's MONITOR stream and answers the commands clients sent between two marks,
/// leaving out the commands scripts ran (`[0 lua]`).
struct Monitor {
    port: u16,
    reader: BufReader<TcpStream>,
    marks: u32,
}

impl Monitor {
    fn start(port: u16) -> Self {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        stream.write_all(b"MONITOR\r\n").unwrap();
        let mut monitor = Self {
            port,
            reader: BufReader::new(stream),
            marks: 0,
        };
        let mut ok = String::new();
        monitor.reader.read_line(&mut ok).unwrap();
        assert_eq!(ok.trim(), "+OK");
        monitor.mark();
        monitor
    }

    /// The client commands seen since the previous mark (their names, upper-cased).
    fn mark(&mut self) -> Vec<String> {
        self.marks += 1;
        let tag = format!("sluice-mark-{}", self.marks);
        sluice_testkit::query(self.port, &["ECHO", &tag]).unwrap();
        let mut seen = Vec::new();
        loop {
            let mut line = String::new();
            self.reader.read_line(&mut line).unwrap();
            if line.contains(&format!("\"ECHO\" \"{tag}\"")) {
                return seen;
            }
            if line.contains("[0 lua]") {
                continue;
            }
            if let Some(name) = line.split('"').nth(1) {
                let name = name.to_uppercase();
                // The wake-up subscription's heartbeat may land in any window.
                if name != "PING" {
                    seen.push(name);
                }
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn scripts_are_loaded_again_after_script_flush() {
    let server = RedisServer::start().unwrap();
    let engine = engine(&server.url(), "flush").await;
    let q = key("q");
    engine.put_queue(&q, config(), NOW).await.unwrap();
    engine.send(&q, vec![message("a", NOW)], NOW).await.unwrap();
    server.query(&["SCRIPT", "FLUSH"]).unwrap();
    engine.send(&q, vec![message("b", NOW)], NOW).await.unwrap();
    let got = engine.receive(&q, 10, 30, None, NOW).await.unwrap();
    assert_eq!(got.messages.len(), 2);
    // A restart without persistence forgets the scripts too (and everything else).
    server.restart().unwrap();
    let mut answer = engine.put_queue(&q, config(), NOW).await;
    for _ in 0..100 {
        if answer.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
        answer = engine.put_queue(&q, config(), NOW).await;
    }
    assert!(answer.unwrap().1, "created again on the empty server");
    engine.send(&q, vec![message("c", NOW)], NOW).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_receive_and_delete_batches_are_one_redis_call_each() {
    let server = RedisServer::start().unwrap();
    let options = RedisOptions {
        key_prefix: "calls".into(),
        // Long enough that the measured calls find the configuration cached.
        cache_ttl: Duration::from_secs(60),
        ..RedisOptions::default()
    };
    let engine: Arc<dyn Engine> =
        Arc::new(RedisEngine::connect(&server.url(), options).await.unwrap());
    let clock = ManualClock::new(NOW);
    let services = Services::new(engine.clone(), Arc::new(clock), Limits::default());
    let engine_of = |_: &Services| engine.clone();
    let tenant = TenantId::parse("acme").unwrap();
    services
        .put_queue(&tenant, "q", QueueConfigPatch::default())
        .await
        .unwrap();
    services.ensure_tenant(&tenant, None).await.unwrap();
    // Warm up: each script is loaded into this fresh server on its first use (NOSCRIPT, then
    // SCRIPT LOAD and EVALSHA again), once per server and not per call.
    let q = key("q");
    let warm = engine_of(&services);
    warm.send(&q, vec![message("warm", NOW)], NOW)
        .await
        .unwrap();
    let handle = warm.receive(&q, 1, 0, None, NOW).await.unwrap().messages[0]
        .receipt_handle
        .clone();
    warm.change_visibility(&q, &[(handle.clone(), 0)], NOW)
        .await
        .unwrap();
    warm.delete(&q, &[handle], NOW).await.unwrap();
    warm.purge(&q).await.unwrap();
    server.query(&["CONFIG", "RESETSTAT"]).unwrap();
    let mut monitor = Monitor::start(server.port());

    let entries = (0..10)
        .map(|i| SendEntry {
            id: format!("e{i}"),
            message: SendRequest {
                body: format!("m{i}"),
                ..SendRequest::default()
            },
        })
        .collect();
    services.ensure_tenant(&tenant, None).await.unwrap();
    let sent = services.send_batch(&tenant, "q", entries).await.unwrap();
    assert_eq!(sent.successful.len(), 10);
    assert_eq!(
        monitor.mark(),
        ["EVALSHA"],
        "send batch of 10 (and ensure_tenant)"
    );

    let got = services
        .receive(
            &tenant,
            "q",
            ReceiveRequest {
                max_messages: Some(10),
                visibility_timeout_seconds: Some(30),
                wait_seconds: Some(0),
                request_attempt_id: None,
            },
        )
        .await
        .unwrap();
    assert_eq!(got.len(), 10);
    assert_eq!(monitor.mark(), ["EVALSHA"], "receive of 10");

    let changes = got[..2]
        .iter()
        .enumerate()
        .map(|(i, m)| ChangeVisibilityEntry {
            id: format!("c{i}"),
            receipt_handle: m.receipt_handle.clone().unwrap(),
            visibility_timeout_seconds: 60,
        })
        .collect();
    let changed = services
        .change_visibility_batch(&tenant, "q", changes)
        .await
        .unwrap();
    assert_eq!(changed.successful.len(), 2);
    assert_eq!(monitor.mark(), ["EVALSHA"], "change visibility batch");

    let deletes = got
        .iter()
        .enumerate()
        .map(|(i, m)| DeleteEntry {
            id: format!("d{i}"),
            receipt_handle: m.receipt_handle.clone().unwrap(),
        })
        .collect();
    let deleted = services.delete_batch(&tenant, "q", deletes).await.unwrap();
    assert_eq!(deleted.successful.len(), 10);
    assert_eq!(monitor.mark(), ["EVALSHA"], "delete batch of 10");

    services
        .send(
            &tenant,
            "q",
            SendRequest {
                body: "one".into(),
                ..SendRequest::default()
            },
        )
        .await
        .unwrap();
    assert_eq!(monitor.mark(), ["EVALSHA"], "single send");

    // The same, counted by the server: five operations, five EVALSHA, no script (re)load.
    let stats = server.query(&["INFO", "commandstats"]).unwrap();
    let evalsha = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(evalsha, "5", "{stats}");
    assert!(!stats.contains("cmdstat_script"), "{stats}");
}

/// With a redrive policy and a retry backoff, a receive that moves nothing is still one call;
/// one that moves a message costs the move's steps on top (register, intent, apply, ack).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receive_with_a_redrive_policy_is_one_call_until_it_moves() {
    let server = RedisServer::start().unwrap();
    let options = RedisOptions {
        key_prefix: "dlq-calls".into(),
        cache_ttl: Duration::from_secs(60),
        ..RedisOptions::default()
    };
    let engine = RedisEngine::connect(&server.url(), options).await.unwrap();
    let (src, dlq) = (key("src"), key("dlq"));
    engine.put_queue(&dlq, config(), NOW).await.unwrap();
    let policy = QueueConfig {
        redrive_policy: Some(sluice_engine::RedrivePolicy {
            dead_letter_queue: dlq.name.clone(),
            max_receive_count: 1,
        }),
        retry_backoff: Some(sluice_engine::RetryBackoff {
            base_seconds: 1,
            max_seconds: 1,
            jitter: true,
        }),
        ..config()
    };
    engine.put_queue(&src, policy, NOW).await.unwrap();
    // Warm up every script this test runs (each is loaded once per server).
    engine
        .send(&src, vec![message("warm", NOW)], NOW)
        .await
        .unwrap();
    engine.receive(&src, 1, 0, None, NOW).await.unwrap();
    let warm = engine.receive(&src, 1, 0, None, NOW).await.unwrap();
    assert_eq!(warm.dead_lettered, 1);
    engine
        .send(&src, vec![message("m", NOW)], NOW)
        .await
        .unwrap();
    let mut monitor = Monitor::start(server.port());

    let got = engine.receive(&src, 1, 0, None, NOW).await.unwrap();
    assert_eq!(got.messages.len(), 1);
    assert_eq!(monitor.mark(), ["EVALSHA"], "a receive that moves nothing");
    let moved = engine.receive(&src, 1, 0, None, NOW).await.unwrap();
    assert_eq!((moved.messages.len(), moved.dead_lettered), (0, 1));
    assert_eq!(
        monitor.mark(),
        ["EVALSHA", "EVALSHA", "EVALSHA", "EVALSHA", "ZADD", "HDEL"],
        "receive, then register, intent, apply (filing the DLQ for expiry) and ack"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifo_send_receive_and_delete_batches_are_one_redis_call_each() {
    let server = RedisServer::start().unwrap();
    let options = RedisOptions {
        key_prefix: "fifo-calls".into(),
        cache_ttl: Duration::from_secs(60),
        ..RedisOptions::default()
    };
    let engine: Arc<dyn Engine> =
        Arc::new(RedisEngine::connect(&server.url(), options).await.unwrap());
    let services = Services::new(
        engine.clone(),
        Arc::new(ManualClock::new(NOW)),
        Limits::default(),
    );
    let tenant = TenantId::parse("acme").unwrap();
    services
        .put_queue(&tenant, "q.fifo", QueueConfigPatch::default())
        .await
        .unwrap();
    services.ensure_tenant(&tenant, None).await.unwrap();
    let fifo = |i: usize, group: &str| SendRequest {
        body: format!("m{i}"),
        group_id: Some(group.to_owned()),
        deduplication_id: Some(format!("d{i}")),
        ..SendRequest::default()
    };
    // Warm up: load every script once into this fresh server.
    let q = key("q.fifo");
    services
        .send(&tenant, "q.fifo", fifo(100, "warm"))
        .await
        .unwrap();
    let handle = engine
        .receive(&q, 1, 0, Some("warm"), NOW)
        .await
        .unwrap()
        .messages[0]
        .receipt_handle
        .clone();
    engine
        .change_visibility(&q, &[(handle.clone(), 0)], NOW)
        .await
        .unwrap();
    engine.delete(&q, &[handle], NOW).await.unwrap();
    server.query(&["CONFIG", "RESETSTAT"]).unwrap();
    let mut monitor = Monitor::start(server.port());

    let entries = (0..10)
        .map(|i| SendEntry {
            id: format!("e{i}"),
            message: fifo(i, ["a", "b", "c"][i % 3]),
        })
        .collect();
    let sent = services
        .send_batch(&tenant, "q.fifo", entries)
        .await
        .unwrap();
    assert_eq!(sent.successful.len(), 10);
    assert_eq!(monitor.mark(), ["EVALSHA"], "FIFO send batch of 10");

    let receive = ReceiveRequest {
        max_messages: Some(10),
        visibility_timeout_seconds: Some(30),
        wait_seconds: Some(0),
        request_attempt_id: Some("attempt".into()),
    };
    let got = services
        .receive(&tenant, "q.fifo", receive.clone())
        .await
        .unwrap();
    assert_eq!(got.len(), 10);
    assert_eq!(monitor.mark(), ["EVALSHA"], "FIFO receive of 10");
    let again = services.receive(&tenant, "q.fifo", receive).await.unwrap();
    assert_eq!(again.len(), 10);
    assert_eq!(
        monitor.mark(),
        ["EVALSHA"],
        "FIFO receive retried by attempt id"
    );

    let changes = got[..2]
        .iter()
        .enumerate()
        .map(|(i, m)| ChangeVisibilityEntry {
            id: format!("c{i}"),
            receipt_handle: m.receipt_handle.clone().unwrap(),
            visibility_timeout_seconds: 60,
        })
        .collect();
    let changed = services
        .change_visibility_batch(&tenant, "q.fifo", changes)
        .await
        .unwrap();
    assert_eq!(changed.successful.len(), 2);
    assert_eq!(monitor.mark(), ["EVALSHA"], "FIFO change visibility batch");

    let deletes = got
        .iter()
        .enumerate()
        .map(|(i, m)| DeleteEntry {
            id: format!("d{i}"),
            receipt_handle: m.receipt_handle.clone().unwrap(),
        })
        .collect();
    let deleted = services
        .delete_batch(&tenant, "q.fifo", deletes)
        .await
        .unwrap();
    assert_eq!(deleted.successful.len(), 10);
    assert_eq!(monitor.mark(), ["EVALSHA"], "FIFO delete batch of 10");

    // A duplicate send is one call too.
    let duplicate = services
        .send(&tenant, "q.fifo", fifo(0, "a"))
        .await
        .unwrap();
    assert!(duplicate.duplicate);
    assert_eq!(monitor.mark(), ["EVALSHA"], "FIFO duplicate send");

    let stats = server.query(&["INFO", "commandstats"]).unwrap();
    let evalsha = stats
        .lines()
        .find_map(|l| l.strip_prefix("cmdstat_evalsha:calls="))
        .and_then(|rest| rest.split(',').next())
        .unwrap_or_default()
        .to_owned();
    assert_eq!(evalsha, "6", "{stats}");
    assert!(!stats.contains("cmdstat_script"), "{stats}");
}

/// Engines that connect at the same moment agree on one handle key (the first `SET NX` wins),
/// so each accepts the others' handles; engines on another prefix (another store) do not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn engines_on_one_prefix_accept_each_others_handles() {
    let server = shared_server();
    let prefix = unique_prefix("hkey");
    let url = server.url();
    let engines: Vec<RedisEngine> =
        futures_util::future::join_all((0..4).map(|_| engine(&url, &prefix))).await;
    let q = key("q");
    engines[0].put_queue(&q, config(), NOW).await.unwrap();
    let bodies: Vec<String> = (0..engines.len()).map(|i| format!("m{i}")).collect();
    let sent: Vec<NewMessage> = bodies.iter().map(|b| message(b, NOW)).collect();
    engines[0].send(&q, sent, NOW).await.unwrap();
    let stranger = engine(&url, &unique_prefix("hkey-other")).await;
    for (i, issuer) in engines.iter().enumerate() {
        let got = issuer.receive(&q, 1, 30, None, NOW).await.unwrap();
        let handle = got.messages[0].receipt_handle.clone();
        // Another store's key refuses the handle.
        assert_eq!(
            sluice_engine::ReceiptHandle::decode(&handle, stranger.handle_key()),
            None
        );
        let next = &engines[(i + 1) % engines.len()];
        let answer = next
            .change_visibility(&q, &[(handle.clone(), 60)], NOW)
            .await
            .unwrap();
        assert_eq!(answer, vec![Ok(())], "a handle of engine {i}");
        let answer = next.delete(&q, &[handle], NOW).await.unwrap();
        assert_eq!(answer, vec![Ok(())], "a handle of engine {i}");
    }
    assert_eq!(
        engines[0].get_queue(&q, NOW).await.unwrap().unwrap().stats,
        Default::default()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_send_through_one_engine_wakes_a_listener_on_another() {
    let server = shared_server();
    let prefix = unique_prefix("wake");
    let a = Arc::new(engine(&server.url(), &prefix).await);
    let b = Arc::new(engine(&server.url(), &prefix).await);
    let q = key("q");
    a.put_queue(&q, config(), NOW).await.unwrap();

    let mut listener = a.listen(&q).await.unwrap();
    let started = Instant::now();
    b.send(&q, vec![message("x", NOW)], NOW).await.unwrap();
    tokio::time::timeout(Duration::from_millis(100), listener.changed())
        .await
        .expect("the listener on A fires within 100 ms of a send through B");
    eprintln!("cross-engine wake-up after {:?}", started.elapsed());

    // A visibility reset to 0 wakes too.
    let handle = a.receive(&q, 1, 30, None, NOW).await.unwrap().messages[0]
        .receipt_handle
        .clone();
    let mut listener = b.listen(&q).await.unwrap();
    a.change_visibility(&q, &[(handle, 0)], NOW).await.unwrap();
    tokio::time::timeout(Duration::from_millis(100), listener.changed())
        .await
        .expect("a visibility reset through A wakes B");

    // And a long poll through B's services is answered by a send through A.
    let clock = ManualClock::new(NOW);
    let services_b = Services::new(b.clone(), Arc::new(clock.clone()), Limits::default());
    let tenant = q.tenant.clone();
    b.receive(&q, 10, 3600, None, NOW).await.unwrap();
    let waiting = tokio::spawn(async move {
        services_b
            .receive(
                &tenant,
                "q",
                ReceiveRequest {
                    wait_seconds: Some(20),
                    ..ReceiveRequest::default()
                },
            )
            .await
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!waiting.is_finished());
    a.send(&q, vec![message("y", NOW)], NOW).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(1), waiting)
        .await
        .expect("woken across engines")
        .unwrap()
        .unwrap();
    assert_eq!(got[0].body, "y");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_expiry_from_two_engines_removes_each_message_once() {
    let server = shared_server();
    let prefix = unique_prefix("expire");
    let a = engine(&server.url(), &prefix).await;
    let b = engine(&server.url(), &prefix).await;
    let mut short = config();
    short.message_retention_seconds = 60;
    let mut total = 0;
    for (name, count) in [("big", 2_500), ("small", 7), ("empty", 0)] {
        let q = key(name);
        a.put_queue(&q, short.clone(), NOW).await.unwrap();
        for chunk in (0..count).collect::<Vec<_>>().chunks(10) {
            let batch = chunk
                .iter()
                .map(|i| message(&format!("{name}-{i}"), NOW))
                .collect();
            a.send(&q, batch, NOW).await.unwrap();
        }
        total += count;
    }
    // Not yet due: nothing goes.
    assert_eq!(a.expire(NOW + 59_999).await.unwrap(), 0);
    let later = NOW + 60_000;
    let (ra, rb) = tokio::join!(a.expire(later), b.expire(later));
    let (ra, rb) = (ra.unwrap(), rb.unwrap());
    eprintln!("engine A expired {ra}, engine B expired {rb}");
    assert_eq!(ra + rb, total, "each expired message counted exactly once");
    assert_eq!(a.expire(later + 1).await.unwrap(), 0);
    assert_eq!(b.expire(later + 1).await.unwrap(), 0);
    let info = b.get_queue(&key("big"), later).await.unwrap().unwrap();
    assert_eq!(
        info.stats.visible + info.stats.in_flight + info.stats.delayed,
        0
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_registry_entry_of_a_missing_queue_is_skipped_then_dropped() {
    let server = shared_server();
    let prefix = unique_prefix("registry");
    let engine = engine(&server.url(), &prefix).await;
    let (gone, kept) = (key("gone"), key("kept"));
    engine.put_queue(&gone, config(), NOW).await.unwrap();
    engine.put_queue(&kept, config(), NOW).await.unwrap();
    // As if a crash had struck between deleting the queue and dropping its registry entry.
    server
        .query(&["DEL", &format!("{{{prefix}:acme:gone}}:meta")])
        .unwrap();
    let names = |infos: Vec<sluice_engine::QueueInfo>| {
        infos
            .into_iter()
            .map(|i| i.name.as_str().to_owned())
            .collect::<Vec<_>>()
    };
    let tenant = gone.tenant.clone();
    assert_eq!(
        names(
            engine
                .list_queues(&tenant, "", None, 10, NOW)
                .await
                .unwrap()
        ),
        ["kept"]
    );
    assert_eq!(engine.count_queues(&tenant).await.unwrap(), 2);
    // Young entries may belong to a put_queue in progress: kept for a minute.
    engine.expire(NOW + 1_000).await.unwrap();
    assert_eq!(engine.count_queues(&tenant).await.unwrap(), 2);
    engine.expire(NOW + 61_000).await.unwrap();
    assert_eq!(engine.count_queues(&tenant).await.unwrap(), 1);
    assert!(engine.get_queue(&kept, NOW).await.unwrap().is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_queue_drops_only_its_own_registry_entry() {
    let server = shared_server();
    let prefix = unique_prefix("unregister");
    let engine = engine(&server.url(), &prefix).await;
    let q = key("q");
    let tenant = q.tenant.clone();
    engine.put_queue(&q, config(), NOW).await.unwrap();
    engine.put_queue(&q, config(), NOW + 1).await.unwrap();
    assert!(engine.delete_queue(&q).await.unwrap());
    assert_eq!(
        engine.count_queues(&tenant).await.unwrap(),
        0,
        "created, updated, deleted"
    );

    // As if another gateway registered a new incarnation between our deletion of the queue
    // and our unregistering it: its entry stays.
    engine.put_queue(&q, config(), NOW).await.unwrap();
    let registry = format!("{{{prefix}}}:queue-uids");
    server
        .query(&["HSET", &registry, "acme/q", "12345"])
        .unwrap();
    assert!(engine.delete_queue(&q).await.unwrap());
    assert_eq!(engine.count_queues(&tenant).await.unwrap(), 1);
    // That gateway's put_queue never came: the sweep drops the entry once it is old.
    engine.expire(NOW + 61_000).await.unwrap();
    assert_eq!(engine.count_queues(&tenant).await.unwrap(), 0);
    assert!(!engine.delete_queue(&q).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fenced_name_refuses_registrations_made_before_the_tenant_deletion() {
    let server = shared_server();
    let prefix = unique_prefix("fence");
    let engine = engine(&server.url(), &prefix).await;
    let q = key("q");
    let tenant = q.tenant.clone();
    engine.ensure_tenant(&tenant, None, NOW).await.unwrap();
    // As if a tenant deletion of generation 0 had fenced the name after our registration (of
    // generation 0) and before our creation reached the queue's slot.
    server
        .query(&["SET", &format!("{{{prefix}:acme:q}}:fence"), "0"])
        .unwrap();
    assert!(matches!(
        engine.put_queue(&q, config(), NOW).await,
        Err(EngineError::TenantDeleted { .. })
    ));
    assert_eq!(engine.get_queue(&q, NOW).await.unwrap(), None);
    // A deletion begins (the generation moves on), then stops midway: its mark stays, so
    // creations stay refused, until the deletion is retried.
    assert!(engine.delete_tenant(&tenant, NOW).await.unwrap());
    server
        .query(&[
            "HSET",
            &format!("{{{prefix}}}:tenant-deleting"),
            "acme",
            "1",
        ])
        .unwrap();
    engine
        .ensure_tenant(&tenant, Some(NOW + 1_000), NOW + 1_000)
        .await
        .unwrap();
    assert!(matches!(
        engine.put_queue(&q, config(), NOW).await,
        Err(EngineError::TenantDeleted { .. })
    ));
    assert!(engine.delete_tenant(&tenant, NOW + 2_000).await.unwrap());
    engine
        .ensure_tenant(&tenant, Some(NOW + 3_000), NOW + 3_000)
        .await
        .unwrap();
    // Registrations of the new generation pass the old fence.
    let (_, created) = engine.put_queue(&q, config(), NOW + 3_000).await.unwrap();
    assert!(created);
    assert_eq!(engine.count_queues(&tenant).await.unwrap(), 1);
}

fn unavailable<T: std::fmt::Debug>(answer: Result<T, EngineError>) -> bool {
    matches!(answer, Err(EngineError::Unavailable(_)))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_calls_fail_fast_and_recover_by_themselves() {
    let server = RedisServer::start().unwrap();
    let timeout = Duration::from_millis(500);
    let options = RedisOptions {
        key_prefix: "outage".into(),
        command_timeout: timeout,
        cache_ttl: Duration::ZERO,
        ..RedisOptions::default()
    };
    let a = RedisEngine::connect(&server.url(), options.clone())
        .await
        .unwrap();
    let b = RedisEngine::connect(&server.url(), options.clone())
        .await
        .unwrap();
    let q = key("q");
    a.put_queue(&q, config(), NOW).await.unwrap();

    // A hung server: every call gives up after the timeout.
    server.freeze().unwrap();
    let started = Instant::now();
    assert!(unavailable(a.send(&q, vec![message("x", NOW)], NOW).await));
    assert!(unavailable(a.receive(&q, 1, 30, None, NOW).await));
    assert!(unavailable(a.ping().await));
    let elapsed = started.elapsed();
    assert!(
        elapsed < 3 * timeout + Duration::from_secs(2),
        "three calls took {elapsed:?}"
    );
    server.thaw().unwrap();

    // A dead server: refused at once (or within the timeout while reconnecting).
    server.kill();
    for _ in 0..3 {
        let started = Instant::now();
        assert!(unavailable(a.send(&q, vec![message("y", NOW)], NOW).await));
        assert!(unavailable(a.queue_config(&q).await));
        assert!(unavailable(a.expire(NOW).await));
        assert!(started.elapsed() < 3 * timeout + Duration::from_secs(2));
    }
    assert!(unavailable(
        RedisEngine::connect(&server.url(), options.clone()).await
    ));

    // Back (empty: no persistence): the same engines work again without help.
    server.restart().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match a.put_queue(&q, config(), NOW).await {
            Ok(_) => break,
            Err(e) => assert!(Instant::now() < deadline, "never recovered: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // `b` made no call while the server was away, so it finds out about the
    // broken connection only now and may need a moment to reconnect.
    let deadline = Instant::now() + Duration::from_secs(10);
    while let Err(e) = b.ping().await {
        assert!(Instant::now() < deadline, "b never recovered: {e}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.send(&q, vec![message("z", NOW)], NOW).await.unwrap();
    assert_eq!(
        b.receive(&q, 10, 30, None, NOW)
            .await
            .unwrap()
            .messages
            .len(),
        1
    );
    // The wake-up subscription came back too.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let mut listener = b.listen(&q).await.unwrap();
        a.send(&q, vec![message("w", NOW)], NOW).await.unwrap();
        if tokio::time::timeout(Duration::from_millis(200), listener.changed())
            .await
            .is_ok()
        {
            break;
        }
        assert!(Instant::now() < deadline, "wake-ups never came back");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuses_a_server_that_may_evict() {
    let server = RedisServer::start_with(&["--maxmemory-policy", "allkeys-lru"]).unwrap();
    match RedisEngine::connect(&server.url(), options("evict")).await {
        Err(EngineError::Internal(why)) => {
            assert!(why.contains("maxmemory-policy allkeys-lru"), "{why}");
            assert!(why.contains("noeviction"), "{why}");
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
    let allowed = RedisOptions {
        allow_eviction: true,
        ..options("evict")
    };
    assert!(RedisEngine::connect(&server.url(), allowed).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wait_replicas_confirms_writes_or_answers_unavailable() {
    let primary = RedisServer::start().unwrap();
    let port = primary.port().to_string();
    let replica = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]).unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while !replica
        .query(&["INFO", "replication"])
        .unwrap()
        .contains("master_link_status:up")
    {
        assert!(Instant::now() < deadline, "the replica never synced");
        std::thread::sleep(Duration::from_millis(50));
    }
    let one = RedisOptions {
        wait_replicas: Some((1, Duration::from_secs(2))),
        ..options("wait")
    };
    let engine = RedisEngine::connect(&primary.url(), one).await.unwrap();
    let q = key("q");
    engine.put_queue(&q, config(), NOW).await.unwrap();
    engine.send(&q, vec![message("a", NOW)], NOW).await.unwrap();
    // The replica has it once the send answered.
    let on_replica = replica.query(&["ZCARD", "{wait:acme:q}:sent"]).unwrap();
    assert_eq!(on_replica, "1");

    let two = RedisOptions {
        wait_replicas: Some((2, Duration::from_millis(200))),
        ..options("wait")
    };
    let greedy = RedisEngine::connect(&primary.url(), two).await.unwrap();
    let started = Instant::now();
    let answer = greedy.send(&q, vec![message("b", NOW)], NOW).await;
    assert!(unavailable(answer), "only one replica exists");
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn with_appendfsync_always_every_acknowledged_send_survives_sigkill() {
    let server = Arc::new(
        RedisServer::start_with(&["--appendonly", "yes", "--appendfsync", "always"]).unwrap(),
    );
    let options = RedisOptions {
        key_prefix: "durable".into(),
        command_timeout: Duration::from_secs(1),
        ..RedisOptions::default()
    };
    let engine = Arc::new(RedisEngine::connect(&server.url(), options).await.unwrap());
    let q = key("q");
    let mut retention = config();
    retention.message_retention_seconds = 1_209_600;
    engine.put_queue(&q, retention, NOW).await.unwrap();

    let acked = Arc::new(Mutex::new(HashSet::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let mut senders = Vec::new();
    for task in 0..4 {
        let (engine, acked, stop, q) = (engine.clone(), acked.clone(), stop.clone(), q.clone());
        senders.push(tokio::spawn(async move {
            let mut failures = 0;
            for n in 0.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                let batch: Vec<NewMessage> = (0..3)
                    .map(|i| message(&format!("t{task}-{n}-{i}"), NOW))
                    .collect();
                let bodies: Vec<String> = batch.iter().map(|m| m.body.clone()).collect();
                match engine.send(&q, batch, NOW).await {
                    Ok(answers) => {
                        let mut acked = acked.lock().unwrap();
                        for (body, answer) in bodies.into_iter().zip(answers) {
                            if answer.is_ok() {
                                acked.insert(body);
                            }
                        }
                    }
                    Err(_) => {
                        failures += 1;
                        tokio::time::sleep(Duration::from_millis(20)).await;
                    }
                }
            }
            failures
        }));
    }
    tokio::time::sleep(Duration::from_millis(400)).await;
    let before_kill = acked.lock().unwrap().len();
    server.kill();
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.restart().unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let mut failures = 0;
    for s in senders {
        failures += s.await.unwrap();
    }
    let acked = acked.lock().unwrap().clone();
    eprintln!(
        "acknowledged {} sends ({before_kill} before the kill), {failures} failed calls",
        acked.len()
    );
    assert!(
        before_kill > 0 && failures > 0,
        "the kill happened mid-stream"
    );

    let mut stored = HashSet::new();
    loop {
        let got = engine.receive(&q, 10, 3600, None, NOW).await.unwrap();
        if got.messages.is_empty() {
            break;
        }
        stored.extend(got.messages.into_iter().map(|m| m.message.body));
    }
    let lost: Vec<&String> = acked.difference(&stored).collect();
    assert!(lost.is_empty(), "acknowledged but lost: {lost:?}");
}

fn used_memory(server: &RedisServer) -> u64 {
    let info = server.query(&["INFO", "memory"]).unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_redis_refuses_sends_but_lets_consumers_drain_it() {
    let server = RedisServer::start().unwrap();
    let engine = engine(&server.url(), "full").await;
    let q = key("q");
    engine.put_queue(&q, config(), NOW).await.unwrap();
    engine
        .send(&q, vec![message("warm", NOW)], NOW)
        .await
        .unwrap();
    let used = used_memory(&server);
    let limit = (used + 512 * 1024).to_string();
    server
        .query(&["CONFIG", "SET", "maxmemory", &limit])
        .unwrap();
    let big = "x".repeat(64 * 1024);
    let mut accepted = 0;
    let refusal = loop {
        let mut m = message(&format!("big-{accepted}"), NOW);
        m.body = big.clone();
        match engine.send(&q, vec![m], NOW).await {
            Ok(_) => accepted += 1,
            Err(e) => break e,
        }
        assert!(accepted < 1000, "maxmemory never reached");
    };
    assert!(
        matches!(&refusal, EngineError::Unavailable(why) if why.contains("OOM")),
        "{refusal:?}"
    );
    // Make sure Redis stays over its limit while consumers work (the refused send's own
    // arguments were freed with it), whatever the allocator does.
    let used = used_memory(&server);
    server
        .query(&[
            "CONFIG",
            "SET",
            "maxmemory",
            &(used - 128 * 1024).to_string(),
        ])
        .unwrap();
    assert!(engine
        .send(&q, vec![message("small", NOW)], NOW)
        .await
        .is_err());
    // Consumers still receive and delete (their scripts may run over the limit).
    let mut drained = 0;
    loop {
        let got = engine.receive(&q, 10, 30, None, NOW).await.unwrap();
        if got.messages.is_empty() {
            break;
        }
        let handles: Vec<String> = got.messages.into_iter().map(|m| m.receipt_handle).collect();
        drained += handles.len();
        for answer in engine.delete(&q, &handles, NOW).await.unwrap() {
            answer.unwrap();
        }
    }
    assert_eq!(drained, accepted + 1);
    engine
        .send(&q, vec![message("after", NOW)], NOW)
        .await
        .unwrap();
}

/// Two engines on one prefix share a tenant's bucket (GCRA in `rate_limit.lua`): the burst at
/// once across both, then one request per interval; the key expires once the bucket would be
/// full again. A tenant without `requests_per_second` costs no Redis call at all, and a limited
/// one exactly one script call per request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_are_shared_by_engines_and_leave_no_key_when_idle() {
    let server = RedisServer::start().unwrap();
    let (a, b) = (
        engine(&server.url(), "rate").await,
        engine(&server.url(), "rate").await,
    );
    let tenant = TenantId::parse("acme").unwrap();
    let limit = RateLimit { rate: 5, burst: 5 };
    for n in 0..5 {
        let by = if n % 2 == 0 { &a } else { &b };
        assert!(by.admit(&tenant, limit, NOW).await.unwrap().allowed, "{n}");
    }
    let refused = b.admit(&tenant, limit, NOW).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after_ms, 200);
    assert_eq!(
        a.admit(&tenant, limit, NOW + 150)
            .await
            .unwrap()
            .retry_after_ms,
        50
    );
    assert!(a.admit(&tenant, limit, NOW + 200).await.unwrap().allowed);
    assert!(!b.admit(&tenant, limit, NOW + 200).await.unwrap().allowed);
    // The TAT is now 1 s ahead of the last admission: the key lives that long, no longer.
    let pttl: i64 = server
        .query(&["PTTL", "{rate:acme}:rate"])
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!((1..=1_000).contains(&pttl), "PTTL {pttl}");

    let engine: Arc<dyn Engine> = Arc::new(engine(&server.url(), "rate").await);
    let services = Services::new(
        engine.clone(),
        Arc::new(ManualClock::new(NOW)),
        Limits::default(),
    )
    .with_rate_limiter(Arc::new(b));
    let free = TenantId::parse("free").unwrap();
    let quotas = services.ensure_tenant(&free, None).await.unwrap();
    services.admit_request(&free, &quotas).await.unwrap();
    let limited = Quotas {
        requests_per_second: Some(1000),
        ..Quotas::default()
    };
    let busy = TenantId::parse("busy").unwrap();
    // Load the script on this server before counting.
    services.admit_request(&busy, &limited).await.unwrap();
    let mut monitor = Monitor::start(server.port());
    let quotas = services.ensure_tenant(&free, None).await.unwrap();
    services.admit_request(&free, &quotas).await.unwrap();
    assert_eq!(monitor.mark(), Vec::<String>::new(), "an unlimited tenant");
    services.admit_request(&busy, &limited).await.unwrap();
    assert_eq!(monitor.mark(), ["EVALSHA"], "a limited tenant");
}

/// The expiry sweep asks the due index which queues are due: with 1,000 idle queues, a round
/// after the first runs no script at all, and a round once a message's retention has ended
/// runs scripts on that message's queue alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expiry_round_costs_what_is_due_not_what_exists() {
    let server = RedisServer::start().unwrap();
    let engine = engine(&server.url(), "due-index").await;
    let retention = 60;
    let short = QueueConfig {
        message_retention_seconds: retention,
        ..config()
    };
    for i in 0..1000 {
        engine
            .put_queue(&key(&format!("idle-{i}")), short.clone(), NOW)
            .await
            .unwrap();
    }
    engine
        .put_queue(&key("busy"), short.clone(), NOW)
        .await
        .unwrap();
    engine
        .send(&key("busy"), vec![message("old", NOW)], NOW)
        .await
        .unwrap();
    // The first round sweeps every queue: each was filed as due when it was registered.
    assert_eq!(engine.expire(NOW + 1).await.unwrap(), 0);

    let mut monitor = Monitor::start(server.port());
    assert_eq!(engine.expire(NOW + 2_000).await.unwrap(), 0);
    let idle_round = monitor.mark();
    assert!(
        !idle_round.iter().any(|c| c == "EVALSHA" || c == "EVAL"),
        "nothing is due, no script runs: {idle_round:?}"
    );
    assert!(idle_round.len() <= 3, "a couple of reads: {idle_round:?}");

    let scripts = |round: &[String]| round.iter().filter(|c| *c == "EVALSHA").count();
    // The busy queue is due when its message's retention ends: its script alone runs.
    let expired_at = NOW + u64::from(retention) * 1000;
    assert_eq!(engine.expire(expired_at).await.unwrap(), 1);
    assert_eq!(scripts(&monitor.mark()), 1, "one due queue, one script");
    // The idle ones were filed a retention after their sweep (nothing sent since could
    // expire sooner): due now, once each.
    assert_eq!(
        engine
            .expire(NOW + 1 + u64::from(retention) * 1000)
            .await
            .unwrap(),
        0
    );
    let idle_due = scripts(&monitor.mark());
    assert!((1000..=1001).contains(&idle_due), "{idle_due} scripts");
    assert_eq!(engine.expire(expired_at + 2_000).await.unwrap(), 0);
    assert_eq!(scripts(&monitor.mark()), 0, "and then nothing again");
}
