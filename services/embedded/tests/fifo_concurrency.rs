//! FIFO under concurrency: 16 consumers, 50 groups, 10,000 messages, random visibility
//! expiries and random consumer crashes (messages received and never deleted).
//!
//! Time is a shared counter a driver task advances; every call passes its current value as
//! `now`. Producers (each owning some groups, so each group has one sender) send in batches and
//! sometimes retry a batch, which must come back as duplicates. Consumers receive batches and
//! then, at random, delete them, delete part and abandon the rest, hand them back
//! (visibility 0), extend them, or crash (abandon them until their visibility ends).
//!
//! Checked, from a log every consumer appends to under a mutex:
//!
//! * every message is delivered, and in the end deleted (the queue ends empty);
//! * per group, the order of first deliveries is the send order;
//! * no group is in flight in two receives at once. (One receive may take several consecutive
//!   messages of a group, so "in flight at once" is per receive, not per message.) Receives are
//!   put in the engine's order by the delivery number in their receipt handles; a delivery is
//!   in flight until its visibility ends (the receive's `now` plus the timeout, or as changed)
//!   or until it is handed back or deleted (marked in the log just before the call, so the
//!   check can never blame a receive that legitimately followed the release).

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{
    Engine, Millis, NewMessage, QueueConfig, QueueKey, QueueName, ReceiptHandle, TenantId,
};
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

const CONSUMERS: usize = 16;
const PRODUCERS: usize = 5;
const GROUPS: usize = 50;
const MESSAGES: usize = 10_000;
const BATCH: usize = 10;
const START: Millis = 1_000_000;

/// One delivery of one message.
#[derive(Debug)]
struct Delivery {
    seq: u64,
    /// The receive call it came in (its deliveries hold their groups together).
    receive: u64,
    /// The engine's delivery number: orders receives as the engine made them.
    number: u64,
    /// The `now` of the receive.
    at: Millis,
    /// When its visibility ends, as the receive set it.
    initial_end: Millis,
    /// As later changed; `None` once handed back or deleted.
    end: Option<Millis>,
}

#[derive(Debug, Default)]
struct Log {
    /// Per group, every delivery so far.
    by_group: HashMap<String, Vec<Delivery>>,
    /// Per message seq, the numbers of its deliveries logged so far.
    numbers: HashMap<u64, Vec<u64>>,
    violations: Vec<String>,
}

/// `a` was numbered before `b` (delivery numbers start anywhere and may wrap).
fn before(a: u64, b: u64) -> bool {
    (a.wrapping_sub(b) as i64) < 0
}

impl Log {
    /// Whether message `seq` was delivered again after delivery `from` and before `to`: the
    /// earlier delivery ended then, whatever its timeout said. (Consumers read the shared
    /// `now` a moment before their call reaches the engine, so the engine does not see `now`
    /// in the order of its operations: a receive that read an earlier `now` can come after a
    /// redelivery and the deletion that followed it.)
    fn superseded(&self, seq: u64, from: u64, to: u64) -> bool {
        self.numbers
            .get(&seq)
            .is_some_and(|ns| ns.iter().any(|&n| before(from, n) && before(n, to)))
    }

    /// Records the deliveries of one receive of one group, checking none of them overlaps
    /// another receive's delivery of the group.
    fn record(
        &mut self,
        group: &str,
        receive: u64,
        at: Millis,
        end: Millis,
        delivered: &[(u64, u64)],
    ) {
        for &(seq, number) in delivered {
            let mut overlapping = Vec::new();
            for other in self.by_group.get(group).into_iter().flatten() {
                if other.receive == receive {
                    continue;
                }
                let overlaps = if before(other.number, number) {
                    // Still in flight at this receive's `now` (and not released: a release
                    // is logged before it happens, so this is never blamed wrongly).
                    other.end.is_some_and(|end| end > at)
                        && !self.superseded(other.seq, other.number, number)
                } else {
                    // The other receive came later but was logged first: this one was then
                    // in flight as received (nothing is released before it is logged).
                    end > other.at && !self.superseded(seq, number, other.number)
                };
                if overlaps {
                    overlapping.push(format!(
                        "group {group}: delivery {number} of seq {seq} (receive {receive} at \
                         {at}) overlaps delivery {} of seq {} (receive {} at {}, in flight until \
                         {:?})",
                        other.number, other.seq, other.receive, other.at, other.initial_end
                    ));
                }
            }
            self.violations.extend(overlapping);
            self.numbers.entry(seq).or_default().push(number);
            self.by_group
                .entry(group.to_owned())
                .or_default()
                .push(Delivery {
                    seq,
                    receive,
                    number,
                    at,
                    initial_end: end,
                    end: Some(end),
                });
        }
    }

    fn find(&mut self, group: &str, number: u64) -> Option<&mut Delivery> {
        self.by_group
            .get_mut(group)?
            .iter_mut()
            .find(|d| d.number == number)
    }
}

/// A received message as a consumer keeps it.
struct Held {
    seq: u64,
    group: String,
    handle: String,
    number: u64,
}

fn queue_key() -> QueueKey {
    QueueKey::new(
        TenantId::parse("t").expect("tenant"),
        QueueName::parse("orders.fifo").expect("name"),
    )
}

struct Shared {
    engine: EmbeddedEngine,
    key: QueueKey,
    now: AtomicU64,
    log: Mutex<Log>,
    /// Seqs deleted (a delete with a stale handle of a message already gone also answers Ok).
    deleted: Mutex<HashSet<u64>>,
    receives: AtomicU64,
    stop: AtomicBool,
    /// Per message seq, its group and its place in the group's send order.
    sent: Mutex<BTreeMap<u64, (String, usize)>>,
}

impl Shared {
    fn now(&self) -> Millis {
        self.now.load(Ordering::SeqCst)
    }

    fn log(&self) -> std::sync::MutexGuard<'_, Log> {
        self.log.lock().expect("the log")
    }

    fn deleted(&self) -> usize {
        self.deleted.lock().expect("deleted").len()
    }
}

async fn produce(shared: Arc<Shared>, producer: usize, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    let groups: Vec<usize> = (0..GROUPS).filter(|g| g % PRODUCERS == producer).collect();
    let mut next_index = vec![0usize; GROUPS];
    let share = MESSAGES / PRODUCERS;
    let mut sent = 0;
    while sent < share {
        let now = shared.now();
        let batch: Vec<NewMessage> = (0..BATCH.min(share - sent))
            .map(|_| {
                let g = groups[rng.gen_range(0..groups.len())];
                let i = next_index[g];
                next_index[g] += 1;
                let body = format!("g{g}:{i}");
                NewMessage {
                    message_id: format!("id-{body}"),
                    body: body.clone(),
                    attributes: BTreeMap::new(),
                    visible_at: now,
                    group_id: Some(format!("g{g}")),
                    deduplication_id: Some(body),
                }
            })
            .collect();
        let answers = shared
            .engine
            .send(&shared.key, batch.clone(), now)
            .await
            .expect("send");
        let mut seqs = Vec::new();
        {
            let mut log = shared.sent.lock().expect("sent");
            for (m, answer) in batch.iter().zip(&answers) {
                let answer = answer.as_ref().expect("accepted");
                assert!(!answer.duplicate, "{} is new", m.body);
                let (group, index) = m.body.split_once(':').expect("g:i");
                log.insert(
                    answer.seq,
                    (group.to_owned(), index.parse().expect("index")),
                );
                seqs.push(answer.seq);
            }
        }
        sent += batch.len();
        if rng.gen_bool(0.05) {
            // A producer that did not hear back retries: nothing new is stored.
            let now = shared.now();
            let retried = shared
                .engine
                .send(&shared.key, batch, now)
                .await
                .expect("send");
            for (answer, seq) in retried.iter().zip(&seqs) {
                let answer = answer.as_ref().expect("accepted");
                assert!(
                    answer.duplicate && answer.seq == *seq,
                    "a retry is a duplicate"
                );
            }
        }
        tokio::task::yield_now().await;
    }
}

async fn consume(shared: Arc<Shared>, seed: u64) {
    let mut rng = StdRng::seed_from_u64(seed);
    while !shared.stop.load(Ordering::SeqCst) {
        let now = shared.now();
        let max = rng.gen_range(1..=BATCH);
        let visibility = rng.gen_range(1..=5u32);
        let outcome = shared
            .engine
            .receive(&shared.key, max, visibility, None, now)
            .await
            .expect("receive");
        if outcome.messages.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let receive = shared.receives.fetch_add(1, Ordering::SeqCst);
        let end = now + Millis::from(visibility) * 1000;
        let held: Vec<Held> = outcome
            .messages
            .iter()
            .map(|r| Held {
                seq: r.message.seq,
                group: r.message.group_id.clone().expect("a group"),
                handle: r.receipt_handle.clone(),
                number: ReceiptHandle::decode(&r.receipt_handle, shared.engine.handle_key())
                    .expect("a handle")
                    .delivery,
            })
            .collect();
        {
            let mut log = shared.log();
            let mut by_group: BTreeMap<&str, Vec<(u64, u64)>> = BTreeMap::new();
            for h in &held {
                by_group
                    .entry(&h.group)
                    .or_default()
                    .push((h.seq, h.number));
            }
            for (group, numbers) in by_group {
                log.record(group, receive, now, end, &numbers);
            }
        }
        // Some work, during which time passes.
        if rng.gen_bool(0.3) {
            tokio::time::sleep(Duration::from_millis(rng.gen_range(0..3))).await;
        }
        match rng.gen_range(0..100) {
            // Done with them all.
            0..=59 => delete(&shared, &held).await,
            // Done with some, then a crash.
            60..=69 => {
                let done = rng.gen_range(0..held.len());
                delete(&shared, &held[..done]).await;
            }
            // Handed back.
            70..=79 => hand_back(&shared, &held).await,
            // More time asked for, then done.
            80..=84 => {
                extend(&shared, &held, rng.gen_range(1..=3)).await;
                tokio::time::sleep(Duration::from_millis(rng.gen_range(0..3))).await;
                delete(&shared, &held).await;
            }
            // A crash: never deleted, back when the visibility ends.
            _ => {}
        }
    }
}

/// Marks deliveries released in the log (before the release happens).
fn release(shared: &Shared, held: &[Held]) {
    let mut log = shared.log();
    for h in held {
        if let Some(d) = log.find(&h.group, h.number) {
            d.end = None;
        }
    }
}

async fn delete(shared: &Shared, held: &[Held]) {
    if held.is_empty() {
        return;
    }
    release(shared, held);
    let handles: Vec<String> = held.iter().map(|h| h.handle.clone()).collect();
    let answers = shared
        .engine
        .delete(&shared.key, &handles, shared.now())
        .await
        .expect("delete");
    // A stale handle (the visibility ended and someone else has it now) is refused.
    let mut deleted = shared.deleted.lock().expect("deleted");
    for (h, answer) in held.iter().zip(answers) {
        if answer.is_ok() {
            deleted.insert(h.seq);
        }
    }
}

async fn hand_back(shared: &Shared, held: &[Held]) {
    release(shared, held);
    let entries: Vec<(String, u32)> = held.iter().map(|h| (h.handle.clone(), 0)).collect();
    shared
        .engine
        .change_visibility(&shared.key, &entries, shared.now())
        .await
        .expect("change_visibility");
}

/// Sets a new visibility timeout (which may end sooner or later than the one it replaces).
async fn extend(shared: &Shared, held: &[Held], seconds: u32) {
    let now = shared.now();
    let new_end = now + Millis::from(seconds) * 1000;
    let set_end = |shorten_only: bool| {
        let mut log = shared.log();
        for h in held {
            if let Some(end) = log.find(&h.group, h.number).and_then(|d| d.end.as_mut()) {
                *end = if shorten_only {
                    (*end).min(new_end)
                } else {
                    new_end
                };
            }
        }
    };
    // Like a release, an earlier end is logged before it happens; a later one only after it
    // happened, so a receive made in between is judged by the end it actually met.
    set_end(true);
    let entries: Vec<(String, u32)> = held.iter().map(|h| (h.handle.clone(), seconds)).collect();
    let answers = shared
        .engine
        .change_visibility(&shared.key, &entries, now)
        .await
        .expect("change_visibility");
    if answers.iter().all(Result::is_ok) {
        set_end(false);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifo_holds_under_concurrent_consumers_and_crashes() {
    let seed: u64 = std::env::var("SLUICE_FIFO_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(rand::random);
    eprintln!("seed {seed} (set SLUICE_FIFO_SEED to replay the random choices)");
    let dir = tempfile::tempdir().expect("a temporary directory");
    let engine = EmbeddedEngine::open(dir.path(), EmbeddedOptions::default()).expect("open");
    let key = queue_key();
    engine
        .put_queue(&key, QueueConfig::with_defaults(262_144), START)
        .await
        .expect("put_queue");
    let shared = Arc::new(Shared {
        engine,
        key,
        now: AtomicU64::new(START),
        log: Mutex::new(Log::default()),
        deleted: Mutex::new(HashSet::new()),
        receives: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        sent: Mutex::new(BTreeMap::new()),
    });

    let driver = {
        let shared = Arc::clone(&shared);
        let mut rng = StdRng::seed_from_u64(seed);
        tokio::spawn(async move {
            while !shared.stop.load(Ordering::SeqCst) {
                tokio::time::sleep(Duration::from_millis(1)).await;
                shared
                    .now
                    .fetch_add(rng.gen_range(0..=100), Ordering::SeqCst);
            }
        })
    };
    let mut tasks = Vec::new();
    for p in 0..PRODUCERS {
        tasks.push(tokio::spawn(produce(
            Arc::clone(&shared),
            p,
            seed ^ (p as u64 + 1),
        )));
    }
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|c| tokio::spawn(consume(Arc::clone(&shared), seed ^ ((c as u64 + 1) << 32))))
        .collect();
    for t in tasks {
        t.await.expect("a producer");
    }

    let started = Instant::now();
    while shared.deleted() < MESSAGES {
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "only {} of {MESSAGES} deleted",
            shared.deleted()
        );
        if !shared.log().violations.is_empty() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    shared.stop.store(true, Ordering::SeqCst);
    for c in consumers {
        c.await.expect("a consumer");
    }
    driver.await.expect("the driver");

    let stats = shared
        .engine
        .get_queue(&shared.key, shared.now())
        .await
        .expect("get_queue")
        .expect("the queue")
        .stats;
    assert_eq!(stats.visible + stats.in_flight + stats.delayed, 0);

    let log = shared.log();
    assert!(
        log.violations.is_empty(),
        "{} violations, first: {:?}",
        log.violations.len(),
        log.violations.iter().take(5).collect::<Vec<_>>()
    );
    assert_eq!(shared.deleted(), MESSAGES);
    let sent = shared.sent.lock().expect("sent");
    assert_eq!(sent.len(), MESSAGES);
    // Every message delivered; per group, first deliveries in send order.
    let in_engine_order = |a: &u64, b: &u64| (a.wrapping_sub(*b) as i64).cmp(&0);
    let mut firsts: BTreeMap<&str, Vec<(u64, usize)>> = BTreeMap::new();
    for (seq, (group, index)) in sent.iter() {
        let first = log
            .numbers
            .get(seq)
            .and_then(|ns| ns.iter().min_by(|a, b| in_engine_order(a, b)))
            .unwrap_or_else(|| panic!("{group}:{index} was never delivered"));
        firsts.entry(group).or_default().push((*first, *index));
    }
    assert_eq!(firsts.len(), GROUPS);
    for (group, mut deliveries) in firsts {
        deliveries.sort_by(|a, b| in_engine_order(&a.0, &b.0));
        let order: Vec<usize> = deliveries.iter().map(|d| d.1).collect();
        let expected: Vec<usize> = (0..order.len()).collect();
        assert_eq!(
            order, expected,
            "group {group}: first deliveries out of send order"
        );
    }
    let redelivered = log.by_group.values().map(Vec::len).sum::<usize>() - MESSAGES;
    eprintln!(
        "{} receives, {redelivered} redeliveries, virtual time {} s",
        shared.receives.load(Ordering::SeqCst),
        (shared.now() - START) / 1000
    );
}
