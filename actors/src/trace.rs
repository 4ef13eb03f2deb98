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

use std::sync::atomic::{AtomicI64, Ordering};
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
}

impl Trace {
    pub fn new() -> Self {
        Trace { events: Mutex::new(Vec::with_capacity(16)), ..Trace::default() }
    }

    /// A new trace for a request this one's request makes to `model` (an ensemble's step).
    pub fn child(&self, model: &str) -> Arc<Trace> {
        let child = Arc::new(Trace::new());
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

    pub fn record(&self, activity: &'static str) {
        self.record_at(activity, Instant::now());
    }

    pub fn record_at(&self, activity: &'static str, at: Instant) {
        self.events.lock().push((activity, at));
    }

    /// The events so far, ordered by time (stamps from different threads may land out of order).
    pub fn events(&self) -> Vec<(&'static str, Instant)> {
        let mut events = self.events.lock().clone();
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
    }
}
