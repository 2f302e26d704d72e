//! The connection to Redis: standalone (a [`ConnectionManager`] that reconnects by itself) or
//! Cluster (redis-rs' async cluster client, which follows `MOVED` and reconnects per node),
//! behind one [`Redis`] handle that bounds every call by a timeout, maps every failure to an
//! [`EngineError`], runs scripts by SHA (re-loading them after `SCRIPT FLUSH` or a restart)
//! and, for durable writes, pipelines `WAIT` behind the script when replicas are required.

use crate::RedisOptions;
use redis::aio::{ConnectionLike, ConnectionManager, ConnectionManagerConfig};
use redis::cluster::ClusterClient;
use redis::cluster_async::ClusterConnection;
use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::{
    Cmd, ErrorKind, FromRedisValue, IntoConnectionInfo, Pipeline, ProtocolVersion, RedisError,
    RedisFuture, RedisResult, Script, ServerErrorKind, ToRedisArgs, Value,
};
use sluice_engine::EngineError;
use std::time::{Duration, Instant};

/// Reconnection attempts after a lost connection: effectively unbounded (about a week at the
/// 500 ms cap), since every call is bounded by its own timeout anyway.
const RECONNECT_ATTEMPTS: usize = 1_000_000;

/// The URL without its password, fit for logs and error messages.
pub(crate) fn redacted(url: &str) -> String {
    match (url.find("://"), url.rfind('@')) {
        (Some(scheme), Some(at)) if at > scheme => {
            format!("{}://***@{}", &url[..scheme], &url[at + 1..])
        }
        _ => url.to_owned(),
    }
}

/// Where the engine connects: what the pub/sub task needs to open its own connection.
#[derive(Debug, Clone)]
pub(crate) enum Topology {
    /// One server, by URL.
    Standalone(String),
    /// The seed nodes of a cluster, one `redis://host:port` URL each.
    Cluster(Vec<String>),
}

impl Topology {
    /// Parses `redis://host:port[/db]` or `redis+cluster://h1:p1,h2:p2,...` (user info before
    /// an `@` applies to every node).
    pub(crate) fn parse(url: &str) -> Result<Self, EngineError> {
        let bad = |why: &str| {
            EngineError::Internal(format!("invalid Redis URL {:?}: {why}", redacted(url)))
        };
        if let Some(rest) = url.strip_prefix("redis+cluster://") {
            let (auth, hosts) = match rest.rsplit_once('@') {
                Some((auth, hosts)) => (format!("{auth}@"), hosts),
                None => (String::new(), rest),
            };
            let hosts = hosts.trim_end_matches('/');
            let nodes: Vec<String> = hosts
                .split(',')
                .filter(|h| !h.is_empty())
                .map(|h| format!("redis://{auth}{h}"))
                .collect();
            if nodes.is_empty() {
                return Err(bad("no cluster node given"));
            }
            Ok(Self::Cluster(nodes))
        } else if url.starts_with("redis://") {
            Ok(Self::Standalone(url.to_owned()))
        } else {
            Err(bad(
                "expected redis://host:port[/db] or redis+cluster://h1:p1,h2:p2",
            ))
        }
    }

    /// The URLs a pub/sub connection may use, in order of preference.
    pub(crate) fn pubsub_urls(&self) -> Vec<String> {
        match self {
            Self::Standalone(url) => vec![url.clone()],
            // PUBLISH is broadcast over the cluster bus, so any node hears every wake-up.
            Self::Cluster(nodes) => nodes.clone(),
        }
    }
}

/// Either kind of connection; cheap to clone (both are handles to shared multiplexed
/// connections).
#[derive(Clone)]
pub(crate) enum Conn {
    Single(ConnectionManager),
    Cluster(ClusterConnection),
}

impl ConnectionLike for Conn {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a Cmd) -> RedisFuture<'a, Value> {
        match self {
            Self::Single(c) => c.req_packed_command(cmd),
            Self::Cluster(c) => c.req_packed_command(cmd),
        }
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        pipeline: &'a Pipeline,
        offset: usize,
        count: usize,
    ) -> RedisFuture<'a, Vec<Value>> {
        match self {
            Self::Single(c) => c.req_packed_commands(pipeline, offset, count),
            Self::Cluster(c) => c.req_packed_commands(pipeline, offset, count),
        }
    }

    fn get_db(&self) -> i64 {
        match self {
            Self::Single(c) => c.get_db(),
            Self::Cluster(c) => c.get_db(),
        }
    }
}

/// Classifies a Redis failure: anything a later retry may fix is `Unavailable`.
pub(crate) fn engine_error(e: RedisError) -> EngineError {
    let transient = e.is_io_error()
        || e.is_timeout()
        || e.is_connection_dropped()
        || e.is_connection_refusal()
        || matches!(
            e.kind(),
            ErrorKind::Io
                | ErrorKind::ClusterConnectionNotFound
                | ErrorKind::Server(
                    ServerErrorKind::BusyLoading
                        | ServerErrorKind::TryAgain
                        | ServerErrorKind::ClusterDown
                        | ServerErrorKind::MasterDown
                        | ServerErrorKind::ReadOnly
                        | ServerErrorKind::Moved
                        | ServerErrorKind::Ask
                )
        )
        // Out of memory under `noeviction`, a busy script, no replicas for min-replicas-to-write.
        || matches!(e.code(), Some("OOM" | "BUSY" | "NOREPLICAS" | "LOADING"));
    if transient {
        EngineError::Unavailable(format!("redis: {e}"))
    } else {
        EngineError::Internal(format!("redis: {e}"))
    }
}

/// One script invocation: the script, its keys and its arguments.
pub(crate) struct Call {
    script: &'static Script,
    keys: Vec<String>,
    args: Vec<Vec<u8>>,
}

impl Call {
    pub(crate) fn new(script: &'static Script, keys: impl IntoIterator<Item = String>) -> Self {
        Self {
            script,
            keys: keys.into_iter().collect(),
            args: Vec::new(),
        }
    }

    /// Appends one argument (or several, for a value that expands to more).
    pub(crate) fn arg(&mut self, value: impl ToRedisArgs) -> &mut Self {
        self.args.extend(value.to_redis_args());
        self
    }

    fn evalsha(&self) -> Cmd {
        let mut cmd = redis::cmd("EVALSHA");
        cmd.arg(self.script.get_hash())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args);
        cmd
    }
}

/// The engine's handle on Redis.
pub(crate) struct Redis {
    conn: Conn,
    topology: Topology,
    timeout: Duration,
    wait: Option<(usize, Duration)>,
}

impl Redis {
    /// Connects (bounded by the command timeout) without checking the server's settings.
    pub(crate) async fn connect(url: &str, options: &RedisOptions) -> Result<Self, EngineError> {
        let topology = Topology::parse(url)?;
        let timeout = options.command_timeout;
        let wait_budget = options.wait_replicas.map_or(Duration::ZERO, |(_, t)| t);
        let connecting = async {
            match &topology {
                Topology::Standalone(url) => {
                    // RESP3, so the connection reports its own loss and the manager reconnects
                    // at once, before the next call finds the old connection dead.
                    let info = url.as_str().into_connection_info()?;
                    let settings = info
                        .redis_settings()
                        .clone()
                        .set_protocol(ProtocolVersion::RESP3);
                    let client = redis::Client::open(info.set_redis_settings(settings))?;
                    // After a loss the manager keeps reconnecting in the background (every
                    // 500 ms at most) for as long as it takes; calls meanwhile wait for it,
                    // bounded by our timeout, so the first call after Redis is back succeeds
                    // instead of meeting a stale failure.
                    let config = ConnectionManagerConfig::new()
                        .set_connection_timeout(Some(timeout))
                        .set_response_timeout(Some(timeout + wait_budget))
                        .set_number_of_retries(RECONNECT_ATTEMPTS)
                        .set_min_delay(Duration::from_millis(50))
                        .set_max_delay(Duration::from_millis(500));
                    Ok::<_, RedisError>(Conn::Single(
                        ConnectionManager::new_with_config(client, config).await?,
                    ))
                }
                Topology::Cluster(nodes) => {
                    let client = ClusterClient::builder(nodes.clone())
                        .use_protocol(ProtocolVersion::RESP3)
                        .connection_timeout(timeout)
                        .response_timeout(timeout + wait_budget)
                        .retries(4)
                        .max_retry_wait(500)
                        .min_retry_wait(50)
                        .build()?;
                    Ok(Conn::Cluster(client.get_async_connection().await?))
                }
            }
        };
        let conn = match tokio::time::timeout(timeout, connecting).await {
            Ok(Ok(conn)) => conn,
            Ok(Err(e)) => return Err(engine_error(e)),
            Err(_) => {
                return Err(EngineError::Unavailable(format!(
                    "redis: no connection to {} within {timeout:?}",
                    redacted(url)
                )))
            }
        };
        Ok(Self {
            conn,
            topology,
            timeout,
            wait: options.wait_replicas,
        })
    }

    pub(crate) fn topology(&self) -> &Topology {
        &self.topology
    }

    pub(crate) fn is_cluster(&self) -> bool {
        matches!(self.conn, Conn::Cluster(_))
    }

    fn timed_out(&self) -> EngineError {
        EngineError::Unavailable(format!("redis: no answer within {:?}", self.timeout))
    }

    /// One command, bounded by the timeout.
    pub(crate) async fn query<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, EngineError> {
        let started = Instant::now();
        let result = self.query_unmeasured(cmd).await;
        measure(started, &result);
        result
    }

    async fn query_unmeasured<T: FromRedisValue>(&self, cmd: &Cmd) -> Result<T, EngineError> {
        let mut conn = self.conn.clone();
        match tokio::time::timeout(self.timeout, cmd.query_async::<T>(&mut conn)).await {
            Ok(result) => result.map_err(engine_error),
            Err(_) => Err(self.timed_out()),
        }
    }

    /// Runs a script by SHA; on `NOSCRIPT` (a restart, a `SCRIPT FLUSH`, a failover to a node
    /// that never saw it) loads it and runs it again. `durable` writes are followed by `WAIT`
    /// in the same pipeline when [`RedisOptions::wait_replicas`] asks for it.
    pub(crate) async fn eval(&self, call: &Call, durable: bool) -> Result<Value, EngineError> {
        let started = Instant::now();
        let result = self.eval_unmeasured(call, durable).await;
        measure(started, &result);
        result
    }

    async fn eval_unmeasured(&self, call: &Call, durable: bool) -> Result<Value, EngineError> {
        let wait = if durable { self.wait } else { None };
        let budget = self.timeout + wait.map_or(Duration::ZERO, |(_, t)| t);
        let mut conn = self.conn.clone();
        let run = async {
            match Self::exec(&mut conn, call, wait).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    call.script.load_async(&mut conn).await?;
                    Self::exec(&mut conn, call, wait).await
                }
                other => other,
            }
        };
        let (value, acked) = match tokio::time::timeout(budget, run).await {
            Ok(result) => result.map_err(engine_error)?,
            Err(_) => return Err(self.timed_out()),
        };
        if let (Some((wanted, _)), Some(acked)) = (wait, acked) {
            if acked < wanted {
                return Err(EngineError::Unavailable(format!(
                    "redis: the write reached {acked} of the {wanted} replicas required \
                     (it may still be applied; a retry can duplicate it)"
                )));
            }
        }
        Ok(value)
    }

    async fn exec(
        conn: &mut Conn,
        call: &Call,
        wait: Option<(usize, Duration)>,
    ) -> RedisResult<(Value, Option<usize>)> {
        let Some((replicas, wait_timeout)) = wait else {
            return Ok((call.evalsha().query_async(conn).await?, None));
        };
        // One round trip: WAIT runs on the same connection right after the script, so it
        // waits for (at least) the script's writes. In a cluster the pipeline goes to the
        // node of the script's first key.
        let mut pipe = redis::pipe();
        pipe.add_command(call.evalsha())
            .cmd("WAIT")
            .arg(replicas)
            .arg(wait_timeout.as_millis() as u64);
        pipe.ignore_errors();
        let mut replies: Vec<RedisResult<Value>> = pipe.query_async(conn).await?;
        let acked = match replies.pop() {
            Some(Ok(v)) => usize::from_redis_value(v)?,
            Some(Err(e)) => return Err(e),
            None => 0,
        };
        match replies.pop() {
            Some(result) => Ok((result?, Some(acked))),
            None => Err(RedisError::from((
                ErrorKind::Parse,
                "pipeline answered no script reply",
            ))),
        }
    }

    /// Runs `cmd` on every master (the one server when standalone); answers each node's
    /// reply with its address.
    pub(crate) async fn on_every_master(
        &self,
        cmd: &Cmd,
    ) -> Result<Vec<(String, Value)>, EngineError> {
        let run = async {
            match &self.conn {
                Conn::Single(c) => {
                    let mut c = c.clone();
                    let value: Value = cmd.query_async(&mut c).await?;
                    let name = match &self.topology {
                        Topology::Standalone(url) => url.clone(),
                        Topology::Cluster(_) => String::new(),
                    };
                    Ok::<_, RedisError>(vec![(name, value)])
                }
                Conn::Cluster(c) => {
                    // The masters are those that own slots, as any node sees them: routing to
                    // "all masters" would only reach the nodes the client is connected to,
                    // and silently skip one that is down.
                    let mut c = c.clone();
                    let slots = c
                        .route_command(
                            redis::cmd("CLUSTER").arg("SLOTS").clone(),
                            RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random),
                        )
                        .await?;
                    let masters = slot_owners(slots)?;
                    let replies =
                        futures_util::future::join_all(masters.into_iter().map(|(host, port)| {
                            let mut c = c.clone();
                            let routing =
                                RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                                    host: host.clone(),
                                    port,
                                });
                            async move {
                                let reply =
                                    c.route_command(cmd.clone(), routing).await.map_err(|e| {
                                        RedisError::from((
                                            e.kind(),
                                            "master unreachable",
                                            format!("{host}:{port}: {e}"),
                                        ))
                                    })?;
                                Ok::<_, RedisError>((format!("{host}:{port}"), reply))
                            }
                        }))
                        .await;
                    replies.into_iter().collect()
                }
            }
        };
        match tokio::time::timeout(self.timeout, run).await {
            Ok(result) => {
                let replies = result.map_err(engine_error)?;
                // A node's error comes back as its reply: surface it, naming the node.
                for (node, reply) in &replies {
                    if let Value::ServerError(e) = reply {
                        return Err(match engine_error(RedisError::from(e.clone())) {
                            EngineError::Unavailable(m) => {
                                EngineError::Unavailable(format!("{node}: {m}"))
                            }
                            EngineError::Internal(m) => {
                                EngineError::Internal(format!("{node}: {m}"))
                            }
                            other => other,
                        });
                    }
                }
                Ok(replies)
            }
            Err(_) => Err(self.timed_out()),
        }
    }
}

/// The distinct masters of a `CLUSTER SLOTS` reply: `[[start, end, [host, port, ...],
/// replicas...], ...]`.
fn slot_owners(reply: Value) -> RedisResult<std::collections::BTreeSet<(String, u16)>> {
    let bad = || RedisError::from((ErrorKind::Parse, "unexpected CLUSTER SLOTS reply"));
    let Value::Array(ranges) = reply else {
        return Err(bad());
    };
    let mut masters = std::collections::BTreeSet::new();
    for range in ranges {
        let Value::Array(parts) = range else {
            return Err(bad());
        };
        let Some(Value::Array(master)) = parts.get(2) else {
            return Err(bad());
        };
        let host = master.first().cloned().ok_or_else(bad)?;
        let port = master.get(1).cloned().ok_or_else(bad)?;
        masters.insert((
            String::from_redis_value(host)?,
            u16::from_redis_value(port)?,
        ));
    }
    if masters.is_empty() {
        return Err(RedisError::from((
            ErrorKind::Server(ServerErrorKind::ClusterDown),
            "no node owns any slot",
        )));
    }
    Ok(masters)
}

/// Times one call to Redis and counts it when it failed, by what the engine answers: every
/// failure the callers see is `Unavailable` (unreachable, timed out, too few replicas) or
/// another store error.
fn measure<T>(started: Instant, result: &Result<T, EngineError>) {
    metrics::histogram!("sluice_redis_call_duration_seconds")
        .record(started.elapsed().as_secs_f64());
    if let Err(error) = result {
        let kind = match error {
            EngineError::Unavailable(_) => "unavailable",
            _ => "other",
        };
        metrics::counter!("sluice_redis_errors_total", "kind" => kind).increment(1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse() {
        assert!(matches!(
            Topology::parse("redis://127.0.0.1:6379/2"),
            Ok(Topology::Standalone(u)) if u == "redis://127.0.0.1:6379/2"
        ));
        match Topology::parse("redis+cluster://a:1,b:2,c:3").unwrap() {
            Topology::Cluster(nodes) => {
                assert_eq!(nodes, ["redis://a:1", "redis://b:2", "redis://c:3"])
            }
            other => panic!("{other:?}"),
        }
        match Topology::parse("redis+cluster://u:p@a:1,b:2").unwrap() {
            Topology::Cluster(nodes) => assert_eq!(nodes, ["redis://u:p@a:1", "redis://u:p@b:2"]),
            other => panic!("{other:?}"),
        }
        assert!(Topology::parse("http://x").is_err());
        assert_eq!(redacted("redis://u:secret@h:1/0"), "redis://***@h:1/0");
        assert_eq!(redacted("redis://h:1"), "redis://h:1");
        assert!(Topology::parse("redis+cluster://").is_err());
    }
}
