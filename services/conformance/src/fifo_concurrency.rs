//! FIFO under concurrency, on any engine: 16 consumers, 50 groups, 10,000 messages sent while
//! they consume, visibility timeouts that run out, consumers that crash, give messages back,
//! extend them or are too slow, and producers that retry. Written once over the [`Engine`]
//! trait; each engine's tests call [`fifo_holds_under_concurrency`] with one or more engines
//! over one store (several engines on one Redis are several gateways).
//!
//! Time is simulated: one clock shared by everyone, advanced by a driver task, read by each
//! call as its `now`. Five producers each own ten groups (so each group has one sender, and its
//! send order is well defined), send batches of ten through the engines in turn, and sometimes
//! retry a batch through another engine, which must come back as duplicates of the same
//! sequence numbers. Consumers receive batches and then, at random: delete them all; delete a
//! prefix and crash (the rest is received and never deleted); crash outright; are slow, past
//! the visibility timeout, then delete them all (stale where another consumer got them again);
//! give the first message back (visibility 0, so a group's head is visible while later messages
//! of it are in flight: the group must stay locked) and delete the rest; give them all back; or
//! set a new visibility timeout (sooner or later than the old one) and then delete them.
//!
//! Checked afterwards, from what the engines answered:
//!
//! * every message is delivered and finally deleted, and the queue ends empty;
//! * for every group, first deliveries (receive count 1, each message exactly once, and no
//!   delivery of a message before it) come in send order;
//! * no group ever has messages in flight in two receives at once: when a receive delivers a
//!   message of a group, the latest delivery of every other message of that group by another
//!   receive had timed out by the receive's `now`, or may have been deleted, given back or set
//!   to end by then;
//! * nothing is skipped: when a receive delivers a message, every earlier message of its group
//!   came in the same receive before it or may have been deleted before.
//!
//! The engine's order of operations is not observed directly. Deliveries are ordered by the
//! delivery number in their receipt handles (each engine says how to read it, see
//! [`FifoSetup::delivery_order`]). A delete, give-back or visibility change is taken to have
//! happened before a receive if it started before that receive returned (a global event
//! counter), the most the engine could have seen; so the checks never blame a correct engine
//! whatever the interleaving, and they fail at once when group locking is removed.

use sluice_engine::{
    Engine, HandleError, HandleKey, Millis, NewMessage, QueueConfig, QueueKey, QueueName,
    ReceiptHandle, TenantId,
};
use std::cmp::Ordering as CmpOrdering;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const GROUPS: usize = 50;
const MESSAGES: usize = 10_000;
const CONSUMERS: usize = 16;
const PRODUCERS: usize = 5;
const BATCH: usize = 10;
const START: Millis = 1_767_225_600_000;
/// How long the consumers may take to delete everything.
const DEADLINE: Duration = Duration::from_secs(120);
/// The whole test is meant to stay well under 30 s; this bound catches a runaway.
const TIME_LIMIT: Duration = Duration::from_secs(60);

/// What the test runs on.
pub struct FifoSetup {
    /// Engines over one store, all serving the same queues (one, or several gateways' worth).
    /// Producers and consumers spread over them.
    pub engines: Vec<Arc<dyn Engine>>,
    /// The engine's order of deliveries of one queue, from a receipt handle: unique per
    /// delivery and increasing (modulo 2^64) in the order the engine made them.
    pub delivery_order: fn(&ReceiptHandle) -> u64,
    /// The store's receipt-handle key, to read the delivery numbers in handles.
    pub handle_key: HandleKey,
    /// Simulated milliseconds the clock moves per real millisecond, on average.
    pub speed: Millis,
}

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

    fn chance(&mut self, percent: u64) -> bool {
        self.below(100) < percent
    }
}

/// `a` comes before `b` in an order that may wrap around (delivery numbers start anywhere).
fn wrapping_cmp(a: u64, b: u64) -> CmpOrdering {
    (a.wrapping_sub(b) as i64).cmp(&0)
}

/// One message as one receive delivered it.
#[derive(Debug, Clone)]
struct Delivery {
    seq: u64,
    group: String,
    receive_count: u32,
    /// The engine's order of deliveries.
    order: u64,
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
    /// Handle → (event number when it started, new end) of each successful visibility change
    /// to a later time.
    changed: HashMap<String, Vec<(u64, Millis)>>,
    /// Seqs deleted successfully by some handle.
    gone: HashSet<u64>,
    stale_answers: u64,
    crashes: u64,
    slow: u64,
    heads_given_back: u64,
    batches_given_back: u64,
    extended: u64,
    retries: u64,
}

struct Shared {
    key: QueueKey,
    order_of: fn(&ReceiptHandle) -> u64,
    handle_key: HandleKey,
    clock: AtomicU64,
    events: AtomicU64,
    calls: AtomicU64,
    producers_done: AtomicU64,
    /// Set once every consumer ended: the driver stops.
    stop: AtomicBool,
    log: Mutex<Log>,
    /// Per group, its messages' seqs in send order.
    sent: Mutex<BTreeMap<String, Vec<u64>>>,
}

impl Shared {
    fn now(&self) -> Millis {
        self.clock.load(Ordering::SeqCst)
    }

    fn event(&self) -> u64 {
        self.events.fetch_add(1, Ordering::SeqCst)
    }

    fn log(&self) -> MutexGuard<'_, Log> {
        self.log.lock().unwrap_or_else(|e| panic!("the log: {e}"))
    }

    fn done(&self) -> bool {
        self.producers_done.load(Ordering::SeqCst) == PRODUCERS as u64
            && self.log().gone.len() >= MESSAGES
    }

    /// Sleeps (really) until the simulated clock reaches `at`.
    async fn wait_until(&self, at: Millis) {
        while self.now() < at {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

async fn produce(engines: Vec<Arc<dyn Engine>>, shared: Arc<Shared>, producer: usize, seed: u64) {
    let mut rng = Rng(seed);
    let groups: Vec<usize> = (0..GROUPS).filter(|g| g % PRODUCERS == producer).collect();
    let share = MESSAGES / PRODUCERS;
    for batch_no in 0..share / BATCH {
        let now = shared.now();
        let batch: Vec<NewMessage> = (0..BATCH)
            .map(|i| {
                let n = producer * share + batch_no * BATCH + i;
                let group = groups[rng.below(groups.len() as u64) as usize];
                NewMessage {
                    payload: None,
                    message_id: format!("id-{n}"),
                    body: format!("m{n}"),
                    attributes: BTreeMap::new(),
                    visible_at: now,
                    group_id: Some(format!("g{group}")),
                    deduplication_id: Some(format!("d{n}")),
                }
            })
            .collect();
        let engine = &engines[(producer + batch_no) % engines.len()];
        let answers = engine
            .send(&shared.key, batch.clone(), now)
            .await
            .unwrap_or_else(|e| panic!("send: {e}"));
        let mut seqs = Vec::new();
        {
            let mut sent = shared.sent.lock().unwrap_or_else(|e| panic!("{e}"));
            for (m, answer) in batch.iter().zip(&answers) {
                let answer = answer
                    .as_ref()
                    .unwrap_or_else(|e| panic!("{} refused: {e:?}", m.body));
                assert!(!answer.duplicate, "{} is new", m.body);
                let group = m.group_id.clone().unwrap_or_default();
                sent.entry(group).or_default().push(answer.seq);
                seqs.push(answer.seq);
            }
        }
        if rng.chance(5) {
            // A producer that did not hear back retries, through another gateway: nothing new
            // is stored.
            shared.log().retries += 1;
            let engine = &engines[(producer + batch_no + 1) % engines.len()];
            let retried = engine
                .send(&shared.key, batch, shared.now())
                .await
                .unwrap_or_else(|e| panic!("send: {e}"));
            for (answer, seq) in retried.iter().zip(&seqs) {
                let answer = answer.as_ref().unwrap_or_else(|e| panic!("{e:?}"));
                assert!(
                    answer.duplicate && answer.seq == *seq,
                    "a retry is a duplicate of seq {seq}: {answer:?}"
                );
            }
        }
        tokio::task::yield_now().await;
    }
    shared.producers_done.fetch_add(1, Ordering::SeqCst);
}

/// Notes one answer of a delete or visibility change: `on_success` records an `Ok`, a stale
/// handle is counted, anything else fails the test.
fn note(
    log: &mut Log,
    answer: &Result<(), HandleError>,
    what: &str,
    on_success: impl FnOnce(&mut Log),
) {
    match answer {
        Ok(()) => on_success(log),
        // This consumer may have been held up past the timeout, and the message delivered
        // again meanwhile.
        Err(HandleError::Stale) => log.stale_answers += 1,
        Err(e) => panic!("{what} answered {e:?}"),
    }
}

async fn delete(engine: &dyn Engine, shared: &Shared, held: &[(u64, String)]) {
    if held.is_empty() {
        return;
    }
    let handles: Vec<String> = held.iter().map(|(_, h)| h.clone()).collect();
    let started = shared.event();
    let answers = engine
        .delete(&shared.key, &handles, shared.now())
        .await
        .unwrap_or_else(|e| panic!("delete: {e}"));
    let mut log = shared.log();
    for ((seq, handle), answer) in held.iter().zip(&answers) {
        note(&mut log, answer, "delete", |log| {
            log.deleted.insert(handle.clone(), started);
            log.gone.insert(*seq);
        });
    }
}

/// Gives messages back (visibility 0).
async fn give_back(engine: &dyn Engine, shared: &Shared, held: &[(u64, String)]) {
    let entries: Vec<(String, u32)> = held.iter().map(|(_, h)| (h.clone(), 0)).collect();
    let started = shared.event();
    let answers = engine
        .change_visibility(&shared.key, &entries, shared.now())
        .await
        .unwrap_or_else(|e| panic!("change_visibility: {e}"));
    let mut log = shared.log();
    for ((_, handle), answer) in held.iter().zip(&answers) {
        note(&mut log, answer, "change_visibility", |log| {
            log.released.insert(handle.clone(), started);
        });
    }
}

/// Sets a new visibility timeout (which may end sooner or later than the one it replaces).
async fn extend(engine: &dyn Engine, shared: &Shared, held: &[(u64, String)], seconds: u32) {
    let now = shared.now();
    let new_end = now + Millis::from(seconds) * 1000;
    let entries: Vec<(String, u32)> = held.iter().map(|(_, h)| (h.clone(), seconds)).collect();
    let started = shared.event();
    let answers = engine
        .change_visibility(&shared.key, &entries, now)
        .await
        .unwrap_or_else(|e| panic!("change_visibility: {e}"));
    let mut log = shared.log();
    for ((_, handle), answer) in held.iter().zip(&answers) {
        note(&mut log, answer, "change_visibility", |log| {
            log.changed
                .entry(handle.clone())
                .or_default()
                .push((started, new_end));
        });
    }
}

async fn consume(engine: Arc<dyn Engine>, shared: Arc<Shared>, seed: u64) {
    let mut rng = Rng(seed);
    while !shared.done() {
        let max = 1 + rng.below(BATCH as u64) as usize;
        let visibility_s = 1 + rng.below(5) as u32;
        let now = shared.now();
        let call = shared.calls.fetch_add(1, Ordering::SeqCst);
        let outcome = engine
            .receive(&shared.key, max, visibility_s, None, now)
            .await
            .unwrap_or_else(|e| panic!("receive: {e}"));
        let returned = shared.event();
        if outcome.messages.is_empty() {
            tokio::time::sleep(Duration::from_millis(1)).await;
            continue;
        }
        let hidden_until = now + Millis::from(visibility_s) * 1000;
        let held: Vec<(u64, String)> = outcome
            .messages
            .iter()
            .map(|m| (m.message.seq, m.receipt_handle.clone()))
            .collect();
        {
            let mut log = shared.log();
            for m in &outcome.messages {
                let handle = ReceiptHandle::decode(&m.receipt_handle, &shared.handle_key)
                    .unwrap_or_else(|| panic!("not a handle: {}", m.receipt_handle));
                log.deliveries.push(Delivery {
                    seq: m.message.seq,
                    group: m
                        .message
                        .group_id
                        .clone()
                        .expect("a FIFO message has a group"),
                    receive_count: m.message.receive_count,
                    order: (shared.order_of)(&handle),
                    call,
                    now,
                    hidden_until,
                    returned,
                    handle: m.receipt_handle.clone(),
                });
            }
        }
        // Some work, during which time passes.
        if rng.chance(30) {
            tokio::time::sleep(Duration::from_millis(rng.below(3))).await;
        }
        match rng.below(100) {
            // A crash after deleting a random prefix (possibly empty) of the batch.
            0..=7 => {
                shared.log().crashes += 1;
                let done = rng.below(held.len() as u64) as usize;
                delete(&*engine, &shared, &held[..done]).await;
            }
            // A crash before deleting anything: back when the visibility ends.
            8..=14 => shared.log().crashes += 1,
            // Slow: past the visibility timeout, then delete it all.
            15..=26 => {
                shared.log().slow += 1;
                shared.wait_until(hidden_until + rng.below(2_000)).await;
                delete(&*engine, &shared, &held).await;
            }
            // The first message given back, the rest deleted after some work: meanwhile the
            // head is visible and the rest in flight, and the group must stay locked.
            27..=36 => {
                shared.log().heads_given_back += 1;
                give_back(&*engine, &shared, &held[..1]).await;
                tokio::time::sleep(Duration::from_millis(1 + rng.below(3))).await;
                delete(&*engine, &shared, &held[1..]).await;
            }
            // All given back.
            37..=44 => {
                shared.log().batches_given_back += 1;
                give_back(&*engine, &shared, &held).await;
            }
            // More (or less) time asked for, then done.
            45..=49 => {
                shared.log().extended += 1;
                extend(&*engine, &shared, &held, 1 + rng.below(3) as u32).await;
                tokio::time::sleep(Duration::from_millis(rng.below(3))).await;
                delete(&*engine, &shared, &held).await;
            }
            // Done with them all.
            _ => delete(&*engine, &shared, &held).await,
        }
    }
}

/// Runs the load and checks every guarantee listed in the module documentation. Panics on the
/// first one broken. `SLUICE_FIFO_SEED` replays a run's random choices.
pub async fn fifo_holds_under_concurrency(setup: FifoSetup) {
    let FifoSetup {
        engines,
        delivery_order,
        handle_key,
        speed,
    } = setup;
    assert!(!engines.is_empty(), "at least one engine");
    let seed: u64 = std::env::var("SLUICE_FIFO_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(7, |d| d.as_nanos() as u64)
        });
    eprintln!("seed {seed} (set SLUICE_FIFO_SEED to replay the random choices)");
    let key = QueueKey::new(
        TenantId::parse("acme").unwrap_or_else(|e| panic!("{e}")),
        QueueName::parse("orders.fifo").unwrap_or_else(|e| panic!("{e}")),
    );
    engines[0]
        .put_queue(&key, QueueConfig::with_defaults(262_144), START)
        .await
        .unwrap_or_else(|e| panic!("put_queue: {e}"));
    let shared = Arc::new(Shared {
        key,
        order_of: delivery_order,
        handle_key,
        clock: AtomicU64::new(START),
        events: AtomicU64::new(0),
        calls: AtomicU64::new(0),
        producers_done: AtomicU64::new(0),
        stop: AtomicBool::new(false),
        log: Mutex::new(Log::default()),
        sent: Mutex::new(BTreeMap::new()),
    });
    let started = Instant::now();

    let driver = {
        let shared = shared.clone();
        let mut rng = Rng(seed);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(1));
            while !shared.stop.load(Ordering::SeqCst) {
                tick.tick().await;
                shared
                    .clock
                    .fetch_add(rng.below(2 * speed + 1), Ordering::SeqCst);
            }
        })
    };
    let consumers: Vec<_> = (0..CONSUMERS)
        .map(|i| {
            tokio::spawn(consume(
                engines[i % engines.len()].clone(),
                shared.clone(),
                seed ^ ((i as u64 + 1) << 32),
            ))
        })
        .collect();
    let producers: Vec<_> = (0..PRODUCERS)
        .map(|p| {
            tokio::spawn(produce(
                engines.clone(),
                shared.clone(),
                p,
                seed ^ (p as u64 + 1),
            ))
        })
        .collect();
    for p in producers {
        p.await.unwrap_or_else(|e| panic!("a producer: {e}"));
    }

    let deadline = Instant::now() + DEADLINE;
    for c in consumers {
        let left = deadline.saturating_duration_since(Instant::now());
        tokio::time::timeout(left, c)
            .await
            .unwrap_or_else(|_| {
                let gone = shared.log().gone.len();
                panic!("only {gone} of {MESSAGES} messages were deleted in time")
            })
            .unwrap_or_else(|e| panic!("a consumer: {e}"));
    }
    shared.stop.store(true, Ordering::SeqCst);
    driver.await.unwrap_or_else(|e| panic!("the driver: {e}"));
    let elapsed = started.elapsed();

    let info = engines[engines.len() - 1]
        .get_queue(&shared.key, shared.now())
        .await
        .unwrap_or_else(|e| panic!("get_queue: {e}"))
        .unwrap_or_else(|| panic!("the queue is gone"));
    let log = shared.log();
    let sent = shared.sent.lock().unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(
        (info.stats.visible, info.stats.in_flight, info.stats.delayed),
        (0, 0, 0),
        "every message was deleted"
    );
    eprintln!(
        "{MESSAGES} messages in {elapsed:?} over {} engine(s): {} deliveries in {} receive \
         calls, {} crashes, {} slow consumers, {} heads and {} batches given back, {} extended, \
         {} retried sends, {} stale handles, {} simulated seconds",
        engines.len(),
        log.deliveries.len(),
        shared.calls.load(Ordering::SeqCst),
        log.crashes,
        log.slow,
        log.heads_given_back,
        log.batches_given_back,
        log.extended,
        log.retries,
        log.stale_answers,
        (shared.now() - START) / 1000
    );
    assert!(
        log.crashes > 0
            && log.slow > 0
            && log.heads_given_back > 0
            && log.batches_given_back > 0
            && log.extended > 0
            && log.retries > 0
            && log.stale_answers > 0,
        "every fate happened at least once"
    );
    assert_eq!(log.gone.len(), MESSAGES, "every message deleted");
    assert_eq!(sent.values().map(Vec::len).sum::<usize>(), MESSAGES);
    assert_eq!(sent.len(), GROUPS, "every group used");

    // Deliveries in the engine's order.
    let mut deliveries = log.deliveries.clone();
    deliveries.sort_by(|a, b| wrapping_cmp(a.order, b.order));
    let orders: HashSet<u64> = deliveries.iter().map(|d| d.order).collect();
    assert_eq!(
        orders.len(),
        deliveries.len(),
        "delivery numbers are unique"
    );
    let mut by_group: BTreeMap<&str, Vec<&Delivery>> = BTreeMap::new();
    let mut first_of: HashMap<u64, &Delivery> = HashMap::new();
    for d in &deliveries {
        by_group.entry(d.group.as_str()).or_default().push(d);
        first_of.entry(d.seq).or_insert(d);
    }
    assert_eq!(by_group.len(), sent.len());

    // Per seq, when the first successful delete of it started.
    let mut first_delete: HashMap<u64, u64> = HashMap::new();
    for d in &deliveries {
        if let Some(&started) = log.deleted.get(&d.handle) {
            let first = first_delete.entry(d.seq).or_insert(started);
            *first = (*first).min(started);
        }
    }
    // Whether a delivery may have ended by a receive: deleted or given back before it returned,
    // or its visibility set to end by the receive's `now` before it returned.
    let ended_before = |d: &Delivery, receive: &Delivery| {
        let released = [&log.deleted, &log.released].iter().any(|ended| {
            ended
                .get(&d.handle)
                .is_some_and(|&started| started < receive.returned)
        });
        released
            || log.changed.get(&d.handle).is_some_and(|changes| {
                changes
                    .iter()
                    .any(|&(started, end)| started < receive.returned && end <= receive.now)
            })
    };
    for (group, order) in sent.iter() {
        assert!(
            order.windows(2).all(|w| w[0] < w[1]),
            "{group}: sequence numbers grow in send order"
        );
        let group_deliveries = &by_group[group.as_str()];
        // Every message delivered; first deliveries in send order, by receive count and by the
        // engine's order alike.
        let firsts: Vec<u64> = group_deliveries
            .iter()
            .filter(|d| d.receive_count == 1)
            .map(|d| d.seq)
            .collect();
        assert_eq!(&firsts, order, "first deliveries of {group} in send order");
        for seq in order {
            let first = first_of[seq];
            assert_eq!(
                first.receive_count, 1,
                "{group}: seq {seq} delivered with receive count {} before its first delivery",
                first.receive_count
            );
        }

        // Walk the group's deliveries in the engine's order, keeping each message's latest.
        let mut latest: BTreeMap<u64, &Delivery> = BTreeMap::new();
        for (i, d) in group_deliveries.iter().enumerate() {
            // In flight elsewhere: any latest delivery by another call that neither timed out
            // by this receive's now nor may have ended before it.
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
            // or may have been deleted before this receive.
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
        elapsed < TIME_LIMIT,
        "took {elapsed:?}; the test is meant to stay well under 30 s"
    );
}
