//! The timestamps of one traced request. A frontend that samples a request for Triton's trace
//! extension puts a `Trace` on it; the engine stamps the points only it sees (queue, compute
//! start, input end, output start, compute end) and the frontend writes the record out. An
//! untraced request carries `None` and costs one `Option` check at each point.

use std::time::Instant;

use parking_lot::Mutex;

/// Activity names, as Triton's trace files spell them.
pub const QUEUE_START: &str = "QUEUE_START";
pub const COMPUTE_START: &str = "COMPUTE_START";
pub const COMPUTE_INPUT_END: &str = "COMPUTE_INPUT_END";
pub const COMPUTE_OUTPUT_START: &str = "COMPUTE_OUTPUT_START";
pub const COMPUTE_END: &str = "COMPUTE_END";

/// (activity, when) pairs in the order they were stamped.
#[derive(Debug, Default)]
pub struct Trace {
    events: Mutex<Vec<(&'static str, Instant)>>,
}

impl Trace {
    pub fn new() -> Self {
        Trace { events: Mutex::new(Vec::with_capacity(16)) }
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
}
