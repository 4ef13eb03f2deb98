//! A request that finds every instance of a direct model busy: its submitting thread puts it in
//! the shared batcher itself, where the instance that finishes first takes it (`Lane::pull`),
//! instead of sending it to the scheduler actor to be queued there. Under load (every
//! instance always busy) that hop cost a wake-up of the engine's thread and about 9 µs of CPU
//! per request; Triton's frontend thread, too, puts a request in the model's queue itself.
//!
//! Only what the scheduler would have done at once: the batcher's rules decide as before
//! (`max_queue_size` and the engine's bound refuse with the scheduler's text, on the
//! submitting thread), and the scheduler keeps every case it times or orders otherwise: a
//! queue timeout (the model's, or a request's own), priority levels, sequences (their lane is
//! `sequence`), a draining model, a model with no live instance (it fails the request), any request
//! that finds an instance free while others wait, and any request behind one still on its way
//! to the scheduler (so requests keep their order of arrival). A batching delay needs no timer
//! here: with every instance busy the scheduler arms none either (only a free instance waits
//! for a batch to fill); the instance that finishes and finds the batch not ready waits for it
//! on its own thread (`waiter`; the request that makes it ready wakes it), or, where it may not,
//! frees itself and tells the scheduler, which times the delay from there. An instance is never left free
//! with requests in the batcher unseen: it frees itself only under the lane's lock, after the
//! batcher gave it nothing, and then tells the scheduler if requests wait; the lane queues only
//! when no instance is free.
//!
//! The scheduler's sweep for requests whose client went away runs on its timer while requests
//! wait: the lane asks it for a turn when none is due, which arms that timer (one turn per
//! sweep period under steady load, not one per request).

use parking_lot::{Mutex, MutexGuard};

use super::waiter::Waiter;
use super::{Lane, Route, State};
use crate::batcher::Batcher;
use crate::policy::{ModelPolicy, QueuePolicy, SchedulerPolicy};
use crate::protocol::Pending;
use crate::queue::Queue;

/// Whether requests of `policy` may wait in its batcher behind busy instances without the
/// scheduler: none queued there would need its timers (a queue timeout) or its priority levels.
pub(super) fn unaided(policy: &ModelPolicy) -> bool {
    let untimed = |q: &QueuePolicy| q.default_timeout.is_none() && !q.allow_timeout_override;
    match &policy.scheduler {
        SchedulerPolicy::Direct => true,
        SchedulerPolicy::Dynamic(d) => {
            d.priority_levels <= 1
                && untimed(&d.default_queue_policy)
                && d.priority_queue_policy.iter().all(|(_, q)| untimed(q))
        }
        SchedulerPolicy::Sequence(_) => false,
    }
}

impl Lane {
    /// Queues `p` in the batcher behind the busy instances (the caller checked that none is
    /// free, nothing is on its way to the scheduler and some instance is live, under `s`).
    pub(super) fn route_busy(&self, s: MutexGuard<'_, State>, p: Pending) -> Route {
        self.queue_here(s, p, |lane, s, q| lane.take_ready_waiter(s, q))
    }

    /// Queues `p` in the batcher under the lane's lock `s`, then wakes the instance `wake`
    /// names (given the lane's state and the batcher with `p` in it), if any.
    pub(super) fn queue_here(
        &self,
        mut s: MutexGuard<'_, State>,
        p: Pending,
        wake: impl FnOnce(&Lane, &mut State, &Batcher) -> Option<Waiter>,
    ) -> Route {
        let batcher: &Mutex<Batcher> = self.batcher.as_ref().expect("a lane that queues has a batcher");
        let mut q = batcher.lock();
        if let Err(refused) = Queue::push(&mut *q, p) {
            return Route::Refused(refused);
        }
        s.queued = q.len();
        self.figures.scheduler.lane_queued(s.queued);
        let wake = wake(self, &mut s, &q);
        // No turn of the scheduler due: ask for one, for its timer to bring the cancel sweep
        // round while requests wait; counted as due until it comes (`Turn::arm`).
        let poke = s.armed.is_none();
        if poke {
            s.armed = Some(self.clock.now());
        }
        drop((q, s));
        if poke {
            self.poke();
        }
        if let Some(waiter) = wake {
            waiter.wake();
        }
        Route::Queued
    }
}

#[cfg(test)]
pub(in crate::lane) mod tests {
    use std::sync::Arc;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::clock::SystemClock;
    use crate::figures::ModelFigures;
    use crate::lane::{Finish, Pulled};
    use crate::mailbox::{mailbox, Receiver};
    use crate::policy::DynamicBatchPolicy;
    use crate::protocol::InstanceMsg;
    use crate::request::{InferRequest, Reply};

    /// The lane's test model, without batching: each request is a batch of its own.
    pub(in crate::lane) fn policy(scheduler: SchedulerPolicy, instances: usize) -> ModelPolicy {
        ModelPolicy { max_batch_size: 0, ..crate::lane::tests::policy(scheduler, instances) }
    }

    pub(in crate::lane) fn dynamic(f: impl FnOnce(&mut DynamicBatchPolicy)) -> SchedulerPolicy {
        let mut d = DynamicBatchPolicy::default();
        f(&mut d);
        SchedulerPolicy::Dynamic(d)
    }

    /// Request `id`.
    pub(in crate::lane) fn pending(id: &str) -> Pending {
        let (reply, rx) = Reply::once();
        std::mem::forget(rx);
        let mut request = InferRequest::new("m", vec![]);
        request.id = id.into();
        Pending { request, reply, enqueued: Instant::now(), batch_size: 1, sequence: None, cache: None }
    }

    /// Keep `_inboxes` bound: an instance whose mailbox is gone cannot be sent a request.
    struct Setup {
        lane: Lane,
        figures: Arc<ModelFigures>,
        _inboxes: Vec<Receiver<InstanceMsg>>,
    }

    /// A lane with its instances up, every one of them busy with a request sent to it directly.
    fn busy(p: &ModelPolicy) -> Setup {
        let figures = Arc::new(ModelFigures::new(p.instances.len()));
        let batcher = Arc::new(Mutex::new(Batcher::new(p)));
        let lane = Lane::new(p, Some(batcher), None, Arc::new(SystemClock), figures.clone());
        let mut inboxes = Vec::new();
        for i in 0..p.instances.len() {
            let (tx, rx) = mailbox();
            lane.turn().up(i, 1, tx, None);
            inboxes.push(rx);
        }
        for i in 0..p.instances.len() {
            assert!(matches!(lane.route(pending(&format!("run{i}")), false), Route::Direct { .. }));
        }
        // Each instance took its request: its mailbox is empty again, as a running one's is.
        for rx in &inboxes {
            assert!(matches!(rx.try_recv(), Ok(InstanceMsg::Execute(b)) if b.len() == 1));
        }
        Setup { lane, figures, _inboxes: inboxes }
    }

    pub(in crate::lane) fn ids(batch: &[Pending]) -> Vec<String> {
        batch.iter().map(|p| p.request.id.clone()).collect()
    }

    /// Instance `index` (generation 1) finishes while requests wait and pulls its next batch:
    /// the ids of that batch.
    fn next(lane: &Lane, index: usize) -> Vec<String> {
        assert_eq!(lane.finish(index, 1, Duration::ZERO).0, Finish::Pull);
        let Pulled::Batch(b) = lane.pull(index, 1).0 else { panic!("a request waits") };
        ids(&b)
    }

    #[test]
    fn a_request_finding_every_instance_busy_waits_in_the_batcher_without_the_scheduler() {
        let Setup { lane, figures, _inboxes: _held } = busy(&policy(SchedulerPolicy::Direct, 2));
        for id in ["a", "b", "c"] {
            assert!(matches!(lane.route(pending(id), false), Route::Queued));
        }
        {
            let s = lane.state.lock();
            assert_eq!((s.in_flight, s.queued), (0, 3), "queued, none sent to the scheduler");
            assert!(s.armed.is_some(), "the scheduler was asked for a turn, for its cancel sweep");
        }
        let f = figures.scheduler();
        assert_eq!((f.queue_len, f.lane_queued), (3, 3));
        assert!(lane.waiting());
        // The instances take them in their order of arrival as they finish, then free themselves.
        assert_eq!(next(&lane, 1), ["a"]);
        assert_eq!(next(&lane, 0), ["b"]);
        // One arrives meanwhile: behind "c".
        assert!(matches!(lane.route(pending("d"), false), Route::Queued));
        assert_eq!(next(&lane, 1), ["c"]);
        assert_eq!(next(&lane, 0), ["d"]);
        assert_eq!(figures.scheduler().queue_len, 0);
        assert_eq!(lane.finish(1, 1, Duration::ZERO).0, Finish::Freed);
        assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Freed);
        assert!(!lane.waiting());
        assert!(matches!(lane.route(pending("e"), false), Route::Direct { .. }));
    }

    #[test]
    fn a_request_beyond_max_queue_size_is_refused_to_its_submitter_with_the_schedulers_text() {
        let p = policy(dynamic(|d| d.default_queue_policy.max_queue_size = 1), 1);
        let Setup { lane, _inboxes: _held, .. } = busy(&p);
        assert!(matches!(lane.route(pending("a"), false), Route::Queued));
        let Route::Refused(refused) = lane.route(pending("b"), false) else { panic!("the queue is full") };
        let (p, e) = *refused;
        assert_eq!((p.request.id.as_str(), e.message.as_str()), ("b", "Exceeds maximum queue size"));
        assert_eq!(e.kind, crate::error::ErrorKind::Unavailable);
        assert_eq!(lane.state.lock().queued, 1);
    }

    #[test]
    fn a_request_behind_one_on_its_way_to_the_scheduler_follows_it_there() {
        let Setup { lane, _inboxes: _held, .. } = busy(&policy(SchedulerPolicy::Direct, 1));
        lane.state.lock().in_flight = 1;
        assert!(matches!(lane.route(pending("a"), false), Route::Scheduler(_)));
        // The scheduler read both: later requests queue in the batcher again.
        lane.turn().publish(0, 2);
        assert!(matches!(lane.route(pending("b"), false), Route::Queued));
    }

    #[test]
    fn what_needs_the_schedulers_timers_or_priorities_still_goes_through_it() {
        let timed = [
            dynamic(|d| d.default_queue_policy.default_timeout = Some(Duration::from_secs(1))),
            dynamic(|d| d.default_queue_policy.allow_timeout_override = true),
            dynamic(|d| {
                let q = QueuePolicy { default_timeout: Some(Duration::from_secs(1)), ..Default::default() };
                d.priority_queue_policy = vec![(1, q)];
            }),
            dynamic(|d| d.priority_levels = 2),
        ];
        for scheduler in timed {
            let Setup { lane, _inboxes: _held, .. } = busy(&policy(scheduler.clone(), 1));
            assert!(matches!(lane.route(pending("a"), false), Route::Scheduler(_)), "{scheduler:?}");
        }
        let Setup { lane, _inboxes: _held, .. } = busy(&policy(dynamic(|_| {}), 1));
        assert!(matches!(lane.route(pending("a"), false), Route::Queued));
    }

    #[test]
    fn behind_busy_instances_a_batching_delay_is_left_to_the_instance_that_finishes() {
        let mut p = policy(dynamic(|d| d.max_queue_delay = Duration::from_secs(60)), 1);
        p.max_batch_size = 8;
        let Setup { lane, _inboxes: _held, .. } = busy(&p);
        for id in ["a", "b"] {
            assert!(matches!(lane.route(pending(id), false), Route::Queued));
        }
        // Two queued: the batch may grow, so the instance that finishes waits for it on its own
        // thread (`waiter`), not free, and the scheduler hears nothing.
        assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Pull);
        assert!(matches!(lane.pull(0, 1).0, Pulled::Wait(_)));
        // No instance is free: the next request is queued behind the waiting one.
        assert!(matches!(lane.route(pending("c"), false), Route::Queued));
    }

    #[test]
    fn a_draining_model_or_one_without_a_live_instance_leaves_the_request_to_the_scheduler() {
        let Setup { lane, _inboxes: _held, .. } = busy(&policy(SchedulerPolicy::Direct, 1));
        lane.turn().close();
        assert!(matches!(lane.route(pending("a"), false), Route::Scheduler(_)));
        let Setup { lane, _inboxes: _held, .. } = busy(&policy(SchedulerPolicy::Direct, 1));
        lane.turn().down(0);
        assert!(matches!(lane.route(pending("a"), false), Route::Scheduler(_)));
    }

    #[test]
    fn the_scheduler_is_asked_for_a_turn_only_when_none_is_due() {
        let Setup { lane, _inboxes: _held, .. } = busy(&policy(SchedulerPolicy::Direct, 1));
        assert!(matches!(lane.route(pending("a"), false), Route::Queued));
        let asked = lane.state.lock().armed.expect("asked");
        assert!(matches!(lane.route(pending("b"), false), Route::Queued));
        assert_eq!(lane.state.lock().armed, Some(asked), "still due: not asked again");
        // Its turn armed nothing (the queue emptied meanwhile): the next one asks again.
        lane.turn().arm(None);
        assert!(matches!(lane.route(pending("c"), false), Route::Queued));
        assert!(lane.state.lock().armed.is_some());
    }
}
