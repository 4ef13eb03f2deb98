//! Triton's optional latency families, chosen with `--metrics-config`:
//!
//! - `counter_latencies=false` drops the `nv_inference_*_duration_us` counters (default true);
//! - `summary_latencies=true` adds the summaries `nv_inference_request_summary_us`,
//!   `nv_inference_queue_summary_us` and `nv_inference_compute_{input,infer,output}_summary_us`, one
//!   observation per successful request, in microseconds, with quantiles over a rolling 60 s window (Triton's
//!   prometheus-cpp default) and cumulative `_sum`/`_count`;
//! - `summary_quantiles=0.5:0.05,0.9:0.01,...` sets the quantiles (the error half of each pair is accepted
//!   and ignored: the exporter's sketch has its own error bound); For a model whose answers are cached, as in
//!   Triton, the request summary is left out and `nv_cache_hit_summary_per_model` (each hit's lookup) and
//!   `nv_cache_miss_summary_per_model` (each miss's lookup and insertion) are added; a hit is observed in the
//!   queue summary too;
//! - `histogram_latencies=true` adds `nv_inference_first_response_histogram_ms` for decoupled models only,
//!   buckets 100, 500, 2000, 5000 ms (Triton's defaults).
//!
//! The counters are rebuilt from the engine's statistics at scrape time; these per-request
//! families cannot be, so the engine reports each request to a [`ModelLatency`] (see
//! [`observer`]).

use std::sync::Arc;
use std::time::Duration;

use metrics::{describe_histogram, histogram, Histogram};
use parking_lot::Mutex;
use tritium_actors::histogram::Histogram as EngineHistogram;
use tritium_actors::stats::{RequestTimes, StatsObserver};

use crate::repository::ModelKey;

/// Triton's default summary quantiles (`{quantile, error}` pairs in Triton).
pub const DEFAULT_QUANTILES: [(f64, f64); 5] = [(0.5, 0.05), (0.9, 0.01), (0.95, 0.001), (0.99, 0.001), (0.999, 0.001)];
/// Triton's default buckets of `nv_inference_first_response_histogram_ms`.
pub const FIRST_RESPONSE_BUCKETS_MS: [f64; 4] = [100.0, 500.0, 2000.0, 5000.0];

pub const FIRST_RESPONSE_HISTOGRAM: &str = "nv_inference_first_response_histogram_ms";

/// The `--metrics-config` settings that shape the latency families.
#[derive(Debug, Clone, PartialEq)]
pub struct MetricsConfig {
    pub counter_latencies: bool,
    pub summary_latencies: bool,
    pub histogram_latencies: bool,
    /// `(quantile, error)` pairs.
    pub summary_quantiles: Vec<(f64, f64)>,
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            counter_latencies: true,
            summary_latencies: false,
            histogram_latencies: false,
            summary_quantiles: DEFAULT_QUANTILES.to_vec(),
        }
    }
}

fn parse_bool(key: &str, value: &str) -> Result<bool, String> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" | "1" | "on" | "yes" => Ok(true),
        "false" | "0" | "off" | "no" => Ok(false),
        other => Err(format!("--metrics-config {key}: expected true or false, got '{other}'")),
    }
}

fn parse_quantiles(value: &str) -> Result<Vec<(f64, f64)>, String> {
    let mut out = Vec::new();
    for pair in value.trim_matches('"').split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let (q, e) = pair
            .split_once(':')
            .ok_or_else(|| format!("--metrics-config summary_quantiles: '{pair}' is not <quantile>:<error>"))?;
        let q: f64 = q.trim().parse().map_err(|_| format!("--metrics-config summary_quantiles: bad quantile '{q}'"))?;
        let e: f64 = e.trim().parse().map_err(|_| format!("--metrics-config summary_quantiles: bad error '{e}'"))?;
        if !(0.0..=1.0).contains(&q) || !(0.0..=1.0).contains(&e) {
            return Err(format!("--metrics-config summary_quantiles: '{pair}' must lie in [0, 1]"));
        }
        out.push((q, e));
    }
    if out.is_empty() {
        return Err("--metrics-config summary_quantiles: no quantile given".into());
    }
    Ok(out)
}

impl MetricsConfig {
    /// Applies one `--metrics-config` value, `<setting>=<value>`.
    pub fn apply(&mut self, setting: &str) -> Result<(), String> {
        let (key, value) = setting
            .split_once('=')
            .ok_or_else(|| format!("--metrics-config '{setting}': expected <setting>=<value>"))?;
        let key = key.trim();
        match key {
            "counter_latencies" => self.counter_latencies = parse_bool(key, value)?,
            "summary_latencies" => self.summary_latencies = parse_bool(key, value)?,
            "histogram_latencies" => self.histogram_latencies = parse_bool(key, value)?,
            "summary_quantiles" => self.summary_quantiles = parse_quantiles(value)?,
            // Triton passes settings it does not know on to the core, which ignores them.
            other => tracing::warn!("--metrics-config: ignoring unknown setting '{other}'"),
        }
        Ok(())
    }

    /// The config of every `--metrics-config` value, in order.
    pub fn parse<S: AsRef<str>>(settings: &[S]) -> Result<Self, String> {
        let mut c = MetricsConfig::default();
        for s in settings {
            c.apply(s.as_ref())?;
        }
        Ok(c)
    }

    pub fn quantiles(&self) -> Vec<f64> {
        self.summary_quantiles.iter().map(|(q, _)| *q).collect()
    }
}

pub(super) fn describe() {
    describe_histogram!(
        "nv_inference_request_summary_us",
        "Summary of inference request duration in microseconds (includes cached requests)"
    );
    describe_histogram!(
        "nv_inference_queue_summary_us",
        "Summary of inference queuing duration in microseconds (includes cached requests)"
    );
    describe_histogram!(
        "nv_inference_compute_input_summary_us",
        "Cumulative compute input duration in microseconds (does not include cached requests)"
    );
    describe_histogram!(
        "nv_inference_compute_infer_summary_us",
        "Cumulative compute inference duration in microseconds (does not include cached requests)"
    );
    describe_histogram!(
        "nv_inference_compute_output_summary_us",
        "Cumulative inference compute output duration in microseconds (does not include cached requests)"
    );
    describe_histogram!(
        "nv_cache_hit_summary_per_model",
        "Summary of cache hit counts/durations per model, in microseconds."
    );
    describe_histogram!(
        "nv_cache_miss_summary_per_model",
        "Summary of cache miss counts/durations per model, in microseconds."
    );
}

/// A series' labels, in order.
type Labels = Vec<(&'static str, String)>;

const FIRST_RESPONSE_HELP: &str = "Duration from request to first response in milliseconds";

/// The first-response histograms of decoupled models, in the engine's histogram (the one
/// histogram implementation), kept for the life of the process as the recorder's families are;
/// a reloaded version records into the same series.
#[derive(Default)]
pub struct FirstResponses {
    series: Mutex<Vec<(Labels, Arc<EngineHistogram>)>>,
}

impl FirstResponses {
    fn series(&self, labels: Labels) -> Arc<EngineHistogram> {
        let mut series = self.series.lock();
        if let Some((_, h)) = series.iter().find(|(l, _)| *l == labels) {
            return h.clone();
        }
        let h = Arc::new(EngineHistogram::new(&FIRST_RESPONSE_BUCKETS_MS));
        series.push((labels, h.clone()));
        h
    }

    /// Appends the family to a scrape's text.
    pub fn write(&self, out: &mut String) {
        let series: Vec<_> = self.series.lock().iter().map(|(l, h)| (l.clone(), h.snapshot())).collect();
        super::histogram::write(out, FIRST_RESPONSE_HISTOGRAM, FIRST_RESPONSE_HELP, &series);
    }
}

struct Summaries {
    /// None for a cached model (Triton leaves it out: a miss's duration grows after the fact).
    request: Option<Histogram>,
    queue: Histogram,
    compute_input: Histogram,
    compute_infer: Histogram,
    compute_output: Histogram,
    /// For a cached model: (hits, misses).
    cache: Option<(Histogram, Histogram)>,
}

/// One model version's per-request latency families, recorded into the endpoint's recorder.
pub struct ModelLatency {
    summaries: Option<Summaries>,
    first_response: Option<Arc<EngineHistogram>>,
}

fn us(d: Duration) -> f64 {
    // Triton observes whole microseconds (ns / 1000).
    (d.as_nanos() / 1000) as f64
}

impl ModelLatency {
    /// The families `config` asks for, for one model version; None when it asks for none.
    pub fn new(
        config: &MetricsConfig,
        model: &ModelKey,
        version: &str,
        decoupled: bool,
        cached: bool,
        first_responses: &FirstResponses,
    ) -> Option<ModelLatency> {
        let labels =
            super::namespaced(&model.namespace, vec![("model", model.name.clone()), ("version", version.to_string())]);
        let summaries = config.summary_latencies.then(|| Summaries {
            request: (!cached).then(|| histogram!("nv_inference_request_summary_us", &labels)),
            queue: histogram!("nv_inference_queue_summary_us", &labels),
            compute_input: histogram!("nv_inference_compute_input_summary_us", &labels),
            compute_infer: histogram!("nv_inference_compute_infer_summary_us", &labels),
            compute_output: histogram!("nv_inference_compute_output_summary_us", &labels),
            cache: cached.then(|| {
                (
                    histogram!("nv_cache_hit_summary_per_model", &labels),
                    histogram!("nv_cache_miss_summary_per_model", &labels),
                )
            }),
        });
        let first_response = (config.histogram_latencies && decoupled).then(|| first_responses.series(labels.clone()));
        if summaries.is_none() && first_response.is_none() {
            return None;
        }
        Some(ModelLatency { summaries, first_response })
    }
}

impl StatsObserver for ModelLatency {
    /// One successful request (what `ModelStats::record_success` counts).
    fn success(&self, t: &RequestTimes) {
        if let Some(s) = &self.summaries {
            if let Some(request) = &s.request {
                request.record(us(t.total));
            }
            s.queue.record(us(t.queue));
            s.compute_input.record(us(t.compute_input));
            s.compute_infer.record(us(t.compute_infer));
            s.compute_output.record(us(t.compute_output));
        }
    }

    /// A request answered from the response cache.
    fn cache_hit(&self, queue: Duration, lookup: Duration) {
        if let Some(s) = &self.summaries {
            s.queue.record(us(queue));
            if let Some((hits, _)) = &s.cache {
                hits.record(us(lookup));
            }
        }
    }

    /// A request that missed the cache: its lookup and insertion.
    fn cache_miss(&self, lookup_and_insert: Duration) {
        if let Some((_, misses)) = self.summaries.as_ref().and_then(|s| s.cache.as_ref()) {
            misses.record(us(lookup_and_insert));
        }
    }

    /// The first response of a decoupled request, `since_received` after the request arrived.
    fn first_response(&self, since_received: Duration) {
        if let Some(h) = &self.first_response {
            h.record(since_received.as_nanos() as f64 / 1e6);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_tritons_settings() {
        let c =
            MetricsConfig::parse(&["summary_latencies=true", "histogram_latencies=true", "counter_latencies=false"])
                .unwrap();
        assert!(c.summary_latencies && c.histogram_latencies && !c.counter_latencies);
        assert_eq!(c.summary_quantiles, DEFAULT_QUANTILES.to_vec());
        let c = MetricsConfig::parse(&["summary_quantiles=0.5:0.05,0.9:0.01"]).unwrap();
        assert_eq!(c.quantiles(), vec![0.5, 0.9]);
        assert_eq!(MetricsConfig::parse::<&str>(&[]).unwrap(), MetricsConfig::default());
        assert!(MetricsConfig::parse(&["summary_latencies"]).is_err());
        assert!(MetricsConfig::parse(&["summary_latencies=maybe"]).is_err());
        assert!(MetricsConfig::parse(&["summary_quantiles=0.5"]).is_err());
        assert!(MetricsConfig::parse(&["summary_quantiles=1.5:0.1"]).is_err());
        assert_eq!(MetricsConfig::parse(&["nope=true"]).unwrap(), MetricsConfig::default());
    }

    #[test]
    fn records_only_what_is_asked() {
        let m = ModelKey::new("", "m");
        let off = MetricsConfig::default();
        assert!(ModelLatency::new(&off, &m, "1", true, false, &FirstResponses::default()).is_none());
        let hist = MetricsConfig { histogram_latencies: true, ..Default::default() };
        assert!(
            ModelLatency::new(&hist, &m, "1", false, false, &FirstResponses::default()).is_none(),
            "first-response histogram is for decoupled models only"
        );
        assert!(ModelLatency::new(&hist, &m, "1", true, false, &FirstResponses::default()).is_some());
        let sum = MetricsConfig { summary_latencies: true, ..Default::default() };
        assert!(ModelLatency::new(&sum, &m, "1", false, false, &FirstResponses::default()).is_some());
    }
}
