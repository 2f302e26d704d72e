//! The engine factories the conformance suites of this crate share (plain and with spill): one
//! Redis (standalone or Cluster) per test binary, a fresh engine under its own key prefix per
//! case. Each binary uses one of them.
#![allow(dead_code)]

use sluice_conformance::TestEngine;
use sluice_redis::{RedisEngine, RedisOptions};
use std::sync::Arc;

async fn engine_on(url: &str) -> TestEngine {
    let options = RedisOptions {
        key_prefix: sluice_testkit::unique_prefix("conf"),
        ..RedisOptions::default()
    };
    let engine = RedisEngine::connect(url, options)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
    TestEngine {
        engine: Arc::new(engine),
        guard: Box::new(()),
    }
}

/// An engine on the binary's standalone `redis-server`.
pub(crate) async fn standalone() -> TestEngine {
    engine_on(&sluice_testkit::shared_server().url()).await
}

/// An engine on the binary's 3-master Redis Cluster.
pub(crate) async fn cluster() -> TestEngine {
    engine_on(&sluice_testkit::shared_cluster().url()).await
}
