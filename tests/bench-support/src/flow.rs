//! The producer/consumer loop every in-process throughput measurement runs, whatever drives
//! the queue (HTTP, an engine, raw scripts): producers send for a fixed window, consumers
//! receive and delete until every acknowledged message is deleted, and a ledger counts every
//! delivery by the id in its body, so lost and duplicate deliveries are reported with the rate.

use crate::BenchResult;
use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// Size of every message body the loop sends.
pub const BODY_BYTES: usize = 1024;
/// Longest a run may take to drain its queue after the producers stop.
pub const DRAIN_LIMIT: Duration = Duration::from_secs(20);

/// A body of [`BODY_BYTES`]: `id` in 16 hex digits, then `padding` (at least as long).
pub fn padded_body(id: u64, padding: &str) -> String {
    let mut body = format!("{id:016x}");
    body.push_str(&padding[..BODY_BYTES - 16]);
    body
}

/// The id a [`padded_body`] carries.
pub fn body_id(body: &str) -> BenchResult<u64> {
    let hex = body.get(..16).ok_or("short body")?;
    Ok(u64::from_str_radix(hex, 16)?)
}

/// A message id as long as a UUID (what the services would choose), unique per body id.
pub fn message_id(id: u64) -> String {
    format!("{id:036x}")
}

/// A received message: the id in its body, and the handle to delete it with.
pub type Received = (u64, String);

/// One way of driving a queue. Calls must be safe to make from many tasks at once.
pub trait Driver: Send + Sync + 'static {
    /// Sends `batch` messages with body ids `first..first + batch` as one call.
    fn send(
        &self,
        first: u64,
        batch: usize,
        padding: &str,
    ) -> impl Future<Output = BenchResult<()>> + Send;

    /// One receive call for up to `max` messages (long-polling where Sluice would).
    fn receive(&self, max: usize) -> impl Future<Output = BenchResult<Vec<Received>>> + Send;

    /// Deletes the messages of one receive (`batch` is the run's batch size); answers the
    /// calls it made.
    fn delete(
        &self,
        handles: Vec<String>,
        batch: usize,
    ) -> impl Future<Output = BenchResult<u64>> + Send;
}

/// What the producers and consumers of one run saw, shared between them.
#[derive(Default)]
struct Ledger {
    /// Deliveries per body id (ids are `producer << 32 | n`).
    received: Mutex<HashMap<u64, u32>>,
    unique: AtomicU64,
    deleted: AtomicU64,
    sent: AtomicU64,
    send_calls: AtomicU64,
    receive_calls: AtomicU64,
    empty_receives: AtomicU64,
    delete_calls: AtomicU64,
    producers_done: AtomicBool,
    /// Nanoseconds since the run started at the last successful delete.
    last_delete_nanos: AtomicU64,
    send_latencies: Mutex<Vec<Duration>>,
}

/// The figures of one run.
#[derive(Debug, Clone, Default)]
pub struct Flow {
    /// Messages deleted (duplicates not counted) per second, from the first send to the last
    /// delete (at least the window).
    pub msgs_per_second: f64,
    /// The seconds `msgs_per_second` is over.
    pub seconds: f64,
    /// Messages deleted (duplicates not counted).
    pub messages: u64,
    /// Messages acknowledged to producers.
    pub sent: u64,
    /// Acknowledged messages never received.
    pub lost: u64,
    /// Deliveries beyond the first of a message.
    pub duplicates: u64,
    /// Send calls (one per batch).
    pub send_calls: u64,
    /// Receive calls, empty ones included.
    pub receive_calls: u64,
    /// Receive calls that returned nothing.
    pub empty_receives: u64,
    /// Delete calls.
    pub delete_calls: u64,
    /// Every send call's latency, sorted.
    pub send_latencies: Vec<Duration>,
}

impl Flow {
    /// Client-side operations (send batches, receives, delete calls).
    pub fn ops(&self) -> u64 {
        self.send_calls + self.receive_calls + self.delete_calls
    }

    /// Client-side operations per second.
    pub fn ops_per_second(&self) -> f64 {
        self.ops() as f64 / self.seconds
    }
}

/// `producers` tasks send `batch` messages at a time for `window`; `consumers` tasks receive
/// up to `batch` and delete what they got, until every acknowledged message is deleted or
/// [`DRAIN_LIMIT`] passes.
pub async fn flow<D: Driver>(
    driver: Arc<D>,
    producers: usize,
    consumers: usize,
    batch: usize,
    window: Duration,
) -> BenchResult<Flow> {
    let ledger = Arc::new(Ledger::default());
    let padding: Arc<str> = "x".repeat(BODY_BYTES).into();
    let start = Instant::now();
    let deadline = start + window;

    let mut producer_tasks = Vec::new();
    for producer in 0..producers as u64 {
        let (driver, ledger, padding) = (driver.clone(), ledger.clone(), padding.clone());
        producer_tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            let mut latencies = Vec::new();
            while Instant::now() < deadline {
                let t = Instant::now();
                driver.send(producer << 32 | n, batch, &padding).await?;
                latencies.push(t.elapsed());
                ledger.send_calls.fetch_add(1, Ordering::Relaxed);
                ledger.sent.fetch_add(batch as u64, Ordering::Release);
                n += batch as u64;
            }
            ledger
                .send_latencies
                .lock()
                .map_err(|_| "poisoned")?
                .extend(latencies);
            Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
        }));
    }

    let mut consumer_tasks = Vec::new();
    for _ in 0..consumers {
        let (driver, ledger) = (driver.clone(), ledger.clone());
        consumer_tasks.push(tokio::spawn(async move {
            loop {
                let drained = ledger.producers_done.load(Ordering::Acquire)
                    && ledger.deleted.load(Ordering::Acquire)
                        >= ledger.sent.load(Ordering::Acquire);
                if drained || start.elapsed() > window + DRAIN_LIMIT {
                    return Ok::<(), Box<dyn std::error::Error + Send + Sync>>(());
                }
                let messages = driver.receive(batch).await?;
                ledger.receive_calls.fetch_add(1, Ordering::Relaxed);
                if messages.is_empty() {
                    ledger.empty_receives.fetch_add(1, Ordering::Relaxed);
                    continue;
                }
                let mut handles = Vec::with_capacity(messages.len());
                {
                    let mut received = ledger.received.lock().map_err(|_| "poisoned")?;
                    for (id, handle) in messages {
                        let count = received.entry(id).or_insert(0);
                        *count += 1;
                        if *count == 1 {
                            ledger.unique.fetch_add(1, Ordering::Relaxed);
                        }
                        handles.push(handle);
                    }
                }
                let deleted = handles.len() as u64;
                let calls = driver.delete(handles, batch).await?;
                ledger.delete_calls.fetch_add(calls, Ordering::Relaxed);
                ledger.deleted.fetch_add(deleted, Ordering::AcqRel);
                ledger
                    .last_delete_nanos
                    .fetch_max(start.elapsed().as_nanos() as u64, Ordering::Relaxed);
            }
        }));
    }

    for task in producer_tasks {
        task.await??;
    }
    ledger.producers_done.store(true, Ordering::Release);
    for task in consumer_tasks {
        task.await??;
    }
    let seconds = Duration::from_nanos(ledger.last_delete_nanos.load(Ordering::Relaxed))
        .max(window)
        .as_secs_f64();
    let sent = ledger.sent.load(Ordering::Relaxed);
    let duplicates: u64 = ledger
        .received
        .lock()
        .map_err(|_| "poisoned")?
        .values()
        .map(|&c| u64::from(c.saturating_sub(1)))
        .sum();
    let deleted = ledger.deleted.load(Ordering::Relaxed);
    let mut send_latencies =
        std::mem::take(&mut *ledger.send_latencies.lock().map_err(|_| "poisoned")?);
    send_latencies.sort_unstable();
    Ok(Flow {
        msgs_per_second: (deleted - duplicates) as f64 / seconds,
        seconds,
        messages: deleted - duplicates,
        sent,
        lost: sent.saturating_sub(ledger.unique.load(Ordering::Relaxed)),
        duplicates,
        send_calls: ledger.send_calls.load(Ordering::Relaxed),
        receive_calls: ledger.receive_calls.load(Ordering::Relaxed),
        empty_receives: ledger.empty_receives.load(Ordering::Relaxed),
        delete_calls: ledger.delete_calls.load(Ordering::Relaxed),
        send_latencies,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// An in-memory queue that delivers one chosen message twice.
    #[derive(Default)]
    struct Memory {
        queue: Mutex<VecDeque<u64>>,
        duplicated: AtomicBool,
    }

    impl Driver for Memory {
        async fn send(&self, first: u64, batch: usize, padding: &str) -> BenchResult<()> {
            let mut q = self.queue.lock().map_err(|_| "poisoned")?;
            for id in first..first + batch as u64 {
                q.push_back(body_id(&padded_body(id, padding))?);
            }
            Ok(())
        }

        async fn receive(&self, max: usize) -> BenchResult<Vec<Received>> {
            let out = {
                let mut q = self.queue.lock().map_err(|_| "poisoned")?;
                let mut out = Vec::new();
                while out.len() < max {
                    let Some(id) = q.pop_front() else { break };
                    out.push((id, message_id(id)));
                    if !self.duplicated.swap(true, Ordering::Relaxed) {
                        out.push((id, message_id(id)));
                    }
                }
                out
            };
            if out.is_empty() {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            Ok(out)
        }

        async fn delete(&self, _handles: Vec<String>, _batch: usize) -> BenchResult<u64> {
            Ok(1)
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn counts_every_message_and_the_duplicate() -> BenchResult<()> {
        let f = flow(
            Arc::new(Memory::default()),
            2,
            2,
            10,
            Duration::from_millis(50),
        )
        .await?;
        assert!(f.sent > 0 && f.sent % 10 == 0);
        assert_eq!((f.lost, f.duplicates), (0, 1));
        assert_eq!(f.messages, f.sent);
        assert_eq!(f.send_latencies.len() as u64, f.send_calls);
        assert!(f.ops() > f.send_calls && f.msgs_per_second > 0.0);
        Ok(())
    }
}
