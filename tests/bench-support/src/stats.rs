//! Statistics over repeated runs and latency samples: medians, quantiles, and the formatting
//! the bench tables share.

use std::time::Duration;

/// The median of the finite values, or `None` when there is none.
pub fn median(values: &[f64]) -> Option<f64> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let n = v.len();
    Some(if n % 2 == 1 {
        v[n / 2]
    } else {
        (v[n / 2 - 1] + v[n / 2]) / 2.0
    })
}

/// [`median`], NaN when there is none: for table cells, which print NaN as such.
pub fn median_or_nan(values: &[f64]) -> f64 {
    median(values).unwrap_or(f64::NAN)
}

/// The values of every run, rounded, comma separated: `"48154, 53431, 39961"`.
pub fn runs(values: &[f64]) -> String {
    values
        .iter()
        .map(|x| format!("{x:.0}"))
        .collect::<Vec<_>>()
        .join(", ")
}

/// The `q` quantile (nearest rank) of sorted samples; zero when there are none.
pub fn quantile(sorted: &[Duration], q: f64) -> Duration {
    if sorted.is_empty() {
        return Duration::ZERO;
    }
    let i = ((sorted.len() as f64 * q).ceil() as usize).clamp(1, sorted.len()) - 1;
    sorted[i]
}

/// Milliseconds, fractional.
pub fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
}

/// Latency summary of a set of samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Latencies {
    /// Samples taken.
    pub count: usize,
    /// Median.
    pub p50: Duration,
    /// 99th percentile.
    pub p99: Duration,
    /// 99.9th percentile.
    pub p999: Duration,
    /// The slowest sample.
    pub max: Duration,
}

impl Latencies {
    /// Summarises samples in any order.
    pub fn of(mut samples: Vec<Duration>) -> Self {
        samples.sort_unstable();
        Self {
            count: samples.len(),
            p50: quantile(&samples, 0.50),
            p99: quantile(&samples, 0.99),
            p999: quantile(&samples, 0.999),
            max: samples.last().copied().unwrap_or_default(),
        }
    }

    /// The milliseconds of p50, p99, p99.9 and max, in that order.
    pub fn millis(&self) -> [f64; 4] {
        [ms(self.p50), ms(self.p99), ms(self.p999), ms(self.max)]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn median_of_odd_and_even_and_none() {
        assert_eq!(median(&[3.0, 1.0, 2.0]), Some(2.0));
        assert_eq!(median(&[4.0, 1.0, 2.0, 3.0]), Some(2.5));
        assert_eq!(median(&[f64::NAN, 1.0]), Some(1.0));
        assert_eq!(median(&[]), None);
        assert!(median_or_nan(&[]).is_nan());
    }

    #[test]
    fn quantiles_by_nearest_rank() {
        let samples: Vec<Duration> = (1..=1000).map(Duration::from_millis).collect();
        let l = Latencies::of(samples.into_iter().rev().collect());
        assert_eq!(l.count, 1000);
        assert_eq!(l.p50, Duration::from_millis(500));
        assert_eq!(l.p99, Duration::from_millis(990));
        assert_eq!(l.p999, Duration::from_millis(999));
        assert_eq!(l.max, Duration::from_millis(1000));
        assert_eq!(quantile(&[], 0.5), Duration::ZERO);
        assert_eq!(runs(&[1.4, 2.6]), "1, 3");
    }
}
