//! Long-poll wake-ups across gateways.
//!
//! Scripts that may make a message receivable (send, a visibility reset to 0, and a queue
//! deletion, which waiters must notice) `PUBLISH` `<instance> <tenant>/<queue>` on one channel
//! as part of the script itself, so a send stays one Redis call. Each engine keeps one pub/sub
//! connection subscribed to that channel ([`run_subscriber`]) and bumps the local watch
//! channel of the named queue, if anyone in this process listens to it. The engine that ran
//! the script has already woken its own listeners (without the Redis round trip), so it skips
//! its own messages.
//!
//! Pub/sub is fire-and-forget: during an outage notifications are lost. After every
//! (re)subscription every local listener is woken once, so waiters look again; beyond that the
//! services' long poll also wakes at its deadline and at the `next_visible_at` hint, so a lost
//! wake-up delays a receive, never loses a message, and nothing spins.

use futures_util::StreamExt;
use std::collections::HashMap;
use std::sync::{Mutex, MutexGuard, PoisonError, Weak};
use std::time::Duration;
use tokio::sync::{oneshot, watch};

/// How often an idle subscription checks that its connection still answers.
const HEARTBEAT: Duration = Duration::from_secs(10);
/// The longest pause between two subscription attempts while Redis is away.
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// The local listeners of every queue, by `<tenant>/<queue>`.
pub(crate) struct Wakers {
    instance: String,
    channels: Mutex<Channels>,
}

struct Channels {
    by_queue: HashMap<String, watch::Sender<u64>>,
    /// Size at which unused senders are dropped next.
    prune_at: usize,
}

impl Wakers {
    pub(crate) fn new() -> Self {
        Self {
            instance: format!("{:016x}", rand::random::<u64>()),
            channels: Mutex::new(Channels {
                by_queue: HashMap::new(),
                prune_at: 1024,
            }),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Channels> {
        // Only counters live under this lock: a panic elsewhere cannot leave them inconsistent.
        self.channels.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// What a script publishes for `queue_id`.
    pub(crate) fn payload(&self, queue_id: &str) -> String {
        format!("{} {queue_id}", self.instance)
    }

    /// A receiver that sees every wake-up of `queue_id` from now on.
    pub(crate) fn listen(&self, queue_id: &str) -> watch::Receiver<u64> {
        let mut channels = self.lock();
        if channels.by_queue.len() >= channels.prune_at {
            channels.by_queue.retain(|_, tx| tx.receiver_count() > 0);
            channels.prune_at = (channels.by_queue.len() * 2).max(1024);
        }
        channels
            .by_queue
            .entry(queue_id.to_owned())
            .or_insert_with(|| watch::Sender::new(0))
            .subscribe()
    }

    /// Wakes this process's listeners of one queue.
    pub(crate) fn wake(&self, queue_id: &str) {
        let mut channels = self.lock();
        let unused = match channels.by_queue.get(queue_id) {
            Some(tx) if tx.receiver_count() > 0 => {
                tx.send_modify(|n| *n = n.wrapping_add(1));
                false
            }
            Some(_) => true,
            None => false,
        };
        if unused {
            channels.by_queue.remove(queue_id);
        }
    }

    /// Wakes every listener of this process (after wake-ups may have been lost).
    pub(crate) fn wake_all(&self) {
        let mut channels = self.lock();
        channels.by_queue.retain(|_, tx| tx.receiver_count() > 0);
        for tx in channels.by_queue.values() {
            tx.send_modify(|n| *n = n.wrapping_add(1));
        }
    }

    /// Handles one published payload.
    fn on_message(&self, payload: &[u8]) {
        let Ok(text) = std::str::from_utf8(payload) else {
            return;
        };
        match text.split_once(' ') {
            // Our own scripts' wake-ups were delivered locally already.
            Some((instance, _)) if instance == self.instance => {}
            Some((_, queue_id)) => self.wake(queue_id),
            None => {}
        }
    }
}

/// Keeps one subscription to `channel` alive until the engine (the owner of `wakers`) is
/// gone, trying `urls` in turn. Signals `ready` after the first successful subscription.
pub(crate) async fn run_subscriber(
    wakers: Weak<Wakers>,
    urls: Vec<String>,
    channel: String,
    timeout: Duration,
    ready: oneshot::Sender<()>,
) {
    let mut ready = Some(ready);
    let mut backoff = Duration::from_millis(50);
    for attempt in 0usize.. {
        let Some(url) = urls.get(attempt % urls.len().max(1)) else {
            return;
        };
        match subscribe(url, &channel, timeout).await {
            Ok(pubsub) => {
                let Some(owner) = wakers.upgrade() else {
                    return;
                };
                // Whatever was published while we were not subscribed is lost: look again.
                owner.wake_all();
                drop(owner);
                if let Some(tx) = ready.take() {
                    let _ = tx.send(());
                }
                backoff = Duration::from_millis(50);
                if !pump(&wakers, pubsub, timeout).await {
                    return;
                }
                let url = crate::conn::redacted(url);
                tracing::warn!(%url, "lost the wake-up subscription; subscribing again");
            }
            Err(error) => {
                let url = crate::conn::redacted(url);
                tracing::warn!(%url, %error, "cannot subscribe to wake-ups; retrying");
            }
        }
        if wakers.strong_count() == 0 {
            return;
        }
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn subscribe(
    url: &str,
    channel: &str,
    timeout: Duration,
) -> Result<redis::aio::PubSub, String> {
    let connecting = async {
        let client = redis::Client::open(url)?;
        let mut pubsub = client.get_async_pubsub().await?;
        pubsub.subscribe(channel).await?;
        Ok::<_, redis::RedisError>(pubsub)
    };
    match tokio::time::timeout(timeout, connecting).await {
        Ok(Ok(pubsub)) => Ok(pubsub),
        Ok(Err(e)) => Err(e.to_string()),
        Err(_) => Err(format!("no answer within {timeout:?}")),
    }
}

/// Dispatches messages until the connection fails (`true`: subscribe again) or the engine is
/// gone (`false`).
async fn pump(wakers: &Weak<Wakers>, pubsub: redis::aio::PubSub, timeout: Duration) -> bool {
    let (mut sink, mut stream) = pubsub.split();
    let mut heartbeat =
        tokio::time::interval_at(tokio::time::Instant::now() + HEARTBEAT, HEARTBEAT);
    loop {
        tokio::select! {
            message = stream.next() => {
                let Some(message) = message else {
                    return true;
                };
                let Some(owner) = wakers.upgrade() else {
                    return false;
                };
                owner.on_message(message.get_payload_bytes());
            }
            _ = heartbeat.tick() => {
                if wakers.strong_count() == 0 {
                    return false;
                }
                let ping = tokio::time::timeout(timeout, sink.ping::<redis::Value>()).await;
                if !matches!(ping, Ok(Ok(_))) {
                    return true;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn wakes_listeners_of_the_named_queue_only_and_skips_its_own() {
        let wakers = Wakers::new();
        let mut a = wakers.listen("t/a");
        let b = wakers.listen("t/b");
        wakers.on_message(b"someone-else t/a");
        assert!(a.has_changed().unwrap());
        assert!(!b.has_changed().unwrap());
        a.mark_unchanged();
        wakers.on_message(wakers.payload("t/b").as_bytes());
        assert!(
            !b.has_changed().unwrap(),
            "our own wake-ups are delivered locally"
        );
        wakers.wake_all();
        assert!(a.has_changed().unwrap() && b.has_changed().unwrap());
        drop(a);
        wakers.wake("t/a");
        assert!(
            !wakers.lock().by_queue.contains_key("t/a"),
            "unused senders go"
        );
    }
}
