//! Configuration: command-line flags, `SLUICE_…` environment variables and an optional TOML
//! file, in that order of precedence over the defaults; validated once at start with errors that
//! name the setting. With nothing configured, `serve` runs in development mode.

use crate::auth::KeyMaterial;
use crate::secret::Secret;
use clap::{Args, Parser, Subcommand};
use jsonwebtoken::Algorithm;
use rand::RngCore;
use serde::Deserialize;
use sluice_payload::S3Settings;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

/// `sluice`: multi-tenant message queues over HTTP.
#[derive(Debug, Parser)]
#[command(name = "sluice", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Runs the service.
    Serve(CommonArgs),
    /// Mints a token with the configured secret (or the data folder's generated key).
    Token(TokenArgs),
}

/// Settings shared by every subcommand.
#[derive(Debug, Default, Clone, Args, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CommonArgs {
    /// A TOML file with any of these settings (snake_case keys).
    #[arg(long, env = "SLUICE_CONFIG")]
    #[serde(skip)]
    pub config: Option<PathBuf>,
    /// Address to listen on (port 0 picks a free port). Default 127.0.0.1:8080.
    #[arg(long, env = "SLUICE_LISTEN")]
    pub listen: Option<String>,
    /// Where the embedded store (and a generated signing key) live. Default ./data.
    #[arg(long, env = "SLUICE_DATA_DIR")]
    pub data_dir: Option<PathBuf>,
    /// HS256 shared secret (at least 32 bytes) that signs and verifies tokens.
    #[arg(long, env = "SLUICE_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<Secret<String>>,
    /// PEM file of a public key that verifies tokens (instead of a shared secret).
    #[arg(long, env = "SLUICE_JWT_PUBLIC_KEY")]
    pub jwt_public_key: Option<PathBuf>,
    /// The public key's algorithm: EdDSA, RS256 or ES256.
    #[arg(long, env = "SLUICE_JWT_ALGORITHM")]
    pub jwt_algorithm: Option<String>,
    /// Required `iss` claim.
    #[arg(long, env = "SLUICE_JWT_ISSUER")]
    pub jwt_issuer: Option<String>,
    /// Required `aud` claim.
    #[arg(long, env = "SLUICE_JWT_AUDIENCE")]
    pub jwt_audience: Option<String>,
    /// Largest message any queue may accept, in bytes: 1024–1048576, or up to 67108864 with a
    /// payload store. Default 1048576.
    #[arg(long, env = "SLUICE_MAX_MESSAGE_BYTES")]
    pub max_message_bytes: Option<u32>,
    /// Where bodies above `spill_threshold_bytes` go: `local` (the folder `payloads/` in the
    /// data folder; the default on the embedded store), `s3://BUCKET[/PREFIX]` (credentials
    /// from the standard AWS environment variables or profile), or `none` (the default on
    /// Redis: a local folder is not shared between gateways).
    #[arg(long, env = "SLUICE_PAYLOAD_STORE")]
    pub payload_store: Option<String>,
    /// S3: the store's URL when it is not AWS's (`http://127.0.0.1:9000`).
    #[arg(long, env = "SLUICE_S3_ENDPOINT")]
    pub s3_endpoint: Option<String>,
    /// S3: the region to sign for. Default: `AWS_REGION`, else `us-east-1`.
    #[arg(long, env = "SLUICE_S3_REGION")]
    pub s3_region: Option<String>,
    /// S3: address the bucket in the path rather than the host name (most self-hosted
    /// S3-compatible servers need it). Default false.
    #[arg(long, env = "SLUICE_S3_FORCE_PATH_STYLE", num_args = 0..=1, default_missing_value = "true")]
    pub s3_force_path_style: Option<bool>,
    /// Bodies larger than this many bytes go to the payload store (1–67108864). Default 262144.
    #[arg(long, env = "SLUICE_SPILL_THRESHOLD_BYTES")]
    pub spill_threshold_bytes: Option<usize>,
    /// Seconds before a payload object whose message never committed may be removed
    /// (1–604800). Default 3600.
    #[arg(long, env = "SLUICE_PAYLOAD_ORPHAN_GRACE_SECONDS")]
    pub payload_orphan_grace_seconds: Option<u64>,
    /// Where messages live: `embedded` (default, in the data folder), `redis://HOST:PORT[/DB]`
    /// or `redis+cluster://H1:P1,H2:P2,...`.
    #[arg(long, env = "SLUICE_STORE")]
    pub store: Option<String>,
    /// Redis: prefix of every key (several deployments can share one Redis). Default `sluice`.
    #[arg(long, env = "SLUICE_REDIS_KEY_PREFIX")]
    pub redis_key_prefix: Option<String>,
    /// Redis: answer a write only once this many replicas acknowledged it (`WAIT`).
    #[arg(long, env = "SLUICE_REDIS_WAIT_REPLICAS")]
    pub redis_wait_replicas: Option<usize>,
    /// Redis: how long `WAIT` may take, in milliseconds. Default 1000.
    #[arg(long, env = "SLUICE_REDIS_WAIT_TIMEOUT_MS")]
    pub redis_wait_timeout_ms: Option<u64>,
    /// Redis: bound on every call, in milliseconds; past it requests answer 503. Default 5000.
    #[arg(long, env = "SLUICE_REDIS_TIMEOUT_MS")]
    pub redis_timeout_ms: Option<u64>,
    /// Connections served at once; more wait in the listen backlog. Default: derived from the
    /// file-descriptor limit (at most 65536).
    #[arg(long, env = "SLUICE_MAX_CONNECTIONS")]
    pub max_connections: Option<usize>,
    /// `/v1` requests served at once; past it a request answers 503 `Unavailable` with
    /// `Retry-After` at once (1–16777216). Default 32768.
    #[arg(long, env = "SLUICE_MAX_IN_FLIGHT_REQUESTS")]
    pub max_in_flight_requests: Option<usize>,
    /// Bytes the bodies of the requests in progress may hold at once (REST and AWS alike); past
    /// it a request answers 503 `Unavailable` with `Retry-After` at once, and a body larger
    /// than all of it answers 413 (65536–1099511627776). Default: four of the largest single
    /// sends (3 × `max_message_bytes` + 64 KiB each), at least 268435456 (256 MiB).
    #[arg(long, env = "SLUICE_MAX_BODY_BYTES_IN_FLIGHT")]
    pub max_body_bytes_in_flight: Option<usize>,
    /// Long polls waiting for a message at once; past it a receive that would wait answers 503
    /// `Unavailable` with `Retry-After` (1–16777216). Default 16384.
    #[arg(long, env = "SLUICE_MAX_WAITING_POLLS")]
    pub max_waiting_polls: Option<usize>,
    /// Seconds a client may take to send a request's headers (1–3600). Default 10.
    #[arg(long, env = "SLUICE_HEADER_TIMEOUT_SECONDS")]
    pub header_timeout_seconds: Option<u64>,
    /// Seconds a keep-alive connection may sit idle between requests (1–3600). Default 60.
    #[arg(long, env = "SLUICE_IDLE_TIMEOUT_SECONDS")]
    pub idle_timeout_seconds: Option<u64>,
    /// Seconds a client may take to send a request's body (1–3600). Default 30.
    #[arg(long, env = "SLUICE_BODY_TIMEOUT_SECONDS")]
    pub body_timeout_seconds: Option<u64>,
    /// Seconds between a stop signal (SIGTERM, SIGINT) and closing the listener, while
    /// `/readyz` already answers 503 and requests are still served, so a load balancer takes
    /// the gateway out before it stops accepting (0–3600). Default 0.
    #[arg(long, env = "SLUICE_SHUTDOWN_DRAIN_SECONDS")]
    pub shutdown_drain_seconds: Option<u64>,
    /// Seconds a stop waits, once the listener is closed, for requests in progress to finish
    /// before it closes the connections still open (1–3600). Default 30.
    #[arg(long, env = "SLUICE_SHUTDOWN_TIMEOUT_SECONDS")]
    pub shutdown_timeout_seconds: Option<u64>,
    /// Whether metric series carry a `queue` label (`true`/`false`); `false` adds a tenant's
    /// queues up, for deployments with many queues. Default true.
    #[arg(long, env = "SLUICE_METRICS_PER_QUEUE")]
    pub metrics_per_queue: Option<bool>,
    /// The region named in ARNs (a topic's `TopicArn` in enveloped copies). Default
    /// `us-east-1`.
    #[arg(long, env = "SLUICE_AWS_REGION")]
    pub aws_region: Option<String>,
    /// The base URL clients reach this server at, for the queue URLs of the AWS-compatible
    /// endpoint (`{public_url}/{account id}/{queue}`). Default `http://{listen address}`.
    #[arg(long, env = "SLUICE_PUBLIC_URL")]
    pub public_url: Option<String>,
}

/// `sluice token`.
#[derive(Debug, Args)]
pub struct TokenArgs {
    /// The tenant the token acts for; omit for an admin token.
    #[arg(long)]
    pub tenant: Option<String>,
    /// Space-separated scopes, e.g. "queues:manage messages:send messages:consume".
    #[arg(long)]
    pub scopes: String,
    /// Lifetime in seconds.
    #[arg(long, default_value_t = 3600)]
    pub ttl_seconds: u64,
    /// Where the key lives.
    #[command(flatten)]
    pub common: CommonArgs,
}

/// A setting that cannot be used; the message names it.
#[derive(Debug, thiserror::Error)]
#[error("invalid configuration: {0}")]
pub struct ConfigError(pub String);

/// Where the token key came from.
#[derive(Debug)]
pub enum KeySource {
    /// Configured.
    Configured(KeyMaterial),
    /// Generated and kept in the data folder: development mode.
    Generated(Secret<Vec<u8>>),
}

/// Where messages live.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    /// The embedded engine in the data folder.
    Embedded,
    /// A Redis server or cluster.
    Redis {
        /// `redis://…` or `redis+cluster://…`.
        url: String,
        /// Key prefix.
        key_prefix: String,
        /// `WAIT` for this many replicas, this long, after each durable write.
        wait_replicas: Option<(usize, Duration)>,
        /// Bound on every call.
        timeout: Duration,
    },
}

/// Where large bodies go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PayloadStoreConfig {
    /// Nowhere: every body stays in the engine.
    None,
    /// Files under this folder.
    Local(PathBuf),
    /// An S3-compatible bucket.
    S3(S3Settings),
}

/// The payload store and when bodies go there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PayloadConfig {
    /// The store.
    pub store: PayloadStoreConfig,
    /// Bodies with more bytes than this are spilled.
    pub spill_threshold_bytes: usize,
    /// How long an object whose message never committed is kept.
    pub orphan_grace: Duration,
}

/// The largest `max_message_bytes` without a payload store.
pub const MAX_MESSAGE_BYTES_IN_ENGINE: u32 = 1_048_576;
/// The largest `max_message_bytes` with a payload store.
pub const MAX_MESSAGE_BYTES_SPILLED: u32 = 67_108_864;

/// The largest `max_body_bytes_in_flight`: 1 TiB, far above any memory it could stand for.
pub const MAX_BODY_BYTES_IN_FLIGHT: usize = 1 << 40;

/// Bounds on connections, as configured.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// Connections served at once; `None` derives it from the file-descriptor limit at start.
    pub max_connections: Option<usize>,
    /// `/v1` requests in progress at once; more are refused (503) rather than queued.
    pub max_in_flight_requests: usize,
    /// Long polls waiting at once; more are refused (503) rather than held.
    pub max_waiting_polls: usize,
    /// How long a request's headers may take to arrive, counted from its first byte (or from
    /// the connection's opening, for its first request).
    pub header_timeout: Duration,
    /// How long a connection may sit with no request in progress and nothing moving.
    pub idle_timeout: Duration,
    /// How long a request's body may take to arrive, counted from the end of its headers.
    pub body_timeout: Duration,
    /// How long a stop keeps accepting after readiness turns 503.
    pub shutdown_drain: Duration,
    /// How long a stop waits for requests in progress before it closes their connections.
    pub shutdown_timeout: Duration,
}

/// Validated settings. Secrets in them are [`Secret`]s: `Debug` shows none.
#[derive(Debug)]
pub struct Settings {
    /// Where messages live.
    pub store: Store,
    /// Where to listen.
    pub listen: SocketAddr,
    /// The data folder.
    pub data_dir: PathBuf,
    /// The token key.
    pub key: KeySource,
    /// Required issuer.
    pub issuer: Option<String>,
    /// Required audience.
    pub audience: Option<String>,
    /// Server-wide message size limit.
    pub max_message_bytes: u32,
    /// Where large bodies go.
    pub payloads: PayloadConfig,
    /// Connection limit and timeouts.
    pub connections: ConnectionLimits,
    /// The bytes request bodies may hold at once.
    pub max_body_bytes_in_flight: usize,
    /// Whether metric series carry a `queue` label.
    pub metrics_per_queue: bool,
    /// The region in ARNs.
    pub aws_region: String,
    /// The base of queue URLs; `None`: `http://` and the bound address.
    pub public_url: Option<String>,
}

const GENERATED_KEY_FILE: &str = "jwt-secret";

impl Settings {
    /// Layers flags and environment over the file over the defaults, and validates.
    pub fn resolve(args: &CommonArgs) -> Result<Self, ConfigError> {
        let file = match &args.config {
            Some(path) => {
                let text = std::fs::read_to_string(path).map_err(|e| {
                    ConfigError(format!("config: cannot read {}: {e}", path.display()))
                })?;
                toml::from_str::<CommonArgs>(&text)
                    .map_err(|e| ConfigError(format!("config: {}: {e}", path.display())))?
            }
            None => CommonArgs::default(),
        };
        let store = resolve_store(args, &file)?;
        let connections = resolve_connections(args, &file)?;
        let data_dir = args
            .data_dir
            .clone()
            .or(file.data_dir.clone())
            .unwrap_or_else(|| PathBuf::from("data"));
        let payloads = resolve_payloads(args, &file, &store, &data_dir)?;
        let listen_text = args
            .listen
            .clone()
            .or(file.listen)
            .unwrap_or_else(|| "127.0.0.1:8080".into());
        let listen = listen_text.parse().map_err(|e| {
            ConfigError(format!(
                "listen: {listen_text:?} is not an address like 127.0.0.1:8080 ({e})"
            ))
        })?;
        let max_message_bytes = args
            .max_message_bytes
            .or(file.max_message_bytes)
            .unwrap_or(MAX_MESSAGE_BYTES_IN_ENGINE);
        let (max_allowed, without) = match payloads.store {
            PayloadStoreConfig::None => (MAX_MESSAGE_BYTES_IN_ENGINE, " without a payload store"),
            _ => (MAX_MESSAGE_BYTES_SPILLED, ""),
        };
        if !(1024..=max_allowed).contains(&max_message_bytes) {
            let hint = if without.is_empty() || max_message_bytes < 1024 {
                ""
            } else {
                " (configure --payload-store to allow up to 67108864)"
            };
            return Err(ConfigError(format!(
                "max_message_bytes (--max-message-bytes): must be between 1024 and \
                 {max_allowed}{without}, got {max_message_bytes}{hint}"
            )));
        }
        let max_body_bytes_in_flight = args
            .max_body_bytes_in_flight
            .or(file.max_body_bytes_in_flight)
            .unwrap_or_else(|| crate::body_budget::default_budget(max_message_bytes));
        let budget_range = crate::body_budget::MIN_BUDGET_BYTES..=MAX_BODY_BYTES_IN_FLIGHT;
        if !budget_range.contains(&max_body_bytes_in_flight) {
            return Err(ConfigError(format!(
                "max_body_bytes_in_flight: must be between {} and {}, got {max_body_bytes_in_flight}",
                budget_range.start(),
                budget_range.end()
            )));
        }
        let secret = args.jwt_secret.clone().or(file.jwt_secret);
        let public_key = args.jwt_public_key.clone().or(file.jwt_public_key);
        let algorithm = args.jwt_algorithm.clone().or(file.jwt_algorithm);
        let key = match (secret, public_key) {
            (Some(_), Some(_)) => {
                return Err(ConfigError(
                    "jwt_secret and jwt_public_key: configure one of them, not both".into(),
                ))
            }
            (Some(secret), None) => {
                if secret.expose().len() < 32 {
                    return Err(ConfigError("jwt_secret: must be at least 32 bytes".into()));
                }
                if algorithm.as_deref().is_some_and(|a| a != "HS256") {
                    return Err(ConfigError(
                        "jwt_algorithm: a jwt_secret means HS256".into(),
                    ));
                }
                KeySource::Configured(KeyMaterial::Secret(Secret::new(
                    secret.into_exposed().into_bytes(),
                )))
            }
            (None, Some(path)) => {
                let algorithm = match algorithm.as_deref() {
                    Some("EdDSA") => Algorithm::EdDSA,
                    Some("RS256") => Algorithm::RS256,
                    Some("ES256") => Algorithm::ES256,
                    other => {
                        return Err(ConfigError(format!(
                            "jwt_algorithm: with jwt_public_key it must be EdDSA, RS256 or ES256, got {other:?}"
                        )))
                    }
                };
                let pem = std::fs::read(&path).map_err(|e| {
                    ConfigError(format!(
                        "jwt_public_key: cannot read {}: {e}",
                        path.display()
                    ))
                })?;
                KeySource::Configured(KeyMaterial::PublicKey { algorithm, pem })
            }
            (None, None) => KeySource::Generated(generated_key(&data_dir)?),
        };
        let aws_region = args
            .aws_region
            .clone()
            .or(file.aws_region)
            .unwrap_or_else(|| "us-east-1".to_owned());
        let region_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-';
        if aws_region.is_empty() || aws_region.len() > 32 || !aws_region.chars().all(region_char) {
            return Err(ConfigError(format!(
                "aws_region: must be 1-32 of a-z, 0-9 and '-' (like us-east-1), got {aws_region:?}"
            )));
        }
        let public_url = args.public_url.clone().or(file.public_url);
        if let Some(url) = &public_url {
            if !(url.starts_with("http://") || url.starts_with("https://"))
                || url
                    .trim_end_matches('/')
                    .split("://")
                    .nth(1)
                    .is_none_or(str::is_empty)
            {
                return Err(ConfigError(format!(
                    "public_url: must be an http:// or https:// URL like https://sluice.example.com, got {url:?}"
                )));
            }
        }
        Ok(Settings {
            store,
            listen,
            data_dir,
            key,
            issuer: args.jwt_issuer.clone().or(file.jwt_issuer),
            audience: args.jwt_audience.clone().or(file.jwt_audience),
            max_message_bytes,
            payloads,
            connections,
            max_body_bytes_in_flight,
            metrics_per_queue: args
                .metrics_per_queue
                .or(file.metrics_per_queue)
                .unwrap_or(true),
            aws_region,
            public_url: public_url.map(|url| url.trim_end_matches('/').to_owned()),
        })
    }

    /// The key material, whichever way it came.
    pub fn key_material(&self) -> KeyMaterial {
        match &self.key {
            KeySource::Configured(material) => material.clone(),
            KeySource::Generated(secret) => KeyMaterial::Secret(secret.clone()),
        }
    }

    /// Development mode: no key was configured.
    pub fn is_development(&self) -> bool {
        matches!(self.key, KeySource::Generated(_))
    }
}

fn resolve_store(args: &CommonArgs, file: &CommonArgs) -> Result<Store, ConfigError> {
    let store = args
        .store
        .clone()
        .or(file.store.clone())
        .unwrap_or_else(|| "embedded".into());
    if store == "embedded" {
        return Ok(Store::Embedded);
    }
    if !(store.starts_with("redis://") || store.starts_with("redis+cluster://")) {
        return Err(ConfigError(format!(
            "store: {store:?} is not `embedded`, `redis://HOST:PORT` or `redis+cluster://H1:P1,H2:P2`"
        )));
    }
    let key_prefix = args
        .redis_key_prefix
        .clone()
        .or(file.redis_key_prefix.clone())
        .unwrap_or_else(|| "sluice".into());
    let wait_timeout = args
        .redis_wait_timeout_ms
        .or(file.redis_wait_timeout_ms)
        .unwrap_or(1000);
    let wait_replicas = match args.redis_wait_replicas.or(file.redis_wait_replicas) {
        None | Some(0) => None,
        Some(n) => Some((n, Duration::from_millis(wait_timeout))),
    };
    let timeout = args
        .redis_timeout_ms
        .or(file.redis_timeout_ms)
        .unwrap_or(5000);
    if timeout == 0 {
        return Err(ConfigError("redis_timeout_ms: must be at least 1".into()));
    }
    Ok(Store::Redis {
        url: store,
        key_prefix,
        wait_replicas,
        timeout: Duration::from_millis(timeout),
    })
}

fn resolve_payloads(
    args: &CommonArgs,
    file: &CommonArgs,
    store: &Store,
    data_dir: &Path,
) -> Result<PayloadConfig, ConfigError> {
    let named = args.payload_store.clone().or(file.payload_store.clone());
    let kind = named.unwrap_or_else(|| match store {
        Store::Embedded => "local".into(),
        Store::Redis { .. } => "none".into(),
    });
    let store = match kind.as_str() {
        "none" => PayloadStoreConfig::None,
        "local" => PayloadStoreConfig::Local(data_dir.join("payloads")),
        url if url.starts_with("s3://") => {
            let region = args
                .s3_region
                .clone()
                .or(file.s3_region.clone())
                .or_else(|| std::env::var("AWS_REGION").ok())
                .unwrap_or_else(|| "us-east-1".into());
            let mut settings = S3Settings::from_url(url, &region)
                .map_err(|e| ConfigError(format!("payload_store: {e}")))?;
            settings.endpoint = args.s3_endpoint.clone().or(file.s3_endpoint.clone());
            if let Some(endpoint) = &settings.endpoint {
                if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
                    return Err(ConfigError(format!(
                        "s3_endpoint: must be an http:// or https:// URL, got {endpoint:?}"
                    )));
                }
            }
            settings.force_path_style = args
                .s3_force_path_style
                .or(file.s3_force_path_style)
                .unwrap_or(false);
            PayloadStoreConfig::S3(settings)
        }
        other => {
            return Err(ConfigError(format!(
                "payload_store: {other:?} is not `local`, `s3://BUCKET[/PREFIX]` or `none`"
            )))
        }
    };
    let spill_threshold_bytes = args
        .spill_threshold_bytes
        .or(file.spill_threshold_bytes)
        .unwrap_or(sluice_services::DEFAULT_SPILL_THRESHOLD_BYTES);
    if !(1..=MAX_MESSAGE_BYTES_SPILLED as usize).contains(&spill_threshold_bytes) {
        return Err(ConfigError(format!(
            "spill_threshold_bytes: must be between 1 and {MAX_MESSAGE_BYTES_SPILLED}, got {spill_threshold_bytes}"
        )));
    }
    let grace = args
        .payload_orphan_grace_seconds
        .or(file.payload_orphan_grace_seconds)
        .unwrap_or(sluice_services::DEFAULT_ORPHAN_GRACE.as_secs());
    if !(1..=604_800).contains(&grace) {
        return Err(ConfigError(format!(
            "payload_orphan_grace_seconds: must be between 1 and 604800, got {grace}"
        )));
    }
    Ok(PayloadConfig {
        store,
        spill_threshold_bytes,
        orphan_grace: Duration::from_secs(grace),
    })
}

fn resolve_connections(
    args: &CommonArgs,
    file: &CommonArgs,
) -> Result<ConnectionLimits, ConfigError> {
    let seconds = |name: &str, flag: Option<u64>, file: Option<u64>, default: u64| {
        let value = flag.or(file).unwrap_or(default);
        if !(1..=3600).contains(&value) {
            return Err(ConfigError(format!(
                "{name}: must be between 1 and 3600, got {value}"
            )));
        }
        Ok(Duration::from_secs(value))
    };
    let count = |name: &str, value: Option<usize>| match value {
        Some(n) if !(1..=16_777_216).contains(&n) => Err(ConfigError(format!(
            "{name}: must be between 1 and 16777216, got {n}"
        ))),
        other => Ok(other),
    };
    let max_connections = count(
        "max_connections",
        args.max_connections.or(file.max_connections),
    )?;
    let max_in_flight_requests = count(
        "max_in_flight_requests",
        args.max_in_flight_requests.or(file.max_in_flight_requests),
    )?
    .unwrap_or(32_768);
    let max_waiting_polls = count(
        "max_waiting_polls",
        args.max_waiting_polls.or(file.max_waiting_polls),
    )?
    .unwrap_or(16_384);
    Ok(ConnectionLimits {
        max_connections,
        max_in_flight_requests,
        max_waiting_polls,
        header_timeout: seconds(
            "header_timeout_seconds",
            args.header_timeout_seconds,
            file.header_timeout_seconds,
            10,
        )?,
        idle_timeout: seconds(
            "idle_timeout_seconds",
            args.idle_timeout_seconds,
            file.idle_timeout_seconds,
            60,
        )?,
        body_timeout: seconds(
            "body_timeout_seconds",
            args.body_timeout_seconds,
            file.body_timeout_seconds,
            30,
        )?,
        shutdown_drain: match args.shutdown_drain_seconds.or(file.shutdown_drain_seconds) {
            // The one bound that may be 0: no drain is the default.
            Some(0) | None => Duration::ZERO,
            Some(drain) => seconds("shutdown_drain_seconds", Some(drain), None, 0)?,
        },
        shutdown_timeout: seconds(
            "shutdown_timeout_seconds",
            args.shutdown_timeout_seconds,
            file.shutdown_timeout_seconds,
            30,
        )?,
    })
}

/// Reads the data folder's signing key, creating it (readable by the owner only) if absent.
fn generated_key(data_dir: &Path) -> Result<Secret<Vec<u8>>, ConfigError> {
    let path = data_dir.join(GENERATED_KEY_FILE);
    let fail = |e: std::io::Error| ConfigError(format!("data_dir: {}: {e}", path.display()));
    match std::fs::read_to_string(&path) {
        Ok(text) => return Ok(Secret::new(text.trim().as_bytes().to_vec())),
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(fail(e)),
        Err(_) => {}
    }
    let mut folder = std::fs::DirBuilder::new();
    folder.recursive(true);
    #[cfg(unix)]
    std::os::unix::fs::DirBuilderExt::mode(&mut folder, 0o700);
    folder.create(data_dir).map_err(fail)?;
    let mut raw = [0u8; 32];
    rand::thread_rng().fill_bytes(&mut raw);
    let text = hex::encode(raw);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create_new(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::OpenOptionsExt;
        options.mode(0o600);
    }
    let mut file = options.open(&path).map_err(fail)?;
    std::io::Write::write_all(&mut file, text.as_bytes()).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    Ok(Secret::new(text.into_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_output_never_shows_the_jwt_secret() {
        let secret = "a-very-secret-signing-key-0123456789abcdef";
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("data");
        let args = CommonArgs {
            data_dir: Some(dir.clone()),
            jwt_secret: Some(Secret::new(secret.to_owned())),
            ..Default::default()
        };
        let settings = Settings::resolve(&args).unwrap();
        let shown = format!("{args:?}\n{settings:#?}\n{:?}", settings.key_material());
        assert!(!shown.contains(secret), "{shown}");
        assert!(!shown.contains("a-very-secret"), "{shown}");
        assert!(shown.contains("redacted"), "{shown}");
        // The development key, generated into the data folder, is redacted too.
        let generated = Settings::resolve(&CommonArgs {
            data_dir: Some(dir.clone()),
            ..Default::default()
        })
        .unwrap();
        let key = std::fs::read_to_string(dir.join(GENERATED_KEY_FILE)).unwrap();
        let shown = format!("{generated:?}");
        assert!(!shown.contains(key.trim()), "{shown}");
    }

    #[test]
    fn the_body_budget_defaults_from_the_largest_message() {
        let temp = tempfile::tempdir().unwrap();
        let args = |max: Option<u32>, budget: Option<usize>| CommonArgs {
            data_dir: Some(temp.path().join("data")),
            max_message_bytes: max,
            max_body_bytes_in_flight: budget,
            ..Default::default()
        };
        let budget =
            |max, budget| Settings::resolve(&args(max, budget)).map(|s| s.max_body_bytes_in_flight);
        assert_eq!(budget(None, None).unwrap(), 256 * 1024 * 1024);
        assert_eq!(
            budget(Some(67_108_864), None).unwrap(),
            4 * (3 * 67_108_864 + 65_536)
        );
        assert_eq!(budget(None, Some(65_536)).unwrap(), 65_536);
        let error = budget(None, Some(65_535)).unwrap_err();
        assert!(error.0.contains("max_body_bytes_in_flight"), "{error}");
    }

    #[test]
    fn metrics_per_queue_layers_flag_over_file_over_default() {
        let temp = tempfile::tempdir().unwrap();
        let file = temp.path().join("sluice.toml");
        std::fs::write(&file, "metrics_per_queue = false\n").unwrap();
        let args = |config: Option<PathBuf>, flag: Option<bool>| CommonArgs {
            config,
            data_dir: Some(temp.path().join("data")),
            metrics_per_queue: flag,
            ..Default::default()
        };
        let resolve = |args: CommonArgs| Settings::resolve(&args).unwrap().metrics_per_queue;
        assert!(resolve(args(None, None)));
        assert!(!resolve(args(Some(file.clone()), None)));
        assert!(resolve(args(Some(file), Some(true))));
    }

    #[test]
    fn the_payload_store_defaults_by_engine_and_gates_messages_above_one_mib() {
        let temp = tempfile::tempdir().unwrap();
        let file = temp.path().join("sluice.toml");
        std::fs::write(
            &file,
            "payload_store = \"s3://bucket/p\"\ns3_force_path_style = true\nspill_threshold_bytes = 2048\n",
        )
        .unwrap();
        let data = temp.path().join("data");
        let args = |store: Option<&str>, payload: Option<&str>, max: Option<u32>| CommonArgs {
            data_dir: Some(data.clone()),
            store: store.map(str::to_owned),
            payload_store: payload.map(str::to_owned),
            max_message_bytes: max,
            ..Default::default()
        };
        let embedded = Settings::resolve(&args(None, None, Some(67_108_864))).unwrap();
        assert_eq!(
            embedded.payloads.store,
            PayloadStoreConfig::Local(data.join("payloads"))
        );
        assert_eq!(embedded.payloads.spill_threshold_bytes, 262_144);
        assert_eq!(embedded.payloads.orphan_grace, Duration::from_secs(3600));
        let redis = Some("redis://127.0.0.1:6379");
        let error = Settings::resolve(&args(redis, None, Some(1_048_577))).unwrap_err();
        assert!(error.0.contains("--max-message-bytes"), "{error}");
        assert!(error.0.contains("--payload-store"), "{error}");
        let from_file = Settings::resolve(&CommonArgs {
            config: Some(file),
            s3_endpoint: Some("http://127.0.0.1:9000".into()),
            ..args(redis, None, Some(67_108_864))
        })
        .unwrap();
        let PayloadStoreConfig::S3(s3) = &from_file.payloads.store else {
            panic!("{:?}", from_file.payloads)
        };
        assert_eq!((s3.bucket.as_str(), s3.prefix.as_str()), ("bucket", "p/"));
        assert!(s3.force_path_style);
        assert_eq!(s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        assert_eq!(from_file.payloads.spill_threshold_bytes, 2048);
        assert!(Settings::resolve(&args(None, Some("none"), Some(2_000_000))).is_err());
        assert!(Settings::resolve(&args(None, Some("gs://b"), None)).is_err());
    }
}
