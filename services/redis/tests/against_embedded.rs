//! A differential test: random sequences of send, receive, delete, change-visibility, peek,
//! stats, purge, expiry and moving time, applied to the Redis engine and to the embedded
//! engine (the reference), must give the same answers. Receipt handles differ between engines,
//! so each engine's handles are kept side by side and addressed by position. The same runs on
//! FIFO queues, with message groups, colliding deduplication ids (both scopes) and receive
//! request attempt ids.

use proptest::prelude::*;
use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{
    DeduplicationScope, Engine, HandleError, MessageState, Messages, Millis, NewMessage,
    QueueConfig, QueueKey, QueueName, Queues, StoredMessage, TenantId, Upkeep,
};
use sluice_redis::{RedisEngine, RedisOptions};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

const START: Millis = 1_767_225_600_000;

#[derive(Debug, Clone)]
enum Op {
    /// Per message: its group and deduplication id (FIFO queues only), as small numbers.
    Send {
        messages: Vec<(u8, u8)>,
        delay_ms: Millis,
    },
    Receive {
        max: usize,
        visibility_s: u32,
        attempt: Option<u8>,
    },
    Delete {
        handle: usize,
    },
    ChangeVisibility {
        handle: usize,
        timeout_s: u32,
    },
    Peek(MessageState),
    Stats,
    Advance(Millis),
    Expire,
    Purge,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (
            prop::collection::vec((0..3u8, 0..8u8), 1..4),
            prop_oneof![Just(0), Just(5_000), Just(45_000)]
        )
            .prop_map(|(messages, delay_ms)| Op::Send { messages, delay_ms }),
        4 => (
            1..5usize,
            prop_oneof![Just(0), Just(10), Just(30)],
            prop_oneof![3 => Just(None), 1 => (0..2u8).prop_map(Some)]
        )
            .prop_map(|(max, visibility_s, attempt)| Op::Receive { max, visibility_s, attempt }),
        2 => (0..16usize).prop_map(|handle| Op::Delete { handle }),
        2 => (0..16usize, prop_oneof![Just(0), Just(5), Just(100)])
            .prop_map(|(handle, timeout_s)| Op::ChangeVisibility { handle, timeout_s }),
        1 => prop_oneof![
            Just(MessageState::Visible),
            Just(MessageState::InFlight),
            Just(MessageState::Delayed)
        ]
        .prop_map(Op::Peek),
        1 => Just(Op::Stats),
        3 => prop_oneof![Just(1_000), Just(10_000), Just(30_000), Just(70_000), Just(150_000)]
            .prop_map(Op::Advance),
        1 => Just(Op::Expire),
        1 => Just(Op::Purge),
    ]
}

struct Engines {
    runtime: tokio::runtime::Runtime,
    redis: RedisEngine,
    embedded: EmbeddedEngine,
    _dir: tempfile::TempDir,
}

/// The engines of one kind of run. Each proptest has its own (they run in parallel, and an
/// expiry sweep reaches every queue of an engine, at the sweeping run's clock).
fn engines(kind: Kind) -> &'static Engines {
    static ENGINES: [OnceLock<Engines>; 3] = [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    ENGINES[kind as usize].get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let server = sluice_testkit::shared_server();
        let options = RedisOptions {
            key_prefix: sluice_testkit::unique_prefix("model"),
            ..RedisOptions::default()
        };
        let redis = runtime
            .block_on(RedisEngine::connect(&server.url(), options))
            .unwrap();
        let dir = tempfile::tempdir().unwrap();
        let embedded = EmbeddedEngine::open(dir.path(), EmbeddedOptions::default()).unwrap();
        Engines {
            runtime,
            redis,
            embedded,
            _dir: dir,
        }
    })
}

/// What is compared of a stored message: everything but the engine-specific handle.
type View = (
    String,
    Millis,
    u32,
    Option<Millis>,
    u64,
    Option<String>,
    Option<String>,
);

fn view(m: &StoredMessage) -> View {
    (
        m.body.clone(),
        m.sent_at,
        m.receive_count,
        m.first_received_at,
        m.seq,
        m.group_id.clone(),
        m.deduplication_id.clone(),
    )
}

/// The queue kinds the same operations run on.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Kind {
    Standard,
    /// FIFO, deduplication ids unique per queue.
    Fifo,
    /// FIFO, deduplication ids unique per message group.
    FifoByGroup,
}

async fn run(kind: Kind, ops: Vec<Op>) -> Result<(), TestCaseError> {
    static CASE: AtomicU64 = AtomicU64::new(0);
    let e = engines(kind);
    let n = CASE.fetch_add(1, Ordering::Relaxed);
    let name = match kind {
        Kind::Standard => format!("q{n}"),
        Kind::Fifo | Kind::FifoByGroup => format!("q{n}.fifo"),
    };
    let key = QueueKey::new(
        TenantId::parse("model").unwrap(),
        QueueName::parse(&name).unwrap(),
    );
    let fifo = kind != Kind::Standard;
    let mut config = QueueConfig::with_defaults(262_144);
    config.message_retention_seconds = 60;
    if kind == Kind::FifoByGroup {
        config.deduplication_scope = DeduplicationScope::MessageGroup;
    }
    let engines: [&dyn Engine; 2] = [&e.redis, &e.embedded];
    for engine in engines {
        engine.put_queue(&key, config.clone(), START).await.unwrap();
    }
    let mut now = START;
    let mut sent = 0;
    // handles[i] = (redis handle, embedded handle) of the i-th delivery.
    let mut handles: Vec<(String, String)> = Vec::new();
    for (step, op) in ops.into_iter().enumerate() {
        let at = format!("step {step}: {op:?}");
        match op {
            Op::Send { messages, delay_ms } => {
                let batch: Vec<NewMessage> = messages
                    .iter()
                    .enumerate()
                    .map(|(i, &(group, dedup))| NewMessage {
                        payload: None,
                        message_id: format!("id-{}", sent + i),
                        body: format!("m{}", sent + i),
                        attributes: BTreeMap::new(),
                        visible_at: now + delay_ms,
                        group_id: fifo.then(|| format!("g{group}")),
                        deduplication_id: fifo.then(|| format!("d{dedup}")),
                    })
                    .collect();
                sent += messages.len();
                let r = e.redis.send(&key, batch.clone(), now).await.unwrap();
                let m = e.embedded.send(&key, batch, now).await.unwrap();
                prop_assert_eq!(r, m, "{}", at);
            }
            Op::Receive {
                max,
                visibility_s,
                attempt,
            } => {
                let attempt = attempt.map(|a| format!("attempt-{a}"));
                let attempt = attempt.as_deref();
                let r = e
                    .redis
                    .receive(&key, max, visibility_s, attempt, now)
                    .await
                    .unwrap();
                let m = e
                    .embedded
                    .receive(&key, max, visibility_s, attempt, now)
                    .await
                    .unwrap();
                let rv: Vec<_> = r.messages.iter().map(|x| view(&x.message)).collect();
                let mv: Vec<_> = m.messages.iter().map(|x| view(&x.message)).collect();
                prop_assert_eq!(rv, mv, "{}", at);
                // A hint: on FIFO queues the engines may name different (early) instants.
                if !fifo {
                    prop_assert_eq!(r.next_visible_at, m.next_visible_at, "{}", at);
                }
                handles.extend(
                    r.messages
                        .into_iter()
                        .zip(m.messages)
                        .map(|(a, b)| (a.receipt_handle, b.receipt_handle)),
                );
            }
            Op::Delete { handle } => {
                let Some((rh, mh)) = handles.get(handle).cloned() else {
                    continue;
                };
                let r = e.redis.delete(&key, &[rh], now).await.unwrap();
                let m = e.embedded.delete(&key, &[mh], now).await.unwrap();
                prop_assert_eq!(r, m, "{}", at);
            }
            Op::ChangeVisibility { handle, timeout_s } => {
                let Some((rh, mh)) = handles.get(handle).cloned() else {
                    continue;
                };
                let r = e
                    .redis
                    .change_visibility(&key, &[(rh, timeout_s)], now)
                    .await
                    .unwrap();
                let m = e
                    .embedded
                    .change_visibility(&key, &[(mh, timeout_s)], now)
                    .await
                    .unwrap();
                prop_assert_eq!(r, m, "{}", at);
            }
            Op::Peek(state) => {
                let r = e.redis.peek(&key, state, 100, now).await.unwrap();
                let m = e.embedded.peek(&key, state, 100, now).await.unwrap();
                prop_assert_eq!(r, m, "{}", at);
            }
            Op::Stats => {
                let r = e.redis.get_queue(&key, now).await.unwrap().unwrap();
                let m = e.embedded.get_queue(&key, now).await.unwrap().unwrap();
                prop_assert_eq!(r.stats, m.stats, "{}", at);
            }
            Op::Advance(ms) => now += ms,
            // Counts may differ (the Redis engine's receive also sweeps expired messages it did
            // not meet), so compare what is left, not how many went.
            Op::Expire => {
                e.redis.expire(now).await.unwrap();
                e.embedded.expire(now).await.unwrap();
            }
            Op::Purge => {
                e.redis.purge(&key).await.unwrap();
                e.embedded.purge(&key).await.unwrap();
            }
        }
    }
    let r = e.redis.get_queue(&key, now).await.unwrap().unwrap();
    let m = e.embedded.get_queue(&key, now).await.unwrap().unwrap();
    prop_assert_eq!(r.stats, m.stats, "final stats");
    // A garbled handle and one of a deleted queue incarnation are invalid on both.
    let garbage = vec!["garbage".to_owned()];
    prop_assert_eq!(
        e.redis.delete(&key, &garbage, now).await.unwrap(),
        vec![Err(HandleError::Invalid)]
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn the_redis_engine_answers_like_the_embedded_engine(ops in prop::collection::vec(op(), 1..40)) {
        engines(Kind::Standard).runtime.block_on(run(Kind::Standard, ops))?;
    }

    #[test]
    fn on_fifo_queues_too(ops in prop::collection::vec(op(), 1..40)) {
        engines(Kind::Fifo).runtime.block_on(run(Kind::Fifo, ops))?;
    }

    #[test]
    fn on_fifo_queues_with_deduplication_per_group_too(ops in prop::collection::vec(op(), 1..40)) {
        engines(Kind::FifoByGroup).runtime.block_on(run(Kind::FifoByGroup, ops))?;
    }
}
