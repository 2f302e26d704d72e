//! The memory budget of request bodies: one gateway-wide bound on the bytes held by the bodies
//! of the requests in progress (`--max-body-bytes-in-flight`), so that no mix of requests —
//! each within its own body limit — can exhaust the process's memory. Owns the budget, the
//! reservations taken against it, the middleware that keeps a request's reservations until its
//! answer is made, and [`read_body`], the one function that reads a request body into memory
//! (REST's JSON extractor and the AWS endpoint both read through it).
//!
//! A body is charged before its bytes are buffered: its declared `Content-Length` at once (the
//! buffer is allocated to that size up front), or, without one, each chunk as it arrives. When
//! the budget cannot cover it the request is refused at once with [`BodyError::Busy`] (503
//! with `Retry-After`), never queued: a client retries, memory does not grow. The charge stays
//! until the request's answer is made, not only while the body is read, because handlers keep
//! the body (or what was parsed from it, of the same order of size) until then. A body larger
//! than the whole budget could never be held and is refused as too large instead.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{header, Extensions, HeaderMap};
use axum::middleware::Next;
use axum::response::Response;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The least budget that can be configured: one request of the smallest kind (64 KiB).
pub const MIN_BUDGET_BYTES: usize = 64 * 1024;
/// The default budget's floor.
pub const DEFAULT_BUDGET_FLOOR_BYTES: usize = 256 * 1024 * 1024;

/// The default budget for a server whose largest message is `max_message_bytes`: room for
/// four of the largest single sends at once (each up to three times the message, escaped), and
/// never less than 256 MiB — so 256 MiB up to 21 MiB messages, 768 MiB with 64 MiB ones.
pub fn default_budget(max_message_bytes: u32) -> usize {
    let send = 3 * max_message_bytes as usize + 64 * 1024;
    (4 * send).max(DEFAULT_BUDGET_FLOOR_BYTES)
}

/// Why a body could not be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BodyError {
    /// The body is (or declares itself) larger than the request may send, in bytes.
    #[error("the request body is larger than {0} bytes")]
    TooLarge(usize),
    /// The body did not arrive within the body timeout (seconds).
    #[error("the request body did not arrive within {0} seconds")]
    TimedOut(u64),
    /// The bodies of the requests in progress hold the whole budget.
    #[error(
        "request bodies being read hold this gateway's max_body_bytes_in_flight already; \
         retry shortly"
    )]
    Busy,
}

/// The gateway's budget. Cheap to clone; clones share it.
#[derive(Debug, Clone)]
pub struct BodyBudget {
    capacity: usize,
    used: Arc<AtomicUsize>,
}

impl BodyBudget {
    /// A budget of `capacity` bytes.
    pub fn new(capacity: usize) -> Self {
        Self {
            capacity,
            used: Arc::new(AtomicUsize::new(0)),
        }
    }

    /// The configured bound.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The bytes reserved now.
    pub fn in_use(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    /// An empty reservation, to grow as bytes arrive.
    pub fn reservation(&self) -> Reservation {
        Reservation {
            bytes: 0,
            used: self.used.clone(),
            capacity: self.capacity,
        }
    }
}

/// Bytes taken from a [`BodyBudget`], given back when dropped.
#[derive(Debug)]
pub struct Reservation {
    bytes: usize,
    used: Arc<AtomicUsize>,
    capacity: usize,
}

impl Reservation {
    /// Takes `more` bytes, or refuses (taking nothing) when the budget cannot cover them.
    pub fn grow(&mut self, more: usize) -> Result<(), BodyError> {
        let taken = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(more)
                    .filter(|&total| total <= self.capacity)
            });
        match taken {
            Ok(_) => {
                self.bytes += more;
                Ok(())
            }
            Err(_) => {
                metrics::counter!("sluice_overload_rejections_total", "reason" => "body_bytes")
                    .increment(1);
                Err(BodyError::Busy)
            }
        }
    }

    /// The bytes held.
    pub fn bytes(&self) -> usize {
        self.bytes
    }
}

impl Drop for Reservation {
    fn drop(&mut self) {
        self.used.fetch_sub(self.bytes, Ordering::AcqRel);
    }
}

/// A request's reservations, kept in its extensions by [`hold`] until its answer is made.
#[derive(Debug, Clone, Default)]
pub struct Held(Arc<Mutex<Vec<Reservation>>>);

impl Held {
    fn keep(&self, reservation: Reservation) {
        // A poisoned lock only means another holder panicked; the list is still a list.
        let mut list = self.0.lock().unwrap_or_else(|e| e.into_inner());
        list.push(reservation);
    }
}

/// Middleware: gives every request a [`Held`] slot and drops what it holds once the handler
/// has answered, so a body's bytes count until its request is done.
pub async fn hold(mut request: Request, next: Next) -> Response {
    let held = Held::default();
    request.extensions_mut().insert(held.clone());
    let response = next.run(request).await;
    drop(held);
    response
}

/// Reads a body of at most `limit` bytes (and at most the whole budget) into one buffer, sized
/// up front from the declared length, so a large body is held once (not as received chunks
/// plus their concatenation). The bytes are charged to `budget` before they are buffered and
/// stay charged until the request's answer is made (see [`hold`]; without its slot, until this
/// function returns).
pub async fn read_body(
    headers: &HeaderMap,
    extensions: &Extensions,
    body: Body,
    limit: usize,
    budget: &BodyBudget,
) -> Result<Vec<u8>, BodyError> {
    use futures_util::StreamExt;
    let limit = limit.min(budget.capacity());
    let declared = declared_length(headers);
    if declared.is_some_and(|length| length > limit as u64) {
        return Err(BodyError::TooLarge(limit));
    }
    let expected = declared.map_or(0, |n| usize::try_from(n).unwrap_or(limit));
    let mut reservation = budget.reservation();
    reservation.grow(expected)?;
    let mut buffer = Vec::with_capacity(expected);
    let mut stream = body.into_data_stream();
    while let Some(chunk) = stream.next().await {
        let chunk = chunk.map_err(|error| match crate::serve::body_timed_out(&error) {
            Some(after) => BodyError::TimedOut(after.as_secs()),
            None => BodyError::TooLarge(limit),
        })?;
        let total = buffer.len() + chunk.len();
        if total > limit {
            return Err(BodyError::TooLarge(limit));
        }
        if total > reservation.bytes() {
            reservation.grow(total - reservation.bytes())?;
        }
        buffer.extend_from_slice(&chunk);
    }
    if let Some(held) = extensions.get::<Held>() {
        held.keep(reservation);
    }
    Ok(buffer)
}

/// The declared `Content-Length`, if readable.
pub fn declared_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(length: Option<usize>) -> HeaderMap {
        let mut headers = HeaderMap::new();
        if let Some(length) = length {
            headers.insert(header::CONTENT_LENGTH, length.into());
        }
        headers
    }

    #[test]
    fn reservations_share_the_budget_and_give_it_back_when_dropped() {
        let budget = BodyBudget::new(100);
        let mut a = budget.reservation();
        a.grow(60).unwrap();
        let mut b = budget.reservation();
        assert_eq!(b.grow(41), Err(BodyError::Busy));
        assert_eq!(b.bytes(), 0);
        b.grow(40).unwrap();
        assert_eq!(budget.in_use(), 100);
        drop(a);
        assert_eq!(budget.in_use(), 40);
        drop(b);
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test]
    async fn a_body_is_charged_until_its_slot_is_dropped() {
        let budget = BodyBudget::new(1000);
        let held = Held::default();
        let mut extensions = Extensions::new();
        extensions.insert(held.clone());
        let body = read_body(
            &headers(Some(600)),
            &extensions,
            Body::from(vec![7u8; 600]),
            10_000,
            &budget,
        )
        .await
        .unwrap();
        assert_eq!(body.len(), 600);
        assert_eq!(budget.in_use(), 600);
        // A second body the rest of the budget cannot cover is refused before it is read.
        let refused = read_body(
            &headers(Some(500)),
            &Extensions::new(),
            Body::from(vec![7u8; 500]),
            10_000,
            &budget,
        )
        .await;
        assert_eq!(refused, Err(BodyError::Busy));
        // Chunked bodies are charged as they arrive.
        let chunked = read_body(
            &headers(None),
            &Extensions::new(),
            Body::from(vec![7u8; 400]),
            10_000,
            &budget,
        )
        .await;
        assert_eq!(chunked.map(|b| b.len()), Ok(400));
        assert_eq!(
            budget.in_use(),
            600,
            "without a slot the charge ends with the read"
        );
        drop(extensions);
        drop(held);
        assert_eq!(budget.in_use(), 0);
    }

    #[tokio::test]
    async fn bodies_above_the_limit_or_the_whole_budget_are_too_large() {
        let budget = BodyBudget::new(1000);
        let none = Extensions::new();
        let over_limit = read_body(
            &headers(Some(101)),
            &none,
            Body::from(vec![0u8; 101]),
            100,
            &budget,
        )
        .await;
        assert_eq!(over_limit, Err(BodyError::TooLarge(100)));
        let over_budget = read_body(
            &headers(None),
            &none,
            Body::from(vec![0u8; 1001]),
            5000,
            &budget,
        )
        .await;
        assert_eq!(over_budget, Err(BodyError::TooLarge(1000)));
        assert_eq!(budget.in_use(), 0);
    }
}
