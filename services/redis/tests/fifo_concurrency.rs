//! FIFO under concurrency: 16 consumers spread over four engines (four gateways) on one shared
//! `redis-server`, 50 groups, 10,000 messages sent while they consume, random visibility
//! timeouts that run out while a consumer is slow, and random consumer crashes (messages
//! received and never deleted). Time is simulated: one clock shared by everyone, advanced by a
//! driver task, read by each call as its `now`. Some consumers give the first message of a
//! batch back (visibility 0) and delete the rest, so a group's head can be visible while later
//! messages of it are in flight: the group must stay locked.
//!
//! Checked afterwards, from what the engines answered:
//!
//! * every message is delivered (and finally deleted; the queue ends empty);
//! * for every group, the order of first deliveries (receive count 1) is the send order;
//! * no group ever has messages in flight in two receives at once: when a receive delivers a
//!   message of a group, every earlier delivery of that group by another receive had timed out
//!   by the receive's `now`, or had been deleted or given back (visibility 0);
//! * nothing is skipped: when a receive delivers a message, every earlier message of its group
//!   came in the same receive before it or had been deleted.
//!
//! Redis executes scripts one at a time, so every call has a place in one total order, which
//! the test does not observe directly. Deliveries are ordered exactly by the delivery counter
//! in their receipt handles (a per-queue counter incremented inside the receive script). A
//! delete is taken to have happened before a receive only if it started before that receive
//! returned (a global event counter), which is the most the engine could have seen; so the
//! checks are sound (never blame a correct engine) whatever the interleaving.

use sluice_engine::{
    Engine, HandleError, Millis, NewMessage, QueueConfig, QueueKey, QueueName, ReceiptHandle,
    TenantId,
};
use sluice_redis::{RedisEngine, RedisOptions};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const GROUPS: usize = 50;
const MESSAGES: usize = 10_000;
const CONSUMERS: usize = 16;
const GATEWAYS: usize = 4;
const START: Millis = 1_767_225_600_000;
/// Simulated milliseconds the driver adds per real millisecond.
const SPEED: Millis = 20;
const DEADLINE: Duration = Duration::from_secs(120);

/// SplitMix64: small, seedable, good enough to pick fates.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// One message as one receive delivered it.
#[derive(Debug, Clone)]
struct Delivery {
    seq: u64,
    group: String,
    receive_count: u32,
    /// The queue's delivery counter: the order of deliveries in Redis.
    counter: u64,
    /// Which receive call (all deliveries of one call share it).
    call: u64,
    now: Millis,
    hidden_until: Millis,
    /// The event number when the receive returned.
    returned: u64,
    handle: String,
}

#[derive(Default)]
struct Log {
    deliveries: Vec<Delivery>,
    /// Handle → the event number when a delete of it that answered success started.
    deleted: HashMap<String, u64>,
    /// Handle → the event number when a visibility change to 0 of it that answered success
    /// started.
    released: HashMap<String, u64>,
    /// Seqs deleted successfully by some handle.
    gone: HashSet<u64>,
    stale_answers: u64,
    crashes: u64,
    slow: u64,
    nacks: u64,
}

struct Shared {
    clock: AtomicU64,
    events: AtomicU64,
    calls: AtomicU64,
    sent_all: AtomicBool,
    /// Set once every consumer ended: the driver stops.
    stop: AtomicBool,
    log: Mutex<Log>,
}

impl Shared {
    fn now(&self) -> Millis {
        self.clock.load(Ordering::SeqCst)
    }

    fn event(&self) -> u64 {
        self.events.fetch_add(1, Ordering::SeqCst)
    }

    fn done(&self) -> bool {
        self.sent_all.load(Ordering::SeqCst) && self.log.lock().unwrap().gone.len() >= MESSAGES
    }

    /// Sleeps (really) until the simulated clock reaches `at`.
    async fn wait_until(&self, at: Millis) {
        while self.now() < at {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

async fn consume(engine: Arc<RedisEngine>, q: QueueKey, shared: Arc<Shared>, seed: u64) {
    let mut rng = Rng(seed);
    while !shared.done() {
        let max = 1 + rng.below(10) as usize;
        let visibility_s = 1 + rng.below(5) as u32;
        let now = shared.now();
        let call = shared.calls.fetch_add(1, Ordering::SeqCst);
        let outcome = engine
            .receive(&q, max, visibility_s, None, now)
            .await
            .unwrap();
        let returned = shared.event();
        if outcome.messages.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let hidden_until = now + Millis::from(visibility_s) * 1000;
        let handles: Vec<String> = outcome
            .messages
            .iter()
            .map(|m| m.receipt_handle.clone())
            .collect();
        {
            let mut log = shared.log.lock().unwrap();
            for m in &outcome.messages {
                let handle = ReceiptHandle::decode(&m.receipt_handle, engine.handle_key()).unwrap();
                log.deliveries.push(Delivery {
                    seq: m.message.seq,
                    group: m.message.group_id.clone().unwrap(),
                    receive_count: m.message.receive_count,
                    counter: handle.delivery >> 20,
                    call,
                    now,
                    hidden_until,
                    returned,
                    handle: m.receipt_handle.clone(),
                });
            }
        }
        // Fates: 8% crash after deleting a random prefix of the batch (the rest is received
        // and never deleted); 12% are slow, past the visibility timeout, then delete it all
        // (stale where another consumer got the messages again meanwhile); 10% give the
        // first message back (visibility 0: its group stays locked while the rest is in
        // flight) and delete the rest; the others delete at once.
        let fate = rng.below(100);
        let mut first = 0;
        let keep = if fate < 8 {
            shared.log.lock().unwrap().crashes += 1;
            rng.below(handles.len() as u64) as usize
        } else if (20..30).contains(&fate) {
            let started = shared.event();
            let answers = engine
                .change_visibility(&q, &[(handles[0].clone(), 0)], shared.now())
                .await
                .unwrap();
            let mut log = shared.log.lock().unwrap();
            log.nacks += 1;
            match answers[0] {
                Ok(()) => {
                    log.released.insert(handles[0].clone(), started);
                }
                // This task may have been held up past the timeout, and the message
                // delivered again meanwhile.
                Err(HandleError::Stale) => log.stale_answers += 1,
                Err(e) => panic!("visibility change answered {e:?}"),
            }
            first = 1;
            handles.len()
        } else {
            if fate < 20 {
                shared.log.lock().unwrap().slow += 1;
                shared.wait_until(hidden_until + rng.below(2_000)).await;
            }
            handles.len()
        };
        if keep <= first {
            continue;
        }
        let batch = &handles[first..keep];
        let started = shared.event();
        let answers = engine.delete(&q, batch, shared.now()).await.unwrap();
        let mut log = shared.log.lock().unwrap();
        for ((handle, answer), m) in batch.iter().zip(answers).zip(&outcome.messages[first..]) {
            match answer {
                Ok(()) => {
                    log.deleted.insert(handle.clone(), started);
                    log.gone.insert(m.message.seq);
                }
                Err(HandleError::Stale) => log.stale_answers += 1,
                Err(e) => panic!("delete answered {e:?}"),
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifo_order_and_group_locking_hold_under_concurrency() {
    let server = sluice_testkit::shared_server();
    let prefix = sluice_testkit::unique_prefix("fifo-concurrency");
    let mut engines = Vec::new();
    for _ in 0..GATEWAYS {
        let options = RedisOptions {
            key_prefix: prefix.clone(),
            ..RedisOptions::default()
        };
        engines.push(Arc::new(
            RedisEngine::connect(&server.url(), options).await.unwrap(),
        ));
    }
    let q = QueueKey::new(
        TenantId::parse("acme").unwrap(),
        QueueName::parse("orders.fifo").unwrap(),
    );
    engines[0]
        .put_queue(&q, QueueConfig::with_defaults(262_144), START)
        .await
        .unwrap();
    let shared = Arc::new(Shared {
        clock: AtomicU64::new(START),
        events: AtomicU64::new(0),
        calls: AtomicU64::new(0),
        sent_all: AtomicBool::new(false),
        stop: AtomicBool::new(false),
        log: Mutex::new(Log::default()),
    });
    let started = Instant::now();

    let driver = {
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            while !shared.stop.load(Ordering::SeqCst) {
                tick.tick().await;
                shared.clock.fetch_add(SPEED, Ordering::SeqCst);
            }
        })
    };
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|i| {
            tokio::spawn(consume(
                engines[i % GATEWAYS].clone(),
                q.clone(),
                shared.clone(),
                0x5EED + i as u64,
            ))
        })
        .collect();

    // One producer, batches of ten to random groups: send order is seq order.
    let mut rng = Rng(7);
    let mut sent: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for batch_no in 0..MESSAGES / 10 {
        let now = shared.now();
        let batch: Vec<NewMessage> = (0..10)
            .map(|i| {
                let n = batch_no * 10 + i;
                NewMessage {
                    message_id: format!("id-{n}"),
                    body: format!("m{n}"),
                    attributes: BTreeMap::new(),
                    visible_at: now,
                    group_id: Some(format!("g{}", rng.below(GROUPS as u64))),
                    deduplication_id: Some(format!("d{n}")),
                }
            })
            .collect();
        let groups: Vec<String> = batch.iter().map(|m| m.group_id.clone().unwrap()).collect();
        let engine = &engines[batch_no % GATEWAYS];
        let answers = engine.send(&q, batch, now).await.unwrap();
        for (group, answer) in groups.into_iter().zip(answers) {
            let answer = answer.unwrap();
            assert!(!answer.duplicate);
            sent.entry(group).or_default().push(answer.seq);
        }
    }
    shared.sent_all.store(true, Ordering::SeqCst);

    let deadline = Instant::now() + DEADLINE;
    for c in consumers {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, c)
            .await
            .unwrap_or_else(|_| {
                let gone = shared.log.lock().unwrap().gone.len();
                panic!("only {gone} of {MESSAGES} messages were deleted in time")
            })
            .unwrap();
    }
    shared.stop.store(true, Ordering::SeqCst);
    driver.await.unwrap();
    let elapsed = started.elapsed();

    let info = engines[1]
        .get_queue(&q, shared.now())
        .await
        .unwrap()
        .unwrap();
    let log = shared.log.lock().unwrap();
    assert_eq!(
        (info.stats.visible, info.stats.in_flight, info.stats.delayed),
        (0, 0, 0),
        "every message was deleted"
    );
    eprintln!(
        "{MESSAGES} messages in {elapsed:?}: {} deliveries in {} receive calls, {} crashes, \
         {} slow consumers, {} given back, {} stale handles, {} simulated seconds",
        log.deliveries.len(),
        shared.calls.load(Ordering::SeqCst),
        log.crashes,
        log.slow,
        log.nacks,
        log.stale_answers,
        (shared.now() - START) / 1000
    );
    assert!(log.crashes > 0 && log.slow > 0 && log.nacks > 0 && log.stale_answers > 0);

    // Deliveries of each group in Redis order.
    let mut deliveries = log.deliveries.clone();
    deliveries.sort_by_key(|d| d.counter);
    let counters: HashSet<u64> = deliveries.iter().map(|d| d.counter).collect();
    assert_eq!(
        counters.len(),
        deliveries.len(),
        "delivery counters are unique"
    );
    let mut by_group: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
    for d in &deliveries {
        by_group.entry(d.group.as_str()).or_default().push(d);
    }
    let all: usize = sent.values().map(Vec::len).sum();
    assert_eq!(all, MESSAGES);
    assert_eq!(by_group.len(), sent.len());

    // Per seq, when the first successful delete of it started.
    let mut first_delete: HashMap<u64, u64> = HashMap::new();
    for d in &deliveries {
        if let Some(&started) = log.deleted.get(&d.handle) {
            let first = first_delete.entry(d.seq).or_insert(started);
            *first = (*first).min(started);
        }
    }
    // Whether a delivery ended (deleted, or given back) before a receive returned.
    let ended_before = |d: &Delivery, receive: &Delivery| {
        [&log.deleted, &log.released].iter().any(|ended| {
            ended
                .get(&d.handle)
                .is_some_and(|&started| started < receive.returned)
        })
    };
    for (group, order) in &sent {
        let group_deliveries = &by_group[group.as_str()];
        // Every message delivered; first deliveries in send order.
        let firsts: Vec<u64> = group_deliveries
            .iter()
            .filter(|d| d.receive_count == 1)
            .map(|d| d.seq)
            .collect();
        assert_eq!(&firsts, order, "first deliveries of {group} in send order");

        // Walk the group's deliveries in Redis order, keeping each message's latest delivery.
        let mut latest: BTreeMap<u64, &Delivery> = BTreeMap::new();
        for (i, d) in group_deliveries.iter().enumerate() {
            // In flight elsewhere: any latest delivery by another call that neither timed out
            // by this receive's now nor was deleted or given back before it.
            for other in latest.values() {
                if other.call != d.call {
                    assert!(
                        other.hidden_until <= d.now || ended_before(other, d),
                        "{group}: seq {} delivered at {} while seq {} was in flight until {} \
                         (call {} vs {})",
                        d.seq,
                        d.now,
                        other.seq,
                        other.hidden_until,
                        d.call,
                        other.call
                    );
                }
            }
            // Nothing skipped: every earlier message of the group came before it in this call
            // or was deleted before this receive.
            let this_call: HashSet<u64> = group_deliveries[..i]
                .iter()
                .rev()
                .take_while(|x| x.call == d.call)
                .map(|x| x.seq)
                .collect();
            for &earlier in order.iter().take_while(|&&s| s < d.seq) {
                let deleted = first_delete
                    .get(&earlier)
                    .is_some_and(|&started| started < d.returned);
                assert!(
                    this_call.contains(&earlier) || deleted,
                    "{group}: seq {} delivered while the earlier seq {earlier} was neither \
                     delivered before it in the same receive nor deleted",
                    d.seq
                );
            }
            latest.insert(d.seq, d);
        }
    }
    assert!(
        elapsed < Duration::from_secs(60),
        "took {elapsed:?}; the test is meant to stay well under 30 s"
    );
}
