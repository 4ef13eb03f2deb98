//! Busy shares over the last second and minute: each instance's cumulative busy time, sampled
//! four times a second by one thread (reading the instances' own atomics, nothing the engine
//! waits on), so a request for the tree compares the figure now with the sample a window ago.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::repository::RepositoryManager;

/// How often the busy times are sampled.
pub const SAMPLE_EVERY: Duration = Duration::from_millis(250);
/// The shortest span a share is measured over.
const MIN_SPAN: Duration = Duration::from_millis(100);
/// The longest window kept.
const KEEP: Duration = Duration::from_secs(61);

/// A model version: namespace, name, version.
pub type VersionKey = (String, String, i64);

/// One version's samples: (when, busy ns of each instance), oldest first.
type Ring = VecDeque<(Instant, Vec<u64>)>;

/// Each model version's samples.
#[derive(Debug, Default)]
pub struct BusySamples {
    samples: Mutex<HashMap<VersionKey, Ring>>,
}

impl BusySamples {
    /// Records one sample of every version in `now`, forgetting versions no longer there and
    /// samples older than the longest window.
    pub fn record(&self, at: Instant, now: Vec<(VersionKey, Vec<u64>)>) {
        let mut all = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let seen: std::collections::HashSet<&VersionKey> = now.iter().map(|(k, _)| k).collect();
        all.retain(|k, _| seen.contains(k));
        for (key, busy) in now {
            let ring = all.entry(key).or_default();
            // A reloaded version with another instance count starts again.
            if ring.back().is_some_and(|(_, b)| b.len() != busy.len()) {
                ring.clear();
            }
            ring.push_back((at, busy));
            while ring.front().is_some_and(|(t, _)| at.duration_since(*t) > KEEP) {
                ring.pop_front();
            }
        }
    }

    /// Each instance's busy share (0..1) over about the last `window`, from `busy_now` at `at`:
    /// measured from the newest sample at least `window` old, or the oldest one there is when
    /// the version is younger than that; `None` without a sample at least `MIN_SPAN` old.
    pub fn shares(&self, key: &VersionKey, at: Instant, busy_now: &[u64], window: Duration) -> Vec<Option<f64>> {
        let all = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let from = all.get(key).and_then(|ring| {
            let old_enough = ring.iter().rev().find(|(t, _)| at.saturating_duration_since(*t) >= window);
            old_enough.or(ring.front())
        });
        match from {
            Some((t, then)) if then.len() == busy_now.len() && at.saturating_duration_since(*t) >= MIN_SPAN => {
                let span = at.saturating_duration_since(*t).as_nanos() as f64;
                busy_now
                    .iter()
                    .zip(then)
                    .map(|(now, then)| Some((now.saturating_sub(*then) as f64 / span).min(1.0)))
                    .collect()
            }
            _ => vec![None; busy_now.len()],
        }
    }
}

/// Starts the sampling thread over the repository's loaded versions.
pub fn start(repository: Arc<RepositoryManager>) -> anyhow::Result<Arc<BusySamples>> {
    let samples = Arc::new(BusySamples::default());
    let s = samples.clone();
    std::thread::Builder::new().name("actors-busy".into()).spawn(move || loop {
        let now: Vec<(VersionKey, Vec<u64>)> = repository
            .router()
            .all()
            .iter()
            .map(|m| {
                let busy = m.handle.figures.instance_snapshots().iter().map(|i| i.busy_ns).collect();
                ((m.namespace.clone(), m.name().to_string(), m.version()), busy)
            })
            .collect();
        s.record(Instant::now(), now);
        std::thread::sleep(SAMPLE_EVERY);
    })?;
    Ok(samples)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key() -> VersionKey {
        (String::new(), "m".into(), 1)
    }

    #[test]
    fn the_share_is_busy_time_over_the_window_from_the_sample_a_window_ago() {
        let s = BusySamples::default();
        let t0 = Instant::now();
        let ms = Duration::from_millis;
        // Instance 0 busy half the time, instance 1 never.
        for i in 0..=8u64 {
            s.record(t0 + ms(250 * i), vec![(key(), vec![125_000_000 * i, 0])]);
        }
        let at = t0 + ms(2000);
        let shares = s.shares(&key(), at, &[250_000_000 * 4 + 10_000_000, 0], Duration::from_secs(1));
        // From the sample at 1 s (busy 500 ms) to now (1010 ms): 510 ms over 1 s.
        assert!((shares[0].unwrap() - 0.51).abs() < 1e-9, "{shares:?}");
        assert_eq!(shares[1], Some(0.0));
        // The version is 2 s old: the minute's share runs from its first sample.
        let minute = s.shares(&key(), at, &[1_010_000_000, 0], Duration::from_secs(60));
        assert!((minute[0].unwrap() - 0.505).abs() < 1e-9, "{minute:?}");
    }

    #[test]
    fn no_share_without_samples_and_gone_versions_are_forgotten() {
        let s = BusySamples::default();
        let t0 = Instant::now();
        assert_eq!(s.shares(&key(), t0, &[5], Duration::from_secs(1)), vec![None]);
        s.record(t0, vec![(key(), vec![0])]);
        // Too young a sample for a 1 s share.
        assert_eq!(s.shares(&key(), t0 + Duration::from_millis(50), &[5], Duration::from_secs(1)), vec![None]);
        s.record(t0 + Duration::from_millis(250), vec![]);
        assert_eq!(s.shares(&key(), t0 + Duration::from_secs(2), &[5], Duration::from_secs(1)), vec![None]);
    }
}
