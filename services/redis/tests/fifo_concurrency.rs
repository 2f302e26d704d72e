//! The conformance suite's FIFO concurrency test on Redis, standalone and Cluster: four engines
//! (four gateways) on one store under one key prefix, so consumers and producers of one queue
//! go through different connections and caches.

use sluice_conformance::fifo_concurrency::{fifo_holds_under_concurrency, FifoSetup};
use sluice_engine::{Engine, HandleKey, ReceiptHandle};
use sluice_redis::{RedisEngine, RedisOptions};
use std::sync::Arc;

const GATEWAYS: usize = 4;

/// The queue's delivery counter: a handle's delivery number is the counter (incremented inside
/// the receive script) above a 20-bit per-receive salt.
fn delivery_counter(handle: &ReceiptHandle) -> u64 {
    handle.delivery >> 20
}

/// Several engines on one fresh prefix (so one store and one handle key), and that key.
async fn engines(url: &str) -> (Vec<Arc<dyn Engine>>, HandleKey) {
    let prefix = sluice_testkit::unique_prefix("fifo-concurrency");
    let mut engines: Vec<Arc<dyn Engine>> = Vec::new();
    let mut handle_key = None;
    for _ in 0..GATEWAYS {
        let options = RedisOptions {
            key_prefix: prefix.clone(),
            ..RedisOptions::default()
        };
        let engine = RedisEngine::connect(url, options)
            .await
            .unwrap_or_else(|e| panic!("connect to {url}: {e}"));
        handle_key.get_or_insert_with(|| engine.handle_key().clone());
        engines.push(Arc::new(engine));
    }
    (engines, handle_key.unwrap_or_else(|| panic!("no engine")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifo_order_and_group_locking_hold_under_concurrency() {
    let server = sluice_testkit::shared_server();
    let (engines, handle_key) = engines(&server.url()).await;
    fifo_holds_under_concurrency(FifoSetup {
        engines,
        handle_key,
        delivery_order: delivery_counter,
        speed: 20,
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifo_order_and_group_locking_hold_under_concurrency_on_a_cluster() {
    let cluster = sluice_testkit::shared_cluster();
    let (engines, handle_key) = engines(&cluster.url()).await;
    fifo_holds_under_concurrency(FifoSetup {
        engines,
        handle_key,
        delivery_order: delivery_counter,
        speed: 20,
    })
    .await;
}
