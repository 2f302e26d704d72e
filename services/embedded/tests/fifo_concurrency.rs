//! The conformance suite's FIFO concurrency test on the embedded engine: one engine (one
//! process owns a data folder), in its own temporary directory.

use sluice_conformance::fifo_concurrency::{fifo_holds_under_concurrency, FifoSetup};
use sluice_embedded::{EmbeddedEngine, EmbeddedOptions};
use std::sync::Arc;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifo_holds_under_concurrent_consumers_and_crashes() {
    let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("temporary directory: {e}"));
    let engine = EmbeddedEngine::open(dir.path(), EmbeddedOptions::default())
        .unwrap_or_else(|e| panic!("open the embedded engine: {e}"));
    let handle_key = engine.handle_key().clone();
    fifo_holds_under_concurrency(FifoSetup {
        engines: vec![Arc::new(engine)],
        handle_key,
        // One counter per engine, incremented per delivery from a random start.
        delivery_order: |handle| handle.delivery,
        speed: 50,
    })
    .await;
}
