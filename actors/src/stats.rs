//! Per-model-version statistics, as Triton's statistics extension reports them. The instance
//! actors write them; the statistics endpoints and the metrics exporter read the same figures.

use std::collections::BTreeMap;
use std::sync::atomic::Ordering::{Relaxed, SeqCst};
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::{Mutex, RwLock};

/// A count and a cumulative duration in nanoseconds.
#[derive(Debug, Default)]
pub struct Duration2 {
    pub count: AtomicU64,
    pub ns: AtomicU64,
}

impl Duration2 {
    pub fn add(&self, d: Duration) {
        self.count.fetch_add(1, Relaxed);
        self.ns.fetch_add(d.as_nanos() as u64, Relaxed);
    }
    /// Adds time without counting one more (Triton adds a cache miss's insertion to the
    /// request's duration after the request was counted).
    pub fn add_ns(&self, d: Duration) {
        self.ns.fetch_add(d.as_nanos() as u64, Relaxed);
    }
    pub fn get(&self) -> (u64, u64) {
        (self.count.load(Relaxed), self.ns.load(Relaxed))
    }
}

/// Why a request failed, for `nv_inference_request_failure{reason=…}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FailureReason {
    Rejected,
    Canceled,
    Backend,
    Other,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Rejected => "REJECTED",
            FailureReason::Canceled => "CANCELED",
            FailureReason::Backend => "BACKEND",
            FailureReason::Other => "OTHER",
        }
    }
}

/// Figures of one batch size.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct BatchFigures {
    pub count: u64,
    pub compute_input_ns: u64,
    pub compute_infer_ns: u64,
    pub compute_output_ns: u64,
}

/// A snapshot of one model version's statistics.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct StatsSnapshot {
    pub last_inference_ms: u64,
    pub inference_count: u64,
    pub execution_count: u64,
    pub success: (u64, u64),
    pub fail: (u64, u64),
    pub queue: (u64, u64),
    pub compute_input: (u64, u64),
    pub compute_infer: (u64, u64),
    pub compute_output: (u64, u64),
    /// Requests answered from the response cache, and the time their lookups took.
    pub cache_hit: (u64, u64),
    /// Requests that missed it, and the time of their lookups and insertions.
    pub cache_miss: (u64, u64),
    pub failures: BTreeMap<&'static str, u64>,
    pub batches: BTreeMap<u64, BatchFigures>,
    pub pending: u64,
    /// The backend's response statistics by response index (`"0"`, `"1"`, …, ordered as
    /// strings, as Triton's map is).
    pub responses: BTreeMap<String, ResponseFigures>,
    /// What the backend says the model uses, by memory type and id.
    pub memory_usage: Vec<MemoryUsage>,
}

/// Triton's figures of the responses that had one index among their request's responses (the
/// statistics extension's `response_stats`), as the backend reported them: counts and
/// nanoseconds.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct ResponseFigures {
    pub compute_infer: (u64, u64),
    pub compute_output: (u64, u64),
    pub success: (u64, u64),
    pub fail: (u64, u64),
    pub empty_response: (u64, u64),
    pub cancel: (u64, u64),
}

/// How a response the backend reported went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResponseKind {
    /// With outputs, made from `compute_output_start` on.
    Success,
    /// Failed; with outputs when `compute_output_start` is set.
    Fail,
    /// Without outputs (a decoupled model's final flag alone).
    Empty,
    Cancel,
}

/// One response as a backend reported it (Triton's `ReportResponseStatistics`): its index among
/// its request's responses and its timestamps (ns; `compute_output_start` 0 = no outputs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseReport {
    pub index: u64,
    pub kind: ResponseKind,
    pub start_ns: u64,
    pub compute_output_start_ns: u64,
    pub end_ns: u64,
}

impl ResponseFigures {
    /// Adds one response as Triton's `InferenceStatsAggregator::UpdateResponse*` do, or says
    /// (in Triton's words) why its timestamps cannot be.
    fn add(&mut self, r: &ResponseReport) -> Result<(), String> {
        let (start, output, end) = (r.start_ns, r.compute_output_start_ns, r.end_ns);
        let with_output = output > 0 && matches!(r.kind, ResponseKind::Success | ResponseKind::Fail);
        if with_output && start > output {
            return Err("Response start cannot happen after compute output start".into());
        }
        if with_output && output > end {
            return Err("Compute output start cannot happen after response end".into());
        }
        if !with_output && start > end {
            return Err("Response start cannot happen after response end".into());
        }
        let total = end - start;
        let bump = |p: &mut (u64, u64), ns: u64| *p = (p.0 + 1, p.1 + ns);
        match r.kind {
            ResponseKind::Success | ResponseKind::Fail if with_output => {
                bump(&mut self.compute_infer, output - start);
                bump(&mut self.compute_output, end - output);
            }
            ResponseKind::Success | ResponseKind::Fail | ResponseKind::Empty => bump(&mut self.compute_infer, total),
            ResponseKind::Cancel => {}
        }
        match r.kind {
            ResponseKind::Success => bump(&mut self.success, total),
            ResponseKind::Fail => bump(&mut self.fail, total),
            ResponseKind::Empty => bump(&mut self.empty_response, total),
            ResponseKind::Cancel => bump(&mut self.cancel, total),
        }
        Ok(())
    }
}

/// Receives each request's figures as the engine records them, for families that cannot be
/// rebuilt from the cumulative statistics (the metrics endpoint's summaries and histograms).
pub trait StatsObserver: Send + Sync {
    /// One successful request, as `ModelStats::record_success` counts it.
    fn success(&self, times: &RequestTimes);
    /// The first response of a decoupled request, `since_received` after it arrived.
    fn first_response(&self, _since_received: Duration) {}
    /// A request answered from the response cache: its queue time and its lookup.
    fn cache_hit(&self, _queue: Duration, _lookup: Duration) {}
    /// A request that missed the cache: its lookup and the insertion of its answer.
    fn cache_miss(&self, _lookup_and_insert: Duration) {}
}

/// One line of the statistics' `memory_usage`: Triton's memory type name (`CPU`, `CPU_PINNED`,
/// `GPU`), its id and the bytes the backend says the model uses there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryUsage {
    pub kind: String,
    pub id: i64,
    pub byte_size: u64,
}

/// Reads a model's memory usage as its backend last reported it.
pub type MemoryUsageSource = Box<dyn Fn() -> Vec<MemoryUsage> + Send + Sync>;

/// How long a reader of the statistics waits at most for requests answered early to be counted.
pub const SETTLE_LIMIT: Duration = Duration::from_millis(200);

#[derive(Default)]
pub struct ModelStats {
    last_inference_ms: AtomicU64,
    inference_count: AtomicU64,
    execution_count: AtomicU64,
    pub success: Duration2,
    pub fail: Duration2,
    pub queue: Duration2,
    pub compute_input: Duration2,
    pub compute_infer: Duration2,
    pub compute_output: Duration2,
    pub cache_hit: Duration2,
    pub cache_miss: Duration2,
    /// Requests accepted and not yet answered.
    pub pending: AtomicU64,
    /// Requests answered before their backend's `execute` returned, and of those the ones
    /// counted since (their statistics wait for the backend's report): see
    /// [`ModelStats::settled`].
    early_answered: AtomicU64,
    early_counted: AtomicU64,
    /// Readers waiting in [`ModelStats::settled`], and how they are woken.
    settling: AtomicUsize,
    counted: tokio::sync::Notify,
    failures: Mutex<BTreeMap<FailureReason, u64>>,
    batches: Mutex<BTreeMap<u64, BatchFigures>>,
    /// The backend's response statistics, by response index.
    response_stats: Mutex<BTreeMap<String, ResponseFigures>>,
    observer: std::sync::OnceLock<Box<dyn StatsObserver>>,
    /// Keeps a snapshot whole: every record that changes several figures holds it shared (so
    /// records never wait for one another), [`ModelStats::snapshot`] holds it alone, so it never
    /// sees a request counted in one figure and not yet in the next. perf_analyzer subtracts two
    /// snapshots and aborts when their compute counts differ, as Triton's statistics (kept under
    /// one mutex) never let them.
    whole: RwLock<()>,
    /// Where the model's memory usage is read, for a backend that reports it.
    memory_usage: std::sync::OnceLock<MemoryUsageSource>,
    /// When a request's responses go out: the first, and the gaps between a decoupled
    /// request's responses (for time-to-first-token and inter-token figures).
    pub responses: ResponseTimes,
}

/// A model's response timing, in the engine's histograms (microseconds): the time from a
/// request's arrival to its first response (its only one, for a non-decoupled model), and the
/// time between consecutive responses of one decoupled request (its final flag alone is not a
/// response).
#[derive(Debug)]
pub struct ResponseTimes {
    pub first: crate::histogram::Histogram,
    pub between: crate::histogram::Histogram,
}

impl Default for ResponseTimes {
    fn default() -> Self {
        use crate::histogram::{Histogram, LATENCY_US_BOUNDS};
        ResponseTimes { first: Histogram::new(LATENCY_US_BOUNDS), between: Histogram::new(LATENCY_US_BOUNDS) }
    }
}

impl std::fmt::Debug for ModelStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ModelStats").field("snapshot", &self.snapshot()).finish()
    }
}

fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_millis() as u64).unwrap_or(0)
}

/// Where a request's time went inside the server, as the statistics extension splits it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ComputeTimes {
    pub queue: Duration,
    pub compute_input: Duration,
    pub compute_infer: Duration,
    pub compute_output: Duration,
}

impl std::ops::AddAssign for ComputeTimes {
    fn add_assign(&mut self, o: Self) {
        self.queue += o.queue;
        self.compute_input += o.compute_input;
        self.compute_infer += o.compute_infer;
        self.compute_output += o.compute_output;
    }
}

/// The times of one request that ran in a batch.
#[derive(Debug, Clone, Copy)]
pub struct RequestTimes {
    pub total: Duration,
    pub queue: Duration,
    pub compute_input: Duration,
    pub compute_infer: Duration,
    pub compute_output: Duration,
    pub batch_size: u64,
}

impl ModelStats {
    pub fn record_success(&self, t: &RequestTimes) {
        {
            let _whole = self.whole.read();
            self.success.add(t.total);
            self.queue.add(t.queue);
            self.compute_input.add(t.compute_input);
            self.compute_infer.add(t.compute_infer);
            self.compute_output.add(t.compute_output);
            self.inference_count.fetch_add(t.batch_size, Relaxed);
        }
        self.last_inference_ms.store(now_ms(), Relaxed);
        if let Some(o) = self.observer.get() {
            o.success(t);
        }
    }

    /// The first response of a decoupled request went out.
    pub fn record_first_response(&self, since_received: Duration) {
        if let Some(o) = self.observer.get() {
            o.first_response(since_received);
        }
    }

    /// Sets the observer told of every request from now on; only the first call has effect.
    /// Where the statistics read the model's memory usage (a backend that reports it); only
    /// the first call has effect. Without one, the model reports none.
    pub fn set_memory_usage_source(&self, source: MemoryUsageSource) {
        let _ = self.memory_usage.set(source);
    }

    pub fn set_observer(&self, observer: Box<dyn StatsObserver>) {
        let _ = self.observer.set(observer);
    }

    /// A request answered from the response cache (Triton's `UpdateSuccessCacheHit`): a
    /// success with its queue time, no compute, no inference and no execution counted.
    pub fn record_cache_hit(&self, total: Duration, queue: Duration, lookup: Duration) {
        {
            let _whole = self.whole.read();
            self.success.add(total);
            self.queue.add(queue);
            self.cache_hit.add(lookup);
        }
        if let Some(o) = self.observer.get() {
            o.cache_hit(queue, lookup);
        }
    }

    /// A request that missed the cache and was answered by its model, which counted it; its
    /// lookup and insertion add to its duration (Triton's `UpdateSuccessCacheMiss`).
    pub fn record_cache_miss(&self, lookup_and_insert: Duration) {
        {
            let _whole = self.whole.read();
            self.success.add_ns(lookup_and_insert);
            self.cache_miss.add(lookup_and_insert);
        }
        if let Some(o) = self.observer.get() {
            o.cache_miss(lookup_and_insert);
        }
    }

    pub fn record_failure(&self, total: Duration, reason: FailureReason) {
        let _whole = self.whole.read();
        self.fail.add(total);
        *self.failures.lock().entry(reason).or_default() += 1;
    }

    /// One model execution of `batch_size` items.
    pub fn record_execution(&self, batch_size: u64, input: Duration, infer: Duration, output: Duration) {
        let _whole = self.whole.read();
        self.execution_count.fetch_add(1, Relaxed);
        let mut batches = self.batches.lock();
        let b = batches.entry(batch_size).or_default();
        b.count += 1;
        b.compute_input_ns += input.as_nanos() as u64;
        b.compute_infer_ns += infer.as_nanos() as u64;
        b.compute_output_ns += output.as_nanos() as u64;
    }

    /// One response a backend reported; an error (nothing counted) when its timestamps are out
    /// of order, as Triton refuses them.
    pub fn record_response(&self, r: &ResponseReport) -> Result<(), String> {
        // `add` checks before it changes anything: a refused report leaves no empty entry.
        let mut scratch = ResponseFigures::default();
        scratch.add(r)?;
        let mut stats = self.response_stats.lock();
        stats.entry(r.index.to_string()).or_default().add(r)
    }

    /// A request was answered before its backend's `execute` returned; its statistics follow
    /// ([`ModelStats::counted_early`]).
    pub(crate) fn answered_early(&self) {
        self.early_answered.fetch_add(1, SeqCst);
    }

    /// The statistics of a request answered early are counted: readers waiting for them go on.
    pub(crate) fn counted_early(&self) {
        self.early_counted.fetch_add(1, SeqCst);
        // Only when a reader waits (rare): `Notify` takes a lock. A reader registers before it
        // looks at the count, so with both sides `SeqCst` either it sees this count or this
        // sees it.
        if self.settling.load(SeqCst) > 0 {
            self.counted.notify_waiters();
        }
    }

    /// Waits, without holding the thread, until as many requests answered early as had been
    /// answered when it was called are counted, so that a client that has its answer reads
    /// statistics that include it (a backend answers from inside `execute` and reports its
    /// statistics when it returns, microseconds later). Bounded by [`SETTLE_LIMIT`]: a backend
    /// that answers and then runs on for long delays no reader longer than that, and the
    /// statistics then do not count its request yet (as Triton's count it only once the
    /// backend reports it). Needs a tokio runtime with its timer.
    pub async fn settled(&self) {
        let answered = self.early_answered.load(SeqCst);
        if self.early_counted.load(SeqCst) >= answered {
            return;
        }
        struct Registered<'a>(&'a AtomicUsize);
        impl Drop for Registered<'_> {
            fn drop(&mut self) {
                self.0.fetch_sub(1, SeqCst);
            }
        }
        let _registered = {
            self.settling.fetch_add(1, SeqCst);
            Registered(&self.settling)
        };
        let counted = async {
            loop {
                // Made before the count is read: a notification after the read wakes it.
                let notified = self.counted.notified();
                if self.early_counted.load(SeqCst) >= answered {
                    return;
                }
                notified.await;
            }
        };
        let _ = tokio::time::timeout(SETTLE_LIMIT, counted).await;
    }

    /// The statistics as counted now; a reader that must include the requests its clients
    /// have answers to awaits [`ModelStats::settled`] first.
    pub fn snapshot(&self) -> StatsSnapshot {
        let memory_usage = self.memory_usage.get().map_or_else(Vec::new, |read| read());
        let _whole = self.whole.write();
        StatsSnapshot {
            last_inference_ms: self.last_inference_ms.load(Relaxed),
            inference_count: self.inference_count.load(Relaxed),
            execution_count: self.execution_count.load(Relaxed),
            success: self.success.get(),
            fail: self.fail.get(),
            queue: self.queue.get(),
            compute_input: self.compute_input.get(),
            compute_infer: self.compute_infer.get(),
            compute_output: self.compute_output.get(),
            cache_hit: self.cache_hit.get(),
            cache_miss: self.cache_miss.get(),
            failures: self.failures.lock().iter().map(|(r, n)| (r.as_str(), *n)).collect(),
            batches: self.batches.lock().clone(),
            pending: self.pending.load(Relaxed),
            responses: self.response_stats.lock().clone(),
            memory_usage,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(index: u64, kind: ResponseKind, start: u64, output: u64, end: u64) -> ResponseReport {
        ResponseReport { index, kind, start_ns: start, compute_output_start_ns: output, end_ns: end }
    }

    /// perf_analyzer subtracts two snapshots taken while requests are being counted and aborts
    /// ("Server side statistics compute counts must be the same") when a snapshot holds a request
    /// in one figure and not yet in the next: every snapshot must be whole.
    #[test]
    fn a_snapshot_taken_while_requests_are_counted_is_whole() {
        let s = std::sync::Arc::new(ModelStats::default());
        let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (s, done) = (s.clone(), done.clone());
                std::thread::spawn(move || {
                    let d = Duration::from_micros(3);
                    let t = RequestTimes {
                        total: d,
                        queue: d,
                        compute_input: d,
                        compute_infer: d,
                        compute_output: d,
                        batch_size: 1,
                    };
                    for _ in 0..200_000 {
                        s.record_success(&t);
                    }
                    done.store(true, SeqCst);
                })
            })
            .collect();
        let mut looked = 0;
        while !done.load(SeqCst) || looked == 0 {
            let snap = s.snapshot();
            let counts =
                [snap.success.0, snap.queue.0, snap.compute_input.0, snap.compute_infer.0, snap.compute_output.0];
            assert!(counts.iter().all(|c| *c == counts[0]), "torn snapshot: {counts:?}");
            assert_eq!(snap.inference_count, counts[0], "inference count apart from the compute counts");
            looked += 1;
        }
        for w in writers {
            w.join().unwrap();
        }
        assert_eq!(s.snapshot().compute_infer.0, 400_000);
    }

    #[test]
    fn responses_count_by_index_as_tritons_aggregator_does() {
        let s = ModelStats::default();
        s.record_response(&report(0, ResponseKind::Success, 10, 40, 50)).unwrap();
        s.record_response(&report(0, ResponseKind::Success, 100, 110, 130)).unwrap();
        s.record_response(&report(1, ResponseKind::Empty, 60, 0, 65)).unwrap();
        s.record_response(&report(10, ResponseKind::Fail, 0, 0, 7)).unwrap();
        s.record_response(&report(2, ResponseKind::Cancel, 1, 0, 4)).unwrap();
        let r = s.snapshot().responses;
        assert_eq!(r.keys().collect::<Vec<_>>(), ["0", "1", "10", "2"], "ordered as strings");
        let zero =
            ResponseFigures { compute_infer: (2, 40), compute_output: (2, 30), success: (2, 70), ..Default::default() };
        assert_eq!(r["0"], zero);
        assert_eq!(r["1"], ResponseFigures { compute_infer: (1, 5), empty_response: (1, 5), ..Default::default() });
        assert_eq!(r["10"], ResponseFigures { compute_infer: (1, 7), fail: (1, 7), ..Default::default() });
        assert_eq!(r["2"], ResponseFigures { cancel: (1, 3), ..Default::default() });
    }

    fn one_success(s: &ModelStats) {
        let d = Duration::from_micros(5);
        let t =
            RequestTimes { total: d, queue: d, compute_input: d, compute_infer: d, compute_output: d, batch_size: 1 };
        s.record_success(&t);
    }

    // On a paused clock that moves only when every task waits: a reader woken by anything but
    // the count would find the clock at its limit, and a reader that held its thread would
    // keep the counting task from running at all.
    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_reader_waits_for_an_early_answer_to_be_counted_without_holding_its_thread() {
        let s = std::sync::Arc::new(ModelStats::default());
        s.answered_early();
        let counter = s.clone();
        let started = tokio::time::Instant::now();
        tokio::spawn(async move {
            // The backend's `execute` returns a little later.
            tokio::task::yield_now().await;
            one_success(&counter);
            counter.counted_early();
        });
        s.settled().await;
        assert_eq!(s.snapshot().success, (1, 5_000), "the reader sees the request its client has");
        assert_eq!(started.elapsed(), Duration::ZERO, "woken by the count, not by its limit");
        assert_eq!(s.settling.load(SeqCst), 0, "no reader left registered");
    }

    #[tokio::test(flavor = "current_thread", start_paused = true)]
    async fn a_reader_waits_for_an_uncounted_answer_at_most_its_limit() {
        let s = ModelStats::default();
        s.settled().await;
        one_success(&s);
        s.answered_early();
        s.answered_early();
        s.counted_early();
        let started = tokio::time::Instant::now();
        s.settled().await;
        assert_eq!(started.elapsed(), SETTLE_LIMIT, "the backend still runs: the reader goes on without it");
        assert_eq!(s.snapshot().success.0, 1);
    }

    #[test]
    fn refuses_timestamps_out_of_order_and_counts_nothing() {
        let s = ModelStats::default();
        let e = s.record_response(&report(0, ResponseKind::Success, 50, 40, 60)).unwrap_err();
        assert_eq!(e, "Response start cannot happen after compute output start");
        let e = s.record_response(&report(0, ResponseKind::Success, 10, 70, 60)).unwrap_err();
        assert_eq!(e, "Compute output start cannot happen after response end");
        let e = s.record_response(&report(0, ResponseKind::Empty, 10, 0, 5)).unwrap_err();
        assert_eq!(e, "Response start cannot happen after response end");
        assert!(s.snapshot().responses.is_empty());
    }
}
