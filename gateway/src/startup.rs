//! Start-up: opens the engine named by the settings (the only place that names a concrete
//! engine: embedded or Redis), binds the listener, starts background work, and serves until stopped.

use crate::app::router;
use crate::auth::Auth;
use crate::config::{Settings, Store};
use crate::state::AppState;
use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use sluice_engine::{Clock, Engine, SystemClock};
use sluice_redis::{RedisEngine, RedisOptions};
use sluice_services::{Limits, Services};
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::net::TcpListener;

/// A bound, ready-to-serve Sluice.
pub struct Application {
    listener: TcpListener,
    state: AppState,
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
        let engine = open_engine(settings).await?;
        let clock: Arc<dyn Clock> = Arc::new(SystemClock);
        let services = Services::new(
            engine,
            clock,
            Limits {
                max_message_bytes: settings.max_message_bytes,
            },
        );
        let listener =
            TcpListener::bind(settings.listen)
                .await
                .map_err(|error| StartError::Bind {
                    addr: settings.listen,
                    error,
                })?;
        Ok(Self {
            listener,
            state: AppState {
                services,
                auth: Arc::new(auth),
            },
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

    /// Serves until SIGINT or SIGTERM, then finishes the requests in flight.
    pub async fn run_until_stopped(self) -> std::io::Result<()> {
        let expiry = self.state.services.spawn_expiry(Duration::from_secs(1));
        let result = axum::serve(self.listener, router(self.state))
            .with_graceful_shutdown(shutdown_signal())
            .await;
        expiry.abort();
        result
    }
}

/// The only place that names a concrete engine.
async fn open_engine(settings: &Settings) -> Result<Arc<dyn Engine>, StartError> {
    match &settings.store {
        Store::Embedded => EmbeddedEngine::open(&settings.data_dir, EmbeddedOptions::default())
            .map(|engine| Arc::new(engine) as Arc<dyn Engine>)
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
                .map(|engine| Arc::new(engine) as Arc<dyn Engine>)
                .map_err(|e| StartError::Store {
                    store: url.clone(),
                    error: e.to_string(),
                })
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
