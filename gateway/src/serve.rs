//! Serving connections: the accept loop and its connection limit, the per-connection header and
//! idle timeouts, the request-body deadline, graceful shutdown, and the file-descriptor limit
//! raised at start. Nothing here knows a route: it serves whatever router it is given.
//!
//! A connection is on one of three clocks. From its opening, and from the first byte of each
//! later request, its request head must arrive within the header timeout. Between requests, with
//! nothing moving, it may stay open for the idle timeout. While a request is in progress (a long
//! poll included) neither clock runs: only the body deadline bounds how long the request's body
//! may take to arrive, and an expired body read answers 408 and closes the connection.

use axum::Router;
use hyper::body::{Bytes, Frame, Incoming, SizeHint};
use hyper::Request;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::{pin, Pin};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Notify, OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};
use tower::ServiceExt;

/// The bounds a server applies to its connections, resolved at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// Connections served at once; the rest wait in the listen backlog.
    pub max_connections: usize,
    /// How long a request head may take to arrive.
    pub header_timeout: Duration,
    /// How long a connection may sit idle between requests.
    pub idle_timeout: Duration,
    /// How long a request body may take to arrive.
    pub body_timeout: Duration,
    /// How long a stop waits for the requests in progress before closing their connections.
    pub shutdown_timeout: Duration,
}

/// The process's file-descriptor limits (`None`: unlimited or unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FdLimit {
    /// The soft limit in force.
    pub soft: Option<u64>,
    /// The hard limit the soft one may be raised to.
    pub hard: Option<u64>,
}

/// The default connection limit's ceiling: past it, memory rather than descriptors runs out.
pub const MAX_DEFAULT_CONNECTIONS: usize = 65_536;

/// Raises the soft file-descriptor limit to the hard one, where the system allows it, and
/// answers the limits then in force. Every connection holds a descriptor: a soft limit left at
/// a distribution's default (often 1024) would cap the server far below what it can serve.
#[cfg(unix)]
pub fn raise_fd_limit() -> FdLimit {
    use rustix::process::{getrlimit, setrlimit, Resource, Rlimit};
    let below = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) => a < b,
        (Some(_), None) => true,
        (None, _) => false,
    };
    let before = getrlimit(Resource::Nofile);
    if below(before.current, before.maximum) {
        let raised = setrlimit(
            Resource::Nofile,
            Rlimit {
                current: before.maximum,
                maximum: before.maximum,
            },
        );
        if raised.is_err() {
            // macOS refuses a soft limit above OPEN_MAX (10240), even under an unlimited hard one.
            let fallback = Some(before.maximum.map_or(10_240, |hard| hard.min(10_240)));
            if below(before.current, fallback) {
                let _ = setrlimit(
                    Resource::Nofile,
                    Rlimit {
                        current: fallback,
                        maximum: before.maximum,
                    },
                );
            }
        }
    }
    let now = getrlimit(Resource::Nofile);
    FdLimit {
        soft: now.current,
        hard: now.maximum,
    }
}

/// Where descriptors are not counted, there is nothing to raise.
#[cfg(not(unix))]
pub fn raise_fd_limit() -> FdLimit {
    FdLimit {
        soft: None,
        hard: None,
    }
}

/// Descriptors kept back from connections for the store's files, Redis connections, the
/// listener and logs.
pub fn reserved_descriptors(fd_limit: u64) -> u64 {
    (fd_limit / 10).clamp(64, 1024)
}

/// The connection limit when none is configured: what the descriptor limit leaves after the
/// reserve, at most [`MAX_DEFAULT_CONNECTIONS`]. A hard limit of 11,300 or more (Linux commonly
/// allows 1,048,576) leaves room for 10,000 long polls and other traffic.
pub fn default_max_connections(fd_limit: Option<u64>) -> usize {
    match fd_limit {
        None => MAX_DEFAULT_CONNECTIONS,
        Some(fds) => {
            let usable = fds.saturating_sub(reserved_descriptors(fds)).max(1);
            usize::try_from(usable)
                .unwrap_or(MAX_DEFAULT_CONNECTIONS)
                .min(MAX_DEFAULT_CONNECTIONS)
        }
    }
}

/// A request body that did not arrive within the body timeout.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive within {} seconds", .0.as_secs())]
pub struct BodyTimeout(pub Duration);

/// The body timeout that failed a body read, if that is why it failed: the body readers see
/// this error wrapped in their own.
pub fn body_timed_out(error: &(dyn std::error::Error + 'static)) -> Option<Duration> {
    let mut current = Some(error);
    while let Some(error) = current {
        if let Some(BodyTimeout(after)) = error.downcast_ref::<BodyTimeout>() {
            return Some(*after);
        }
        current = error.source();
    }
    None
}

/// How often, at most, the server says that the connection limit is reached.
const LIMIT_WARNING_INTERVAL: Duration = Duration::from_secs(60);

/// Serves `router` on `listener` within `bounds` until `shutdown` resolves, then stops
/// accepting, lets the requests in progress finish and closes idle connections.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    bounds: Bounds,
    shutdown: impl Future<Output = ()>,
) -> io::Result<()> {
    let slots = Arc::new(Semaphore::new(bounds.max_connections));
    let (stop_tx, _) = watch::channel(());
    let mut builder = auto::Builder::new(TokioExecutor::new());
    // No hyper timer: the header timeout is ours (hyper's would also end idle connections).
    builder.http1().header_read_timeout(None);
    let mut shutdown = pin!(shutdown);
    let mut last_warning: Option<Instant> = None;
    loop {
        let slot = match slots.clone().try_acquire_owned() {
            Ok(slot) => slot,
            Err(_) => {
                if last_warning.is_none_or(|at| at.elapsed() >= LIMIT_WARNING_INTERVAL) {
                    last_warning = Some(Instant::now());
                    tracing::warn!(
                        max_connections = bounds.max_connections,
                        "connection limit reached: {} connections open; new connections wait \
                         in the listen backlog until one closes (max_connections)",
                        bounds.max_connections
                    );
                }
                tokio::select! {
                    slot = slots.clone().acquire_owned() => match slot {
                        Ok(slot) => slot,
                        Err(_) => break,
                    },
                    () = &mut shutdown => break,
                }
            }
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    accept_failed(error).await;
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        tokio::spawn(serve_connection(
            stream,
            router.clone(),
            bounds,
            builder.clone(),
            stop_tx.subscribe(),
            slot,
        ));
    }
    drop(listener);
    let _ = stop_tx.send(());
    // Long-lived answers end on the stop signal by themselves; this bound is for whatever does
    // not (a client reading a large answer slowly), so that a stop always ends.
    if tokio::time::timeout(bounds.shutdown_timeout, stop_tx.closed())
        .await
        .is_err()
    {
        tracing::warn!(
            open = stop_tx.receiver_count(),
            "stopping: closing the connections whose requests did not finish within {}s \
             (shutdown_timeout_seconds)",
            bounds.shutdown_timeout.as_secs()
        );
    }
    Ok(())
}

/// Errors of one connection (the peer left before it was accepted) are nobody's concern;
/// others (such as running out of descriptors) are logged, and accepting pauses a second so
/// that a persistent error neither spins nor floods the log.
async fn accept_failed(error: io::Error) {
    if matches!(
        error.kind(),
        io::ErrorKind::ConnectionRefused
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
    ) {
        return;
    }
    tracing::error!("accept error: {error}");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

async fn serve_connection(
    stream: TcpStream,
    router: Router,
    bounds: Bounds,
    builder: auto::Builder<TokioExecutor>,
    mut stop: watch::Receiver<()>,
    _slot: OwnedSemaphorePermit,
) {
    let tracker = Arc::new(Tracker::new());
    let io = TokioIo::new(TrackedIo {
        stream,
        tracker: tracker.clone(),
    });
    let service = ConnectionService {
        router,
        tracker: tracker.clone(),
        body_timeout: bounds.body_timeout,
    };
    let mut connection = pin!(builder.serve_connection(io, service));
    let mut expired = pin!(tracker.expired(bounds.header_timeout, bounds.idle_timeout));
    let mut stopping = false;
    loop {
        tokio::select! {
            result = connection.as_mut() => {
                if let Err(error) = result {
                    tracing::debug!("connection ended: {error}");
                }
                break;
            }
            reason = expired.as_mut() => {
                // Dropping the connection closes it; no request is in progress on it.
                tracing::debug!("closing a connection: {reason}");
                break;
            }
            _ = stop.changed(), if !stopping => {
                stopping = true;
                connection.as_mut().graceful_shutdown();
            }
        }
    }
}

/// What a connection is doing, as its timeouts need to know.
struct Activity {
    /// Requests whose responses are not yet produced.
    in_flight: usize,
    /// Since when no request has been in progress and nothing has moved.
    quiet_since: Instant,
    /// When the head being awaited began: the connection's opening for the first request, then
    /// the first byte read while no request was in progress.
    head_started: Option<Instant>,
}

/// A connection's activity, shared by its socket, its requests and its watchdog.
struct Tracker {
    activity: Mutex<Activity>,
    changed: Notify,
}

impl Tracker {
    fn new() -> Self {
        let now = Instant::now();
        Tracker {
            activity: Mutex::new(Activity {
                in_flight: 0,
                quiet_since: now,
                head_started: Some(now),
            }),
            changed: Notify::new(),
        }
    }

    fn lock(&self) -> MutexGuard<'_, Activity> {
        // The data stays consistent even if a holder panicked: every update is one assignment.
        self.activity
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn bytes_read(&self) {
        let mut activity = self.lock();
        if activity.in_flight == 0 && activity.head_started.is_none() {
            activity.head_started = Some(Instant::now());
            drop(activity);
            self.changed.notify_one();
        }
    }

    fn bytes_written(&self) {
        let mut activity = self.lock();
        if activity.in_flight == 0 {
            // Only moves the deadline later: the watchdog notices when it wakes.
            activity.quiet_since = Instant::now();
        }
    }

    fn request_started(self: &Arc<Self>) -> InFlight {
        let mut activity = self.lock();
        activity.in_flight += 1;
        activity.head_started = None;
        drop(activity);
        self.changed.notify_one();
        InFlight(self.clone())
    }

    fn request_ended(&self) {
        let mut activity = self.lock();
        activity.in_flight = activity.in_flight.saturating_sub(1);
        if activity.in_flight == 0 {
            activity.quiet_since = Instant::now();
        }
        drop(activity);
        self.changed.notify_one();
    }

    /// When the connection is to close if nothing happens first, and why; none while a request
    /// is in progress.
    fn deadline(&self, header: Duration, idle: Duration) -> Option<(Instant, &'static str)> {
        let activity = self.lock();
        if activity.in_flight > 0 {
            None
        } else if let Some(started) = activity.head_started {
            Some((
                started + header,
                "the request head took longer than the header timeout",
            ))
        } else {
            Some((activity.quiet_since + idle, "idle for the idle timeout"))
        }
    }

    /// Resolves once the connection has outlived its header or idle timeout.
    async fn expired(&self, header: Duration, idle: Duration) -> &'static str {
        loop {
            let changed = self.changed.notified();
            match self.deadline(header, idle) {
                None => changed.await,
                Some((deadline, reason)) => {
                    if Instant::now() >= deadline {
                        return reason;
                    }
                    tokio::select! {
                        () = tokio::time::sleep_until(deadline) => {}
                        () = changed => {}
                    }
                }
            }
        }
    }
}

/// A request in progress; ends when dropped, whether its response was produced or abandoned.
struct InFlight(Arc<Tracker>);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.request_ended();
    }
}

/// The socket, telling the tracker when bytes move.
struct TrackedIo {
    stream: TcpStream,
    tracker: Arc<Tracker>,
}

impl AsyncRead for TrackedIo {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        let before = buf.filled().len();
        let poll = Pin::new(&mut this.stream).poll_read(cx, buf);
        if matches!(poll, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.tracker.bytes_read();
        }
        poll
    }
}

impl AsyncWrite for TrackedIo {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write(cx, buf);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            this.tracker.bytes_written();
        }
        poll
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.stream).poll_write_vectored(cx, bufs);
        if matches!(poll, Poll::Ready(Ok(n)) if n > 0) {
            this.tracker.bytes_written();
        }
        poll
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

/// The router as hyper calls it on one connection: counts the request as in progress and puts
/// a deadline on its body.
#[derive(Clone)]
struct ConnectionService {
    router: Router,
    tracker: Arc<Tracker>,
    body_timeout: Duration,
}

type ResponseFuture =
    Pin<Box<dyn Future<Output = Result<axum::response::Response, Infallible>> + Send>>;

impl hyper::service::Service<Request<Incoming>> for ConnectionService {
    type Response = axum::response::Response;
    type Error = Infallible;
    type Future = ResponseFuture;

    fn call(&self, request: Request<Incoming>) -> Self::Future {
        let in_flight = self.tracker.request_started();
        let timeout = self.body_timeout;
        let request = request.map(|body| TimedBody {
            body,
            timeout,
            deadline: Instant::now() + timeout,
            sleep: None,
        });
        let router = self.router.clone();
        Box::pin(async move {
            let response = router.oneshot(request).await;
            drop(in_flight);
            response
        })
    }
}

/// A request body that fails with [`BodyTimeout`] once its deadline passes: a client that
/// stops sending, or trickles, cannot hold what was read so far in memory.
struct TimedBody {
    body: Incoming,
    timeout: Duration,
    deadline: Instant,
    /// Made when a read first has to wait: most bodies are already buffered when read.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl hyper::body::Body for TimedBody {
    type Data = Bytes;
    type Error = axum::BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        let this = self.get_mut();
        let timed_out = || Poll::Ready(Some(Err(BodyTimeout(this.timeout).into())));
        match Pin::new(&mut this.body).poll_frame(cx) {
            // Checked on every frame too, so that a trickle of bytes cannot keep the body alive.
            Poll::Ready(Some(Ok(_))) if Instant::now() >= this.deadline => timed_out(),
            Poll::Ready(frame) => Poll::Ready(frame.map(|result| result.map_err(Into::into))),
            Poll::Pending => {
                let deadline = this.deadline;
                let sleep = this
                    .sleep
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
                match sleep.as_mut().poll(cx) {
                    Poll::Ready(()) => timed_out(),
                    Poll::Pending => Poll::Pending,
                }
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_default_limit_leaves_a_reserve_and_room_for_ten_thousand_long_polls() {
        assert_eq!(default_max_connections(Some(1024)), 1024 - 102);
        assert_eq!(default_max_connections(Some(100)), 36);
        assert_eq!(default_max_connections(Some(10)), 1);
        assert!(default_max_connections(Some(11_300)) >= 10_000);
        assert_eq!(default_max_connections(Some(20_000)), 20_000 - 1024);
        assert_eq!(
            default_max_connections(Some(1_048_576)),
            MAX_DEFAULT_CONNECTIONS
        );
        assert_eq!(default_max_connections(None), MAX_DEFAULT_CONNECTIONS);
    }

    #[test]
    fn a_body_timeout_is_found_inside_the_errors_that_wrap_it() {
        let inner = axum::Error::new(BodyTimeout(Duration::from_secs(3)));
        let outer = axum::Error::new(inner);
        assert_eq!(body_timed_out(&outer), Some(Duration::from_secs(3)));
        let other = axum::Error::new(io::Error::other("reset"));
        assert_eq!(body_timed_out(&other), None);
    }
}
