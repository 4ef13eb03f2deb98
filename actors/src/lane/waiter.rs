//! An instance that finishes while requests wait, but the batch it would take may still grow
//! (the batcher's delay runs), waits for that batch on its own thread instead of freeing itself
//! and telling the scheduler (`Pulled::Wait`). The scheduler would have armed the timer thread for
//! the delay, been woken by it and handed the batch over: three thread wake-ups where the
//! instance's own timed wait is one. Meanwhile the instance is not free, so requests that come
//! are queued in the batcher by their submitters (`busy`), as behind a busy instance.
//!
//! The waiting instance is woken before its deadline when the batch becomes ready: by the
//! submitter whose request completed it (a preferred size, the largest batch), by the scheduler
//! after a turn that queued such a request, or at once when the model drains. Whoever takes the
//! wait off the lane (under its lock) owes the instance one `InstanceMsg::Pull`; an instance whose
//! deadline passed takes the wait back itself (`stop_waiting`) or, if someone took it first, waits
//! for that `Pull`. So it never pulls twice for one wait, and no `Pull` is left over for later.
//!
//! A model's only instance, idle, waits the same way for a request that must wait for company
//! (the load is concurrent, `company`): the request's submitter queues it in the batcher, takes
//! the instance off the free list and tells it to pull, and the instance finds the batch not
//! ready and waits for it (two wake-ups of its thread, where the scheduler's way woke three
//! threads four times).
//!
//! A sequence model's instance waits the same way for the `oldest` strategy's delay: when the
//! batch it would pull is held by the delay, and, for the model's one instance, idle, when a
//! request arrives whose batch the delay holds (`wait_here_sequence`). The request that makes the
//! batch ready (a preferred size, the largest batch) wakes it, as does the sequence actor's turn
//! after requests it queued, or the drain. Where the actor timed the delay, the actor's thread and
//! the timer thread each woke about twice per request so held (accumulate_oldest at c1).
//!
//! Only where a request may wait behind busy instances without the scheduler (`busy::unaided`:
//! no queue timeouts, one priority level; any sequence model the lane serves), while the model is
//! open, when no other instance is free (a free one takes the scheduler's path as before), and
//! one instance at a time.

use std::sync::Arc;
use std::time::Instant;

use parking_lot::MutexGuard;

use super::{Lane, Route, State};
use crate::batcher::Batcher;
use crate::mailbox::Sender;
use crate::protocol::{InstanceMsg, Pending};
use crate::sequence::SequenceBatcher;

/// The waiting instance's mailbox, the wait taken off the lane: it owes that instance a `Pull`.
pub(crate) struct Waiter(Sender<InstanceMsg>);

impl Waiter {
    pub fn wake(self) {
        // Full: a `Shutdown` is there (its model stops) and it ends anyway; disconnected: it ended.
        let _ = self.0.try_send(InstanceMsg::Pull);
    }
}

impl State {
    /// Takes the wait off the lane if instance `index` (any, with `None`) waits: the caller owes
    /// it the `Pull` of the `Waiter` it gets.
    fn take_waiter(&mut self, index: Option<usize>) -> Option<Waiter> {
        let w = self.waiter.filter(|&w| index.is_none_or(|i| i == w))?;
        self.waiter = None;
        self.slots[w].as_ref().map(|(_, mailbox)| Waiter(mailbox.clone()))
    }

    /// Takes the last freed instance off the free list, to be told to pull and wait for its
    /// batch (`wait_here`, `wait_here_sequence`): the caller owes it the `Pull` of the `Waiter`.
    fn take_idle(&mut self) -> Option<Waiter> {
        let index = self.free.pop()?;
        self.slots[index].as_ref().map(|(_, mailbox)| Waiter(mailbox.clone()))
    }
}

impl Lane {
    /// Whether an instance whose next batch may still grow waits for it itself (the module's doc).
    pub(super) fn may_wait(&self, s: &State) -> bool {
        (self.queues || self.sequence.is_some()) && s.open && s.free.is_empty() && s.waiter.is_none()
    }

    /// Whether a request that must wait for company (`company`), with every instance free and
    /// nothing queued, goes to the model's one instance to wait there (`wait_here`) rather than
    /// to the scheduler.
    pub(super) fn waits_here(&self, s: &State) -> bool {
        self.queues && s.open && !s.backlog() && s.live() == 1 && s.free.len() == 1 && s.waiter.is_none()
    }

    /// Queues `p` and tells the model's one instance, idle, to pull (the caller checked
    /// `waits_here` under `s`): it finds the batch not ready and waits for it (`Pulled::Wait`).
    pub(super) fn wait_here(&self, s: MutexGuard<'_, State>, p: Pending) -> Route {
        self.queue_here(s, p, |_, s, _| s.take_idle())
    }

    /// The waiting instance, taken off the lane, if the batch it waits for would go now.
    pub(super) fn take_ready_waiter(&self, s: &mut State, q: &Batcher) -> Option<Waiter> {
        if s.waiter.is_none() || !q.ready(self.clock.now()) {
            return None;
        }
        s.take_waiter(None)
    }

    /// The same for a sequence model: the waiting instance, taken off the lane, if the batch
    /// the sequence batcher would give it now is ready (the `oldest` strategy's delay).
    pub(super) fn take_ready_sequence_waiter(&self, s: &mut State, q: &SequenceBatcher) -> Option<Waiter> {
        let w = s.waiter?;
        if !q.ready(w, self.clock.now()) {
            return None;
        }
        s.take_waiter(Some(w))
    }

    /// A sequence model's one instance, idle, whose batch the `oldest` strategy's delay holds:
    /// taken off the free list to wait for it on its own thread (it is told to pull, finds the
    /// batch not ready and waits), instead of the scheduler timing the delay. The caller holds
    /// `s` and owes the instance the `Pull` of the `Waiter` it gets.
    pub(super) fn wait_here_sequence(&self, s: &mut State) -> Option<Waiter> {
        if !(s.open && s.live() == 1 && s.free.len() == 1 && s.waiter.is_none()) {
            return None;
        }
        s.take_idle()
    }

    /// Instance `index` waited until its deadline without a word: true when the wait was still
    /// its own (it pulls its batch now); false when a submitter or the scheduler took it
    /// meanwhile, whose `Pull` is on its way.
    pub fn stop_waiting(&self, index: usize) -> bool {
        let mut s = self.state.lock();
        if s.waiter == Some(index) {
            s.waiter = None;
            true
        } else {
            false
        }
    }

    /// How instance `index`, told to wait for its batch until `at` (`Pulled::Wait`), waits:
    /// `Some(at)`, a timed wait on its own thread, where the lane's clock is real time; `None`
    /// under a virtual clock (tests), which then wakes it with a `Pull` at `at`, as a submitter
    /// would, and it waits for that.
    pub fn timed_wait(self: &Arc<Self>, index: usize, at: Instant) -> Option<Instant> {
        if self.clock.is_real() {
            return Some(at);
        }
        let lane = Arc::clone(self);
        self.clock.at(at, Box::new(move || lane.wake_if_waiting(index)));
        None
    }

    /// Wakes instance `index` if it still waits (its deadline came on a virtual clock).
    fn wake_if_waiting(&self, index: usize) {
        let waiter = self.state.lock().take_waiter(Some(index));
        if let Some(w) = waiter {
            w.wake();
        }
    }

    /// After a scheduler turn: wakes the waiting instance when the batch it waits for is ready
    /// (the turn may have queued the request that completed it), or at once with `always` (the
    /// model drains).
    pub fn nudge(&self, always: bool) {
        let mut s = self.state.lock();
        if s.waiter.is_none() {
            return;
        }
        let waiter = match (&self.batcher, &self.sequence) {
            _ if always => s.take_waiter(None),
            (Some(batcher), _) => self.take_ready_waiter(&mut s, &batcher.lock()),
            (None, Some(sequence)) => self.take_ready_sequence_waiter(&mut s, &sequence.lock()),
            (None, None) => None,
        };
        drop(s);
        if let Some(w) = waiter {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use crate::lane::busy::tests::{dynamic, ids, pending, policy};
    use crate::lane::{Finish, Lane, Pulled, Route};
    use crate::mailbox::Receiver;
    use crate::policy::ModelPolicy;
    use crate::protocol::InstanceMsg;

    /// `instances` instances, each busy; batches of up to 8 items, 4 preferred, a delay of 60 s.
    fn model(instances: usize) -> ModelPolicy {
        let mut p = policy(
            dynamic(|d| {
                d.preferred_batch_sizes = vec![4];
                d.max_queue_delay = Duration::from_secs(60);
            }),
            instances,
        );
        p.max_batch_size = 8;
        p
    }

    /// The lane of `p` with every instance busy (taken for a batch), and their mailboxes.
    fn busy(p: &ModelPolicy) -> (Lane, Vec<Receiver<InstanceMsg>>) {
        let (lane, inboxes) = crate::lane::tests::lane(p);
        for i in 0..p.instances.len() {
            lane.turn().take(i);
        }
        (lane, inboxes)
    }

    /// Queues `ids` behind the busy instances.
    fn queue(lane: &Lane, ids: &[&str]) {
        for id in ids {
            assert!(matches!(lane.route(pending(id), false), Route::Queued), "{id}");
        }
    }

    /// Instance `index` finishes while requests wait and asks for its next batch.
    fn finish(lane: &Lane, index: usize) -> Pulled {
        assert_eq!(lane.finish(index, 1, Duration::ZERO).0, Finish::Pull);
        lane.pull(index, 1).0
    }

    fn pulls(rx: &Receiver<InstanceMsg>) -> bool {
        matches!(rx.try_recv(), Ok(InstanceMsg::Pull))
    }

    #[test]
    fn the_request_that_makes_the_batch_ready_wakes_the_instance_waiting_for_it() {
        let (lane, inboxes) = busy(&model(1));
        queue(&lane, &["a", "b"]);
        let Pulled::Wait(at) = finish(&lane, 0) else { panic!("the batch may still grow: it waits") };
        assert!(at > std::time::Instant::now() + Duration::from_secs(50), "until the head's delay ran out");
        // Not free: what comes meanwhile waits in the batcher, and the scheduler hears nothing.
        queue(&lane, &["c"]);
        assert!(!pulls(&inboxes[0]), "three of four: not ready yet");
        assert_eq!(lane.state.lock().in_flight, 0);
        queue(&lane, &["d"]);
        assert!(pulls(&inboxes[0]), "four, the preferred size: woken");
        assert!(!lane.stop_waiting(0), "the wait was taken with the `Pull`");
        let (Pulled::Batch(b), _) = lane.pull(0, 1) else { panic!("the batch is ready") };
        assert_eq!(ids(&b), ["a", "b", "c", "d"]);
        queue(&lane, &["e"]);
        assert!(!pulls(&inboxes[0]), "nobody waits: nobody is woken");
    }

    #[test]
    fn an_instance_whose_deadline_passed_takes_its_wait_back_once() {
        let (lane, inboxes) = busy(&model(1));
        queue(&lane, &["a", "b"]);
        assert!(matches!(finish(&lane, 0), Pulled::Wait(_)));
        assert!(lane.stop_waiting(0));
        assert!(!lane.stop_waiting(0), "once");
        queue(&lane, &["c", "d"]);
        assert!(!pulls(&inboxes[0]), "it no longer waits: nothing to wake");
        let (Pulled::Batch(b), _) = lane.pull(0, 1) else { panic!("ready") };
        assert_eq!(ids(&b), ["a", "b", "c", "d"]);
    }

    #[test]
    fn one_instance_waits_at_a_time_and_a_second_frees_itself_as_before() {
        let (lane, inboxes) = busy(&model(2));
        queue(&lane, &["a", "b"]);
        assert!(matches!(finish(&lane, 0), Pulled::Wait(_)));
        assert!(matches!(finish(&lane, 1), Pulled::Free { tell: true }), "the scheduler times the delay for it");
        // An instance is free: requests go to the scheduler again, which nudges the waiter
        // after its turn when the batch is ready.
        assert!(matches!(lane.route(pending("c"), false), Route::Scheduler(_)));
        lane.nudge(false);
        assert!(!pulls(&inboxes[0]), "not ready");
        for id in ["c", "d"] {
            lane.batcher.as_ref().unwrap().lock().push(pending(id)).unwrap();
        }
        lane.nudge(false);
        assert!(pulls(&inboxes[0]), "ready after the scheduler's turn");
        assert!(!pulls(&inboxes[1]));
    }

    #[test]
    fn a_draining_model_wakes_its_waiting_instance_which_then_frees_itself() {
        let (lane, inboxes) = busy(&model(1));
        queue(&lane, &["a", "b"]);
        assert!(matches!(finish(&lane, 0), Pulled::Wait(_)));
        lane.turn().close();
        lane.nudge(true);
        assert!(pulls(&inboxes[0]));
        assert!(matches!(lane.pull(0, 1).0, Pulled::Free { tell: true }), "the scheduler drains what waits");
        assert!(lane.turn().all_free());
    }

    #[test]
    fn no_wait_where_the_scheduler_times_the_queue_or_for_an_instance_that_went_down() {
        let mut timed = model(1);
        if let crate::policy::SchedulerPolicy::Dynamic(d) = &mut timed.scheduler {
            d.priority_levels = 2;
        }
        let (lane, _held) = busy(&timed);
        assert!(matches!(lane.route(pending("a"), false), Route::Scheduler(_)));
        for id in ["a", "b"] {
            lane.batcher.as_ref().unwrap().lock().push(pending(id)).unwrap();
        }
        lane.turn().publish(2, 1);
        assert!(matches!(finish(&lane, 0), Pulled::Free { tell: true }), "priority levels: the scheduler's");

        let (lane, inboxes) = busy(&model(1));
        queue(&lane, &["a", "b"]);
        assert!(matches!(finish(&lane, 0), Pulled::Wait(_)));
        lane.turn().down(0);
        assert!(!lane.stop_waiting(0), "the wait went with the instance");
        lane.nudge(true);
        assert!(!pulls(&inboxes[0]));
    }
}
