//! The engine's one histogram: fixed upper bounds and atomic buckets, cheap enough to record
//! every batch or step into, read as a Prometheus histogram at scrape time. The actors' batch
//! sizes and waits, the ensemble's steps and the decoupled models' first responses all use it.

use std::sync::atomic::AtomicU64;
use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

/// A histogram with fixed upper bounds and atomic buckets: cheap enough to record every batch
/// or step into, read as a Prometheus histogram at scrape time.
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One count per bound, then the overflow (+Inf) bucket; not cumulative.
    counts: Vec<AtomicU64>,
    /// Sum of observations, in thousandths of the unit (so whole-unit figures stay exact).
    sum_milli: AtomicU64,
}

/// A histogram's cumulative buckets, as Prometheus writes them.
#[derive(Debug, Clone, PartialEq)]
pub struct HistogramSnapshot {
    /// (upper bound, observations <= bound), ascending; +Inf is `count`.
    pub buckets: Vec<(f64, u64)>,
    pub count: u64,
    pub sum: f64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Self {
        debug_assert!(bounds.windows(2).all(|w| w[0] < w[1]), "ascending bounds");
        Histogram {
            bounds,
            counts: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_milli: AtomicU64::new(0),
        }
    }

    pub fn record(&self, value: f64) {
        let i = self.bounds.iter().position(|b| value <= *b).unwrap_or(self.bounds.len());
        self.counts[i].fetch_add(1, Relaxed);
        self.sum_milli.fetch_add((value.max(0.0) * 1000.0).round() as u64, Relaxed);
    }

    /// Records a duration in microseconds.
    pub fn record_us(&self, d: Duration) {
        self.record(d.as_nanos() as f64 / 1000.0);
    }

    pub fn snapshot(&self) -> HistogramSnapshot {
        let mut running = 0;
        let mut buckets = Vec::with_capacity(self.bounds.len());
        for (b, c) in self.bounds.iter().zip(&self.counts) {
            running += c.load(Relaxed);
            buckets.push((*b, running));
        }
        let count = running + self.counts[self.bounds.len()].load(Relaxed);
        HistogramSnapshot { buckets, count, sum: self.sum_milli.load(Relaxed) as f64 / 1000.0 }
    }
}

/// Buckets of the batcher's batch sizes.
pub const BATCH_SIZE_BOUNDS: &[f64] = &[1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0, 1024.0];
/// Buckets of waits and step latencies, in microseconds (50 µs to 10 s).
pub const LATENCY_US_BOUNDS: &[f64] = &[
    50.0,
    100.0,
    250.0,
    500.0,
    1_000.0,
    2_500.0,
    5_000.0,
    10_000.0,
    25_000.0,
    50_000.0,
    100_000.0,
    250_000.0,
    500_000.0,
    1_000_000.0,
    10_000_000.0,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_buckets_are_cumulative() {
        let h = Histogram::new(&[1.0, 2.0, 4.0]);
        for v in [1.0, 1.0, 3.0, 9.0, 2.0] {
            h.record(v);
        }
        let s = h.snapshot();
        assert_eq!(s.buckets, vec![(1.0, 2), (2.0, 3), (4.0, 4)]);
        assert_eq!(s.count, 5);
        assert_eq!(s.sum, 16.0);
        h.record_us(Duration::from_micros(1500));
        assert_eq!(h.snapshot().sum, 1516.0, "a duration counts in microseconds");
        h.record(0.25);
        assert_eq!(h.snapshot().sum, 1516.25);
    }
}
