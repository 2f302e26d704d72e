//! The shared conformance suite against one standalone `redis-server` shared by every case of
//! this binary; each case gets its own engine under its own key prefix.

use sluice_conformance::TestEngine;
use sluice_redis::{RedisEngine, RedisOptions};
use std::sync::Arc;

async fn make() -> TestEngine {
    let server = sluice_testkit::shared_server();
    let options = RedisOptions {
        key_prefix: sluice_testkit::unique_prefix("conf"),
        ..RedisOptions::default()
    };
    let engine = RedisEngine::connect(&server.url(), options)
        .await
        .unwrap_or_else(|e| panic!("connect to {}: {e}", server.url()));
    TestEngine {
        engine: Arc::new(engine),
        guard: Box::new(()),
    }
}

sluice_conformance::engine_suite!(make);
