//! Time as the engines see it: milliseconds since the Unix epoch, taken from a [`Clock`] the
//! caller controls, so tests can move time instead of sleeping.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Milliseconds since the Unix epoch (UTC).
pub type Millis = u64;

/// A source of "now" and of sleeps measured against that same now.
pub trait Clock: Send + Sync + 'static {
    /// The current time.
    fn now(&self) -> Millis;
    /// Completes once `now() >= deadline`.
    fn sleep_until(&self, deadline: Millis) -> Pin<Box<dyn Future<Output = ()> + Send>>;
}

/// The wall clock, used in production.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Millis {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_millis() as Millis)
            .unwrap_or(0)
    }

    fn sleep_until(&self, deadline: Millis) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let wait = deadline.saturating_sub(self.now());
        Box::pin(tokio::time::sleep(Duration::from_millis(wait)))
    }
}

/// A clock that moves only when told to; sleepers wake when it passes their deadline.
#[derive(Debug, Clone)]
pub struct ManualClock {
    now: Arc<tokio::sync::watch::Sender<Millis>>,
}

impl ManualClock {
    /// A clock standing at `start`.
    pub fn new(start: Millis) -> Self {
        Self {
            now: Arc::new(tokio::sync::watch::Sender::new(start)),
        }
    }

    /// Moves time forward by `ms`, waking every sleeper whose deadline has passed.
    pub fn advance(&self, ms: Millis) {
        self.now.send_modify(|now| *now += ms);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Millis {
        *self.now.borrow()
    }

    fn sleep_until(&self, deadline: Millis) -> Pin<Box<dyn Future<Output = ()> + Send>> {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // The sender lives as long as any clone of the clock; if it is gone, time has stopped
            // for good and the sleeper would never wake, so it returns.
            let _ = rx.wait_for(|now| *now >= deadline).await;
        })
    }
}
