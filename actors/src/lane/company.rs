//! Whether a model's load is concurrent, for the lane and the batcher to decide if a lone
//! request on an idle model goes at once or waits for the batching delay.
//!
//! Triton's dynamic batcher makes every request wait for `max_queue_delay`, a lone client's too.
//! Tritium sends a lone request on an idle model at once, which is right for a lone client (no
//! one could join it). Under a concurrent load it is not: the first of the clients whose answers
//! just went out finds the instance idle and runs as a batch of one, and the others queue
//! behind it. On a model that streams its weights once per batch that costs half of a batch of
//! eight (loadtests/PROFILES.md, "the batches a concurrent load forms"). So a lone request
//! waits for the delay while the model's requests came in company lately, and only where the
//! model's executions outlast the delay: a batch of one that ends before the delay would have
//! run out keeps nobody waiting longer than the delay would.

use std::time::{Duration, Instant};

/// How long after a request came in company (while another of the model's requests ran or
/// waited) a lone request on an idle model still waits for the batcher's delay. Under a
/// concurrent load requests come that close together (at c16 over mlp, one every 100-150 µs);
/// a lone client's never come in company at all.
pub(crate) const COMPANY_WINDOW: Duration = Duration::from_millis(10);

/// One model version's record of how its requests come, kept under the lane's lock.
#[derive(Debug)]
pub(super) struct Company {
    /// Until then the load counts as concurrent.
    until: Option<Instant>,
    /// The batching delay (`max_queue_delay_microseconds`; zero without dynamic batching).
    max_delay: Duration,
    /// The recent executions' average time (the last few, weighted to the latest), as the
    /// instances report them when they finish; `None` before the first.
    recent_execution: Option<Duration>,
}

impl Company {
    pub fn new(max_delay: Duration) -> Self {
        Company { until: None, max_delay, recent_execution: None }
    }

    /// A request came while another of the model's ran or waited.
    pub fn came(&mut self, now: Instant) {
        self.until = Some(now + COMPANY_WINDOW);
    }

    /// An execution ended, having taken `took`.
    pub fn executed(&mut self, took: Duration) {
        self.recent_execution = Some(self.recent_execution.map_or(took, |e| e * 3 / 4 + took / 4));
    }

    /// Whether a lone request on an idle model waits for the batcher's delay.
    pub fn waits(&self, now: Instant) -> bool {
        self.until.is_some_and(|t| now < t) && self.recent_execution.is_some_and(|e| e > self.max_delay)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use parking_lot::Mutex;

    use super::*;
    use crate::batcher::Batcher;
    use crate::clock::{Clock, ManualClock};
    use crate::lane::tests::{direct, figures, lane, pending, policy};
    use crate::lane::{Finish, Lane, Pulled, Route};
    use crate::mailbox::mailbox;
    use crate::policy::{DynamicBatchPolicy, SchedulerPolicy};
    use crate::protocol::InstanceMsg;

    #[test]
    fn company_lasts_the_window_and_counts_only_where_executions_outlast_the_delay() {
        let t0 = Instant::now();
        let mut c = Company::new(Duration::from_millis(1));
        c.came(t0);
        assert!(!c.waits(t0), "no execution measured yet");
        c.executed(Duration::from_micros(500));
        assert!(!c.waits(t0), "executions shorter than the delay");
        for _ in 0..8 {
            c.executed(Duration::from_millis(3));
        }
        assert!(c.waits(t0));
        assert!(c.waits(t0 + COMPANY_WINDOW - Duration::from_nanos(1)));
        assert!(!c.waits(t0 + COMPANY_WINDOW));
    }

    #[test]
    fn a_lone_request_waits_for_the_delay_while_the_models_requests_come_in_company() {
        let dynamic = DynamicBatchPolicy { max_queue_delay: Duration::from_millis(1), ..Default::default() };
        let p = policy(SchedulerPolicy::Dynamic(dynamic), 1);
        let batcher = Arc::new(Mutex::new(Batcher::new(&p)));
        let clock = ManualClock::new();
        let lane = Lane::new(&p, Some(batcher.clone()), None, clock.clone(), figures(&p));
        let (tx, rx) = mailbox();
        lane.turn().up(0, 1, tx, None);
        // Executions outlast the 1 ms delay. A lone client: each request finds the model idle
        // and goes at once.
        let took = Duration::from_millis(2);
        for _ in 0..2 {
            assert_eq!(direct(lane.route(pending(), false)), Some(0));
            rx.try_recv().unwrap();
            assert_eq!(lane.finish(0, 1, took).0, Finish::Freed);
            assert!(lane.turn().lone_goes(clock.now()));
            clock.advance(Duration::from_millis(1));
        }
        // Another request comes while one runs: it waits in the batcher.
        assert_eq!(direct(lane.route(pending(), false)), Some(0));
        rx.try_recv().unwrap();
        let mut joining = pending();
        joining.enqueued = clock.now();
        assert!(matches!(lane.route(joining, false), Route::Queued));
        assert_eq!(lane.finish(0, 1, took).0, Finish::Pull);
        // Pulled with its delay still running, it waits for company though nothing executes
        // (on its own thread: `waiter`).
        assert!(matches!(lane.pull(0, 1), (Pulled::Wait(_), _)));
        assert!(!lane.turn().lone_goes(clock.now()));
        drop(batcher.lock().drain_all());
        lane.turn().publish(0, 0);
        // Its wait ends with nothing left to take: free.
        assert!(lane.stop_waiting(0));
        assert!(matches!(lane.pull(0, 1), (Pulled::Free { tell: false }, _)));
        // The next request to find the model idle goes to the batcher, not straight to the
        // instance, for as long as the window lasts: the instance is told to pull, and waits for
        // company (`waiter`).
        clock.advance(COMPANY_WINDOW - Duration::from_micros(1));
        let mut alone = pending();
        alone.enqueued = clock.now();
        assert!(matches!(lane.route(alone, false), Route::Queued));
        assert!(matches!(rx.try_recv(), Ok(InstanceMsg::Pull)));
        assert!(matches!(lane.pull(0, 1), (Pulled::Wait(_), _)));
        assert!(lane.stop_waiting(0));
        drop(batcher.lock().drain_all());
        lane.turn().publish(0, 0);
        assert!(matches!(lane.pull(0, 1), (Pulled::Free { tell: false }, _)));
        clock.advance(Duration::from_micros(1));
        assert!(lane.turn().lone_goes(clock.now()));
        assert_eq!(direct(lane.route(pending(), false)), Some(0));
    }

    #[test]
    fn a_small_models_lone_request_goes_at_once_even_in_company() {
        let dynamic = DynamicBatchPolicy { max_queue_delay: Duration::from_millis(1), ..Default::default() };
        let p = policy(SchedulerPolicy::Dynamic(dynamic), 1);
        let (lane, inboxes) = lane(&p);
        assert_eq!(direct(lane.route(pending(), false)), Some(0));
        inboxes[0].try_recv().unwrap();
        assert!(matches!(lane.route(pending(), false), Route::Queued));
        // Its batch took less than the delay: the request that came in company is pulled...
        assert_eq!(lane.finish(0, 1, Duration::from_micros(100)).0, Finish::Pull);
        assert!(matches!(lane.pull(0, 1), (Pulled::Batch(b), _) if b.len() == 1));
        assert_eq!(lane.finish(0, 1, Duration::from_micros(100)).0, Finish::Freed);
        // ...and the next one to find the model idle goes straight to it, without waiting.
        assert!(lane.turn().lone_goes(Instant::now()));
        assert_eq!(direct(lane.route(pending(), false)), Some(0));
    }
}
