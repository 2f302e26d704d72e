//! Start-up: opens the engine named by the settings (the only place that names a concrete
//! engine: embedded or Redis) and the payload store, raises the file-descriptor limit and
//! resolves the connection bounds, binds the listener, starts background work, and serves until
//! stopped.

use crate::app::router;
use crate::auth::Auth;
use crate::config::{PayloadStoreConfig, Settings, Store};
use crate::serve::{self, Bounds};
use crate::state::AppState;
use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{Clock, Engine, LocalRateLimiter, RateLimiter, SystemClock};
use sluice_payload::{LocalStore, PayloadStore, S3Store};
use sluice_redis::{RedisEngine, RedisOptions};
use sluice_services::{Background, Limits, PayloadSettings, Services};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// A bound, ready-to-serve Sluice.
pub struct Application {
    listener: TcpListener,
    state: AppState,
    bounds: Bounds,
    /// How long a stop keeps serving after readiness turns 503.
    drain: std::time::Duration,
}

/// Why the service could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    /// The settings are unusable.
    #[error("{0}")]
    Config(String),
    /// The store could not be opened.
    #[error("store: cannot open {store}: {error}")]
    Store {
        /// The data folder or the Redis address.
        store: String,
        /// Why.
        error: String,
    },
    /// The address could not be bound.
    #[error("listen: cannot bind {addr}: {error}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        error: std::io::Error,
    },
}

impl Application {
    /// Opens the store and binds the listener.
    pub async fn build(settings: &Settings) -> Result<Self, StartError> {
        let auth = Auth::new(
            settings.key_material(),
            settings.issuer.clone(),
            settings.audience.clone(),
        )
        .map_err(StartError::Config)?;
        let bounds = connection_bounds(settings);
        let (engine, limiter) = open_engine(settings).await?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let services = Services::new(
            engine,
            clock,
            Limits {
                max_message_bytes: settings.max_message_bytes,
                max_waiting_polls: settings.connections.max_waiting_polls,
            },
        )
        .with_metrics_per_queue(settings.metrics_per_queue)
        .with_aws_region(settings.aws_region.clone())
        .with_rate_limiter(limiter);
        if matches!(settings.store, Store::Redis { .. })
            && matches!(settings.payloads.store, PayloadStoreConfig::Local(_))
        {
            tracing::warn!(
                "payload_store local on Redis: other gateways on this Redis cannot read the \
                 bodies this one spills; give every gateway the same s3:// store"
            );
        }
        let services = match open_payload_store(&settings.payloads.store).await? {
            Some(store) => services.with_payloads(PayloadSettings {
                store,
                spill_threshold_bytes: settings.payloads.spill_threshold_bytes,
                orphan_grace: settings.payloads.orphan_grace,
            }),
            None => services,
        };
        let listener =
            TcpListener::bind(settings.listen)
                .await
                .map_err(|error| StartError::Bind {
                    addr: settings.listen,
                    error,
                })?;
        let public_url = match &settings.public_url {
            Some(url) => url.clone(),
            None => format!(
                "http://{}",
                listener.local_addr().unwrap_or(settings.listen)
            ),
        };
        Ok(Self {
            listener,
            state: AppState {
                public_url: Arc::new(public_url),
                services,
                auth: Arc::new(auth),
                in_flight: Arc::new(tokio::sync::Semaphore::new(
                    settings.connections.max_in_flight_requests,
                )),
                body_budget: crate::body_budget::BodyBudget::new(settings.max_body_bytes_in_flight),
            },
            bounds,
            drain: settings.connections.shutdown_drain,
        })
    }

    /// The bound address (the real port when 0 was asked for).
    pub fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// The shared state (for minting start-up tokens).
    pub fn state(&self) -> &AppState {
        &self.state
    }

    /// The connection limit and timeouts in force.
    pub fn bounds(&self) -> Bounds {
        self.bounds
    }

    /// Serves until SIGINT or SIGTERM; then readiness fails, waiting long polls answer at once,
    /// no connection is accepted, the requests in flight finish and background jobs stop.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let background = Background::start(
            &self.state.services,
            Duration::from_secs(1),
            crate::metrics::SAMPLE_PERIOD,
        );
        let upkeep = crate::metrics::spawn_upkeep();
        let services = self.state.services.clone();
        let drain = self.drain;
        let stop = async move {
            shutdown_signal().await;
            tracing::info!(
                drain_seconds = drain.as_secs(),
                "stopping: readiness fails, waiting long polls and live streams end; the \
                 listener closes after the drain, then requests in flight finish"
            );
            services.begin_stopping();
            tokio::time::sleep(drain).await;
        };
        let result = serve::serve(self.listener, router(self.state), self.bounds, stop).await;
        background.stop();
        upkeep.abort();
        result
    }
}

/// Raises the descriptor limit first: the default connection limit is derived from it.
fn connection_bounds(settings: &Settings) -> Bounds {
    let limits = settings.connections;
    let fds = serve::raise_fd_limit();
    let bounds = Bounds {
        max_connections: limits
            .max_connections
            .unwrap_or_else(|| serve::default_max_connections(fds.soft)),
        header_timeout: limits.header_timeout,
        idle_timeout: limits.idle_timeout,
        body_timeout: limits.body_timeout,
        shutdown_timeout: limits.shutdown_timeout,
    };
    let show = |limit: Option<u64>| limit.map_or("unlimited".to_owned(), |n| n.to_string());
    tracing::info!(
        "connection bounds: max_connections {}, file-descriptor limit {} (hard {}), header \
         timeout {}s, idle timeout {}s, body timeout {}s",
        bounds.max_connections,
        show(fds.soft),
        show(fds.hard),
        bounds.header_timeout.as_secs(),
        bounds.idle_timeout.as_secs(),
        bounds.body_timeout.as_secs(),
    );
    if let Some(fds) = fds.soft {
        if bounds.max_connections as u64 > fds.saturating_sub(serve::reserved_descriptors(fds)) {
            tracing::warn!(
                "max_connections {} leaves fewer than {} of the {fds} file descriptors for the \
                 store and logs: accepting may fail with \"Too many open files\"",
                bounds.max_connections,
                serve::reserved_descriptors(fds),
            );
        }
    }
    bounds
}

/// The only place that names a concrete engine.
/// The engine and the rate limiter that goes with it: in process for the embedded store (one
/// gateway owns it), in Redis for Redis (gateways on one Redis share each tenant's bucket).
async fn open_engine(
    settings: &Settings,
) -> Result<(Arc<dyn Engine>, Arc<dyn RateLimiter>), StartError> {
    match &settings.store {
        Store::Embedded => EmbeddedEngine::open(&settings.data_dir, EmbeddedOptions::default())
            .map(|engine| {
                let limiter: Arc<dyn RateLimiter> = Arc::new(LocalRateLimiter::new());
                (Arc::new(engine) as Arc<dyn Engine>, limiter)
            })
            .map_err(|e| StartError::Store {
                store: settings.data_dir.display().to_string(),
                error: e.to_string(),
            }),
        Store::Redis {
            url,
            key_prefix,
            wait_replicas,
            timeout,
        } => {
            let options = RedisOptions {
                key_prefix: key_prefix.clone(),
                wait_replicas: *wait_replicas,
                command_timeout: *timeout,
                ..RedisOptions::default()
            };
            RedisEngine::connect(url, options)
                .await
                .map(|engine| {
                    let engine = Arc::new(engine);
                    (
                        engine.clone() as Arc<dyn Engine>,
                        engine as Arc<dyn RateLimiter>,
                    )
                })
                .map_err(|e| StartError::Store {
                    store: url.clone(),
                    error: e.to_string(),
                })
        }
    }
}

/// The payload store the settings name, if any. An S3 bucket that does not answer is not a
/// start-up error (only logged): the gateway serves small bodies meanwhile, and spilling sends
/// answer 503 until it does.
async fn open_payload_store(
    config: &PayloadStoreConfig,
) -> Result<Option<Arc<dyn PayloadStore>>, StartError> {
    match config {
        PayloadStoreConfig::None => Ok(None),
        PayloadStoreConfig::Local(folder) => LocalStore::open(folder)
            .map(|store| Some(Arc::new(store) as Arc<dyn PayloadStore>))
            .map_err(|e| StartError::Store {
                store: format!("payload store {}", folder.display()),
                error: e.to_string(),
            }),
        PayloadStoreConfig::S3(s3) => {
            let store = S3Store::connect(s3.clone()).await;
            let probe = store.clone();
            let bucket = s3.bucket.clone();
            tokio::spawn(async move {
                if let Err(error) = probe.ping().await {
                    tracing::warn!(
                        %bucket,
                        %error,
                        "the payload store does not answer; sends of large bodies answer 503 until it does"
                    );
                }
            });
            Ok(Some(Arc::new(store)))
        }
    }
}

async fn shutdown_signal() {
    let interrupt = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let terminate = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut signal) => {
                signal.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        _ = interrupt => {}
        _ = terminate => {}
    }
}
