//! What the phased benches (`dead_letters`, `topics`) share: a fresh gateway per phase on a
//! runtime of its own over either engine, the runtime the load runs on, and the choice of
//! phases through `SLUICE_BENCH_PHASES`.

use crate::common::{start_gateway, Http};
use sluice_bench_support::BenchResult;
use sluice_gateway::config::CommonArgs;
use sluice_testkit::RedisServer;
use std::path::PathBuf;

/// The engine a phase runs on.
#[derive(Clone, Copy, PartialEq)]
pub(crate) enum Store {
    Embedded,
    Redis,
}

impl Store {
    pub(crate) fn label(self) -> &'static str {
        match self {
            Store::Embedded => "embedded",
            Store::Redis => "Redis",
        }
    }
}

/// Where the gateways of one run keep their data.
pub(crate) struct Stores {
    pub(crate) redis: RedisServer,
    pub(crate) scratch: PathBuf,
}

impl Stores {
    /// Starts a gateway for one phase on a runtime of its own (threads `sluice-srv`, dropped
    /// with the phase so none of its background work runs in a later one), over a fresh data
    /// folder and, on Redis, under `redis_key_prefix`, so nothing of an earlier phase is in it.
    // Every phased bench but `payloads`, which configures its gateways.
    #[allow(dead_code)]
    pub(crate) fn gateway(
        &self,
        store: Store,
        phase: &str,
        redis_key_prefix: String,
        tenant: &str,
    ) -> BenchResult<(tokio::runtime::Runtime, Http)> {
        self.gateway_with(store, phase, redis_key_prefix, tenant, |_| {})
    }

    /// [`gateway`](Self::gateway) with settings of the phase's own (`configure` changes the
    /// arguments before the gateway starts).
    pub(crate) fn gateway_with(
        &self,
        store: Store,
        phase: &str,
        redis_key_prefix: String,
        tenant: &str,
        configure: impl FnOnce(&mut CommonArgs),
    ) -> BenchResult<(tokio::runtime::Runtime, Http)> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .thread_name("sluice-srv")
            .enable_all()
            .build()?;
        let data_dir = self.scratch.join(format!("{}-{phase}", store.label()));
        std::fs::create_dir_all(&data_dir)?;
        let mut args = match store {
            Store::Embedded => CommonArgs {
                data_dir: Some(data_dir),
                ..Default::default()
            },
            Store::Redis => CommonArgs {
                data_dir: Some(data_dir),
                store: Some(self.redis.url()),
                redis_key_prefix: Some(redis_key_prefix),
                ..Default::default()
            },
        };
        configure(&mut args);
        let http = runtime.block_on(start_gateway(args, tenant))?;
        Ok((runtime, http))
    }
}

/// The runtime the load runs on (threads `bench-load`), apart from every gateway's.
/// (The dashboard bench sends one request at a time from the gateway's runtime instead.)
#[allow(dead_code)]
pub(crate) fn load_runtime() -> BenchResult<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .thread_name("bench-load")
        .enable_all()
        .build()?)
}

/// Whether `SLUICE_BENCH_PHASES` (a comma-separated list of phase numbers; all when unset)
/// asks for phase `n`: a profile of one phase need not wait through the others.
pub(crate) fn wanted(n: u8) -> bool {
    std::env::var("SLUICE_BENCH_PHASES").map_or(true, |list| {
        list.split(',').any(|p| p.trim().parse() == Ok(n))
    })
}
