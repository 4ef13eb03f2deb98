//! The timestamps of one traced request. A frontend that samples a request for Triton's trace
//! extension puts a `Trace` on it; the engine stamps the points only it sees (queue, compute
//! start, input end, output start, compute end) and the frontend writes the record out. An
//! untraced request carries `None` and costs one `Option` check at each point.
//!
//! An ensemble hands each composing model's request a child `Trace` of its own request's
//! (`child`), stamped with the step's REQUEST_START and REQUEST_END, so a trace exporter can
//! show the composing models under the ensemble (as Triton's OpenTelemetry mode does), and the
//! trace file a record per child naming its parent. A backend's in-process request made with
//! its request's trace (a BLS call) is such a child too.
//!
//! In OpenTelemetry mode a trace also knows, from the start, the ids its model's span will be
//! exported with (`SpanIds`), so a backend can be handed the W3C context of that span while the
//! request runs (`context`); a child gets the same trace id and a span id of its own.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher as _, Hasher as _};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Instant;

use parking_lot::Mutex;

/// Activity names, as Triton's trace files spell them.
pub const QUEUE_START: &str = "QUEUE_START";
pub const COMPUTE_START: &str = "COMPUTE_START";
pub const COMPUTE_INPUT_END: &str = "COMPUTE_INPUT_END";
pub const COMPUTE_OUTPUT_START: &str = "COMPUTE_OUTPUT_START";
pub const COMPUTE_END: &str = "COMPUTE_END";
pub const REQUEST_START: &str = "REQUEST_START";
pub const REQUEST_END: &str = "REQUEST_END";

/// (activity, when) pairs in the order they were stamped.
#[derive(Debug, Default)]
pub struct Trace {
    events: Mutex<Vec<(&'static str, Instant)>>,
    /// The composing models' traces, for an ensemble's request: (model, trace), in start order.
    children: Mutex<Vec<(String, Arc<Trace>)>>,
    /// The version that answered (set on a child once its model answers; 0 = not known).
    version: AtomicI64,
    /// A child's request id (a BLS call's own, an ensemble step's the ensemble's), for its
    /// record; empty when it has none.
    request_id: OnceLock<String>,
    /// The ids of the model's span in OpenTelemetry mode (unset in Triton's trace mode).
    span: OnceLock<SpanIds>,
    /// An ensemble's trace: its steps computed, not it, so it keeps no compute points.
    ensemble: AtomicBool,
}

/// The W3C ids of a model's span: the trace it belongs to and its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SpanIds {
    pub trace_id: u128,
    pub span_id: u64,
}

impl SpanIds {
    /// Ids for a model span in `trace_id` (a new trace when `None`), its span id random.
    pub fn new(trace_id: Option<u128>) -> SpanIds {
        let trace_id =
            trace_id.filter(|t| *t != 0).unwrap_or_else(|| ((random_u64() as u128) << 64) | random_u64() as u128);
        SpanIds { trace_id, span_id: random_u64() }
    }

    /// The W3C `traceparent` of this span, sampled.
    pub fn traceparent(&self) -> String {
        format!("00-{:032x}-{:016x}-01", self.trace_id, self.span_id)
    }
}

/// A random non-zero u64 (W3C ids must not be all zeros): std's randomly keyed SipHash of a
/// counter, so no generator crate is needed for ids that only have to be unique.
pub fn random_u64() -> u64 {
    static KEYS: OnceLock<RandomState> = OnceLock::new();
    static COUNTER: AtomicU64 = AtomicU64::new(0);
    let keys = KEYS.get_or_init(RandomState::new);
    loop {
        let mut h = keys.build_hasher();
        h.write_u64(COUNTER.fetch_add(1, Ordering::Relaxed));
        let n = h.finish();
        if n != 0 {
            return n;
        }
    }
}

impl Trace {
    pub fn new() -> Self {
        Trace { events: Mutex::new(Vec::with_capacity(16)), ..Trace::default() }
    }

    /// A new trace for a request this one's request makes to `model` (an ensemble's step).
    pub fn child(&self, model: &str) -> Arc<Trace> {
        let child = Arc::new(Trace::new());
        if let Some(ids) = self.span.get() {
            let _ = child.span.set(SpanIds::new(Some(ids.trace_id)));
        }
        self.children.lock().push((model.to_string(), child.clone()));
        child
    }

    /// The composing models' traces, in the order their requests were made.
    pub fn children(&self) -> Vec<(String, Arc<Trace>)> {
        self.children.lock().clone()
    }

    pub fn set_version(&self, version: i64) {
        self.version.store(version, Ordering::Relaxed);
    }

    pub fn version(&self) -> i64 {
        self.version.load(Ordering::Relaxed)
    }

    /// Sets the request id its record names; only the first call has effect.
    pub fn set_request_id(&self, id: &str) {
        let _ = self.request_id.set(id.to_string());
    }

    pub fn request_id(&self) -> &str {
        self.request_id.get().map_or("", String::as_str)
    }

    /// Sets the ids its model's span will have (OpenTelemetry mode); only the first call has
    /// effect.
    pub fn set_span(&self, ids: SpanIds) {
        let _ = self.span.set(ids);
    }

    pub fn span(&self) -> Option<SpanIds> {
        self.span.get().copied()
    }

    /// The trace context a backend is handed for this request (Triton's
    /// `TRITONSERVER_InferenceTraceContext`): `{"traceparent":"00-…"}` naming the model's span in
    /// OpenTelemetry mode, empty in Triton's trace mode.
    pub fn context(&self) -> String {
        self.span.get().map_or_else(String::new, |ids| format!("{{\"traceparent\":\"{}\"}}", ids.traceparent()))
    }

    pub fn record(&self, activity: &'static str) {
        self.record_at(activity, Instant::now());
    }

    pub fn record_at(&self, activity: &'static str, at: Instant) {
        self.events.lock().push((activity, at));
    }

    /// Marks an ensemble's trace. The instance that runs the ensemble stamps compute points on
    /// it as on any request; Triton's ensemble records and spans have none (each step has its
    /// own), so `events` leaves them out from then on.
    pub fn set_ensemble(&self) {
        self.ensemble.store(true, Ordering::Relaxed);
    }

    /// The events so far, ordered by time (stamps from different threads may land out of order).
    pub fn events(&self) -> Vec<(&'static str, Instant)> {
        let mut events = self.events.lock().clone();
        if self.ensemble.load(Ordering::Relaxed) {
            events.retain(|(name, _)| !name.starts_with("COMPUTE_"));
        }
        events.sort_by_key(|(_, at)| *at);
        events
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn events_come_back_in_time_order() {
        let t = Trace::new();
        let now = Instant::now();
        t.record_at(COMPUTE_END, now + Duration::from_micros(5));
        t.record_at(QUEUE_START, now);
        let names: Vec<&str> = t.events().into_iter().map(|(n, _)| n).collect();
        assert_eq!(names, [QUEUE_START, COMPUTE_END]);
    }

    #[test]
    fn children_keep_their_model_order_and_version() {
        let t = Trace::new();
        let a = t.child("a");
        let b = t.child("b");
        b.set_version(3);
        a.record(REQUEST_START);
        let children = t.children();
        let names: Vec<&str> = children.iter().map(|(m, _)| m.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!((children[0].1.events().len(), children[1].1.version()), (1, 3));
        assert!(t.events().is_empty());
        a.record(COMPUTE_START);
        a.set_ensemble();
        a.record(COMPUTE_END);
        assert_eq!(a.events().iter().map(|(n, _)| *n).collect::<Vec<_>>(), [REQUEST_START]);
    }

    #[test]
    fn an_opentelemetry_trace_hands_its_model_spans_context_and_children_share_its_trace_id() {
        let t = Trace::new();
        assert_eq!(t.context(), "", "Triton's trace mode: no context");
        let ids = SpanIds { trace_id: 0x0af7651916cd43dd8448eb211c12666c, span_id: 0xb7ad6b7169242424 };
        t.set_span(ids);
        assert_eq!(t.context(), r#"{"traceparent":"00-0af7651916cd43dd8448eb211c12666c-b7ad6b7169242424-01"}"#);
        let child = t.child("add_sub").span().unwrap();
        assert_eq!(child.trace_id, ids.trace_id);
        assert_ne!(child.span_id, ids.span_id);
        assert!(Trace::new().child("x").span().is_none());
        let fresh = SpanIds::new(None);
        assert!(fresh.trace_id != 0 && fresh.span_id != 0 && fresh != SpanIds::new(None));
    }
}
