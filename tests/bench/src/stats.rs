//! Measurement primitives: latency histograms, and the server processes of a target watched
//! through `/proc` (medians and the `/proc` readings themselves come from
//! `sluice-bench-support`, shared with the in-process benches). Owns nothing about queues or
//! protocols.

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use sluice_bench_support::system;
use std::time::Duration;

/// Latencies in microseconds, from 1 µs to one hour with 3 significant digits: enough for a
/// p99.9 of a sub-millisecond request and for a message that waited out a long backlog.
pub(crate) struct Latency(Histogram<u64>);

impl Latency {
    pub(crate) fn new() -> Self {
        // Bounds are constants and valid; `new_with_bounds` only fails on invalid bounds.
        Self(Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid histogram bounds"))
    }

    pub(crate) fn record(&mut self, d: Duration) {
        let micros = u64::try_from(d.as_micros()).unwrap_or(u64::MAX);
        self.0.saturating_record(micros.max(1));
    }

    pub(crate) fn record_micros(&mut self, micros: u64) {
        self.0.saturating_record(micros.max(1));
    }

    pub(crate) fn merge(&mut self, other: &Latency) {
        // Same bounds on both sides, so `add` cannot fail; saturate anyway rather than panic.
        let _ = self.0.add(&other.0);
    }

    pub(crate) fn summary(&self) -> Option<Percentiles> {
        if self.0.is_empty() {
            return None;
        }
        let ms = |v: u64| v as f64 / 1000.0;
        Some(Percentiles {
            count: self.0.len(),
            p50_ms: ms(self.0.value_at_quantile(0.50)),
            p99_ms: ms(self.0.value_at_quantile(0.99)),
            p999_ms: ms(self.0.value_at_quantile(0.999)),
            max_ms: ms(self.0.max()),
        })
    }
}

impl Default for Latency {
    fn default() -> Self {
        Self::new()
    }
}

/// The percentiles the reports quote, in milliseconds.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub(crate) struct Percentiles {
    pub count: u64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
}

impl Percentiles {
    pub(crate) fn short(&self) -> String {
        format!(
            "p50 {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.1} ms ({} samples)",
            self.p50_ms, self.p99_ms, self.p999_ms, self.max_ms, self.count
        )
    }
}

pub(crate) use sluice_bench_support::stats::median;

/// CPU seconds (user + system, all threads) a process has used so far.
pub(crate) fn cpu_seconds(pid: u32) -> Result<f64> {
    system::cpu_seconds(pid).with_context(|| format!("reading /proc/{pid}/stat"))
}

/// `VmRSS` and `VmHWM` (peak resident set) of a process, in bytes.
pub(crate) fn memory(pid: u32) -> Result<(u64, u64)> {
    system::memory(pid).with_context(|| format!("reading /proc/{pid}/status"))
}

/// The server processes of one target (e.g. Sluice plus its redis-server), summed.
#[derive(Clone, Debug, Default)]
pub(crate) struct Processes(pub Vec<u32>);

impl Processes {
    pub(crate) fn cpu_seconds(&self) -> Option<f64> {
        if self.0.is_empty() {
            return None;
        }
        self.0.iter().map(|&p| cpu_seconds(p).ok()).sum()
    }

    /// Summed VmRSS in bytes, or None when there is no process to watch or one vanished.
    pub(crate) fn rss(&self) -> Option<u64> {
        if self.0.is_empty() {
            return None;
        }
        self.0.iter().map(|&p| memory(p).ok().map(|m| m.0)).sum()
    }

    /// Summed VmHWM: each process's own peak (peaks of different processes need not coincide).
    pub(crate) fn hwm(&self) -> Option<u64> {
        if self.0.is_empty() {
            return None;
        }
        self.0.iter().map(|&p| memory(p).ok().map(|m| m.1)).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_of_known_samples() {
        let mut l = Latency::new();
        for ms in 1..=1000u64 {
            l.record(Duration::from_millis(ms));
        }
        let p = l.summary().expect("samples");
        assert_eq!(p.count, 1000);
        assert!((p.p50_ms - 500.0).abs() < 1.0, "{}", p.p50_ms);
        assert!((p.p99_ms - 990.0).abs() < 2.0, "{}", p.p99_ms);
    }

    #[test]
    fn own_process_is_readable() {
        let pid = std::process::id();
        assert!(cpu_seconds(pid).is_ok());
        let (rss, hwm) = memory(pid).expect("status");
        assert!(rss > 0 && hwm >= rss);
    }
}
