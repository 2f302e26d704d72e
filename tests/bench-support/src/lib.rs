//! What Sluice's benchmarks share, so each bench file holds only what it measures: statistics
//! ([`stats`]), what `/proc` says about processes, threads and the machine, and where scratch
//! data may live ([`system`]), and the producer/consumer loop with its delivery ledger
//! ([`flow`]). It names no Sluice crate, so any crate's benches can use it without a
//! dependency cycle.

pub mod flow;
pub mod stats;
pub mod system;

use std::error::Error;

/// What bench code answers: any error, sendable across tasks.
pub type BenchResult<T> = Result<T, Box<dyn Error + Send + Sync>>;

/// Whether `SLUICE_BENCH_QUICK` asks for a smoke run (set, non-empty and not `0`).
pub fn quick() -> bool {
    std::env::var("SLUICE_BENCH_QUICK").is_ok_and(|v| !v.is_empty() && v != "0")
}
