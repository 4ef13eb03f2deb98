//! A sequence model's lane: its requests go from the submitting thread into the sequence
//! batcher (shared with the sequence actor under a lock) and, when that gives a free instance a
//! batch at once (the sequence holds its slot, nothing runs for it, no batching delay holds
//! it), straight into that instance's mailbox: no hop through the sequence actor's thread. An
//! instance that finishes a batch tells the batcher itself, and takes its next batch from it
//! once its answers are out, instead of telling the actor and waiting for its hand-off.
//!
//! The sequence batcher keeps every rule it had: a sequence's requests run one at a time and in
//! their order of arrival (pushes are serialised by its lock, and a request never overtakes one
//! on its way to the actor), slots, backlog, control inputs and implicit state are its own. The
//! actor keeps the timers: whatever waits on a deadline (a request held for its START; the
//! `oldest` strategy's delay where no instance waits it out on its own thread, `waiter`) it is
//! asked to time (`Pump`) unless its timer already comes round by then, and it still takes
//! every request while the model drains.

use std::sync::mpsc::TrySendError;
use std::sync::Arc;
use std::time::Instant;

use parking_lot::{Mutex, MutexGuard};

use super::{Finish, Lane, Pulled, Route, State};
use crate::error::Error;
use crate::protocol::{InstanceMsg, Next, Pending};
use crate::sequence::SequenceBatcher;

impl Lane {
    /// Queues a sequence request in the batcher and hands the batch it makes to a free instance.
    pub(super) fn route_sequence(&self, sequence: &Arc<Mutex<SequenceBatcher>>, p: Pending) -> Route {
        let mut s = self.state.lock();
        // While requests are on their way to the actor (the model drains, or one was just
        // sent), later ones follow them: a sequence's requests never overtake one another.
        if !s.open || s.in_flight > 0 || s.live() == 0 {
            s.in_flight += 1;
            return Route::Scheduler(p);
        }
        let mut q = sequence.lock();
        if let Err(refused) = q.push(p) {
            return Route::Refused(refused);
        }
        let now = self.clock.now();
        let mut wait = None;
        let mut found = None;
        for &index in s.free.iter().rev() {
            match q.next(index, now) {
                Next::Batch(batch) => {
                    found = Some((index, batch));
                    break;
                }
                Next::WaitUntil(at) => wait = Some(wait.map_or(at, |w: Instant| w.min(at))),
                Next::Empty => {}
            }
        }
        let Some((index, batch)) = found else {
            // Queued behind a running request, for a slot, or for a batching delay: a busy
            // instance takes it when it finishes; an instance waiting out the delay is woken
            // if this request made its batch ready (`waiter`); the model's one instance, idle,
            // waits out the delay itself; else a delay or a START's grace needs the timer.
            let mut wake = self.take_ready_sequence_waiter(&mut s, &q);
            if wake.is_none() && wait.is_some() {
                wake = self.wait_here_sequence(&mut s);
            }
            let wait = wait.filter(|_| wake.is_none());
            let poke = needs_turn(&s, wait.into_iter().chain(q.next_deadline()));
            drop((q, s));
            if poke {
                self.poke();
            }
            if let Some(w) = wake {
                w.wake();
            }
            return Route::Queued;
        };
        s.free.retain(|&i| i != index);
        let mailbox = s.slots[index].as_ref().map(|(_, m)| m.clone());
        drop((q, s));
        let items = batch.iter().map(|p| p.batch_size).sum();
        let waited = batch.iter().map(|p| now.saturating_duration_since(p.enqueued)).max().unwrap_or_default();
        // A free instance waits on an empty mailbox: the send fails only when it ended
        // meanwhile; its batch goes back to its sequences for the scheduler to hand out.
        let batch = match mailbox.map(|m| m.try_send(InstanceMsg::Execute(batch))) {
            Some(Ok(())) => return Route::Direct { instance: index, items, waited },
            Some(Err(TrySendError::Full(InstanceMsg::Execute(b))))
            | Some(Err(TrySendError::Disconnected(InstanceMsg::Execute(b)))) => b,
            Some(Err(_)) => unreachable!("only Execute is sent here"),
            None => unreachable!("a free instance has a mailbox"),
        };
        let mut s = self.state.lock();
        s.slots[index] = None;
        s.free.retain(|&i| i != index);
        let mut q = sequence.lock();
        q.instance_down(index);
        let mut refused = Vec::new();
        for p in batch.into_iter().rev() {
            if let Err(r) = q.requeue(p) {
                refused.push(r);
            }
        }
        drop((q, s));
        self.poke();
        // At most the one request this call pushed can be refused back to its submitter here
        // (a requeue fails only for a sequence that no longer holds its place); any other is
        // failed with it by the caller's error.
        match refused.pop() {
            Some(r) => Route::Refused(r),
            None => Route::Queued,
        }
    }

    /// The sequences of the instance's batch may run their next request: free when none waits
    /// for it, else it pulls once its answers are out.
    pub(super) fn finish_sequence(
        &self,
        sequence: &Arc<Mutex<SequenceBatcher>>,
        index: usize,
        generation: u64,
    ) -> (Finish, Vec<(Pending, Error)>) {
        let mut s = self.state.lock();
        if !matches!(&s.slots[index], Some((g, _)) if *g == generation) || !s.open {
            return (Finish::Scheduler, Vec::new());
        }
        let mut q = sequence.lock();
        let failed = q.finished(index, self.clock.now());
        if q.ready_for(index) {
            return (Finish::Pull, failed);
        }
        if !s.free.contains(&index) {
            s.free.push(index);
        }
        // A sequence given a slot on another free instance (the backlog moved up) is that
        // instance's to run: the scheduler hands it out.
        let poke = others_ready(&s, &q, index);
        drop((q, s));
        if poke {
            self.poke();
        }
        (Finish::Freed, failed)
    }

    /// After `Finish::Pull`, with the answers out: the instance's next batch, or it is free.
    pub(super) fn pull_sequence(
        &self,
        sequence: &Arc<Mutex<SequenceBatcher>>,
        index: usize,
        generation: u64,
    ) -> Pulled {
        let mut s = self.state.lock();
        if !matches!(&s.slots[index], Some((g, _)) if *g == generation) {
            return Pulled::NotMine;
        }
        if s.waiter == Some(index) {
            s.waiter = None;
        }
        let mut q = sequence.lock();
        let wait = match s.open.then(|| q.next(index, self.clock.now())) {
            Some(Next::Batch(batch)) => return Pulled::Batch(batch),
            // The `oldest` strategy's delay holds the batch: the instance waits for it itself
            // where it may (`waiter`), else it is free and the scheduler times the delay.
            Some(Next::WaitUntil(at)) if self.may_wait(&s) => {
                s.waiter = Some(index);
                return Pulled::Wait(at);
            }
            Some(Next::WaitUntil(at)) => Some(at),
            Some(Next::Empty) | None => None,
        };
        if !s.free.contains(&index) {
            s.free.push(index);
        }
        let poke = !s.open || needs_turn(&s, wait.into_iter()) || others_ready(&s, &q, index);
        drop((q, s));
        if poke {
            self.poke();
        }
        Pulled::Free { tell: false }
    }
}

/// Whether the scheduler must take a turn for one of these deadlines: its timer, as of its last
/// turn, does not come round by the earliest.
fn needs_turn(s: &MutexGuard<'_, State>, deadlines: impl Iterator<Item = Instant>) -> bool {
    deadlines.min().is_some_and(|at| s.armed.is_none_or(|armed| armed > at))
}

/// Whether a free instance other than `index` has a sequence ready to run.
fn others_ready(s: &MutexGuard<'_, State>, q: &MutexGuard<'_, SequenceBatcher>, index: usize) -> bool {
    s.free.iter().any(|&i| i != index && q.ready_for(i))
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use bytes::Bytes;

    use super::*;
    use crate::clock::SystemClock;
    use crate::figures::ModelFigures;
    use crate::mailbox::{mailbox, Receiver};
    use crate::policy::{ModelPolicy, SchedulerPolicy};
    use crate::request::{CorrelationId, InferRequest, Reply, SequenceFlags};
    use crate::tensor::{DataType, Tensor};

    /// A `direct` sequence model with one instance of `slots` slots (the sequence actor's test
    /// model, with a smaller backlog).
    fn policy(slots: usize) -> ModelPolicy {
        let (mut model, mut sequence) = crate::sequence::tests::policies();
        sequence.max_backlog = 100;
        model.max_batch_size = slots;
        model.scheduler = SchedulerPolicy::Sequence(sequence);
        model
    }

    /// Request `n` of sequence `id` (its input is `n`).
    fn request(id: u64, n: i32, start: bool) -> Pending {
        let data = Bytes::from(n.to_le_bytes().to_vec());
        let mut request = InferRequest::new("acc", vec![Tensor::new("IN", DataType::I32, vec![1, 1], data)]);
        request.sequence = Some(SequenceFlags { id: CorrelationId::U64(id), start, end: false });
        let (reply, rx) = Reply::once();
        std::mem::forget(rx);
        Pending { request, reply, enqueued: Instant::now(), batch_size: 1, sequence: None, cache: None }
    }

    fn lane(p: &ModelPolicy) -> (Lane, Arc<Mutex<SequenceBatcher>>, Receiver<InstanceMsg>) {
        let SchedulerPolicy::Sequence(seq) = &p.scheduler else { unreachable!() };
        let clock = Arc::new(SystemClock);
        let figures = Arc::new(ModelFigures::new(1));
        let batcher = Arc::new(Mutex::new(SequenceBatcher::new(p, seq, figures.clone(), clock.clone())));
        let lane = Lane::new(p, None, Some(batcher.clone()), clock, figures);
        let (tx, rx) = mailbox();
        lane.turn().up(0, 1, tx, None);
        (lane, batcher, rx)
    }

    /// The inputs `IN` of a batch, in order.
    fn inputs(batch: &[Pending]) -> Vec<i32> {
        batch.iter().map(|p| i32::from_le_bytes(p.request.input("IN").unwrap().data[..4].try_into().unwrap())).collect()
    }

    fn executed(rx: &Receiver<InstanceMsg>) -> Vec<i32> {
        match rx.try_recv() {
            Ok(InstanceMsg::Execute(batch)) => inputs(&batch),
            _ => panic!("nothing sent to the instance"),
        }
    }

    #[test]
    fn a_request_whose_sequence_holds_a_slot_on_an_idle_instance_goes_straight_to_it() {
        let (lane, _, rx) = lane(&policy(1));
        assert!(matches!(lane.route(request(7, 1, true), false), Route::Direct { instance: 0, items: 1, .. }));
        assert_eq!(executed(&rx), [1]);
        assert!(lane.turn().free().is_empty(), "the instance is taken");
    }

    #[test]
    fn requests_queued_behind_a_running_one_run_in_order_pulled_by_the_instance() {
        let (lane, _, rx) = lane(&policy(1));
        assert!(matches!(lane.route(request(7, 1, true), false), Route::Direct { .. }));
        assert_eq!(executed(&rx), [1]);
        // The sequence runs: its next requests wait in the batcher, the actor not needed.
        assert!(matches!(lane.route(request(7, 2, false), false), Route::Queued));
        assert!(matches!(lane.route(request(7, 3, false), false), Route::Queued));
        let (finish, failed) = lane.finish(0, 1, Duration::ZERO);
        assert_eq!((finish, failed.len()), (Finish::Pull, 0));
        let Pulled::Batch(b) = lane.pull(0, 1).0 else { panic!("the next request waits") };
        assert_eq!(inputs(&b), [2]);
        assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Pull);
        let Pulled::Batch(b) = lane.pull(0, 1).0 else { panic!("the last request waits") };
        assert_eq!(inputs(&b), [3]);
        // Nothing left: free without a word to anyone, and the next request goes direct.
        assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Freed);
        assert!(lane.turn().all_free());
        assert!(matches!(lane.route(request(7, 4, false), false), Route::Direct { .. }));
        assert_eq!(executed(&rx), [4]);
    }

    #[test]
    fn a_sequence_without_a_free_slot_waits_in_the_backlog_until_one_ends() {
        let (lane, batcher, rx) = lane(&policy(1));
        assert!(matches!(lane.route(request(1, 10, true), false), Route::Direct { .. }));
        assert_eq!(executed(&rx), [10]);
        // Sequence 2 has no slot (one slot, held by sequence 1 until it ends or idles out).
        assert!(matches!(lane.route(request(2, 20, true), false), Route::Queued));
        assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Freed);
        let mut end = request(1, 11, false);
        end.request.sequence.as_mut().unwrap().end = true;
        assert!(matches!(lane.route(end, false), Route::Direct { .. }));
        assert_eq!(executed(&rx), [11]);
        // Sequence 1 ended: its slot goes to sequence 2, which the instance takes next.
        assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Pull);
        let Pulled::Batch(b) = lane.pull(0, 1).0 else { panic!("sequence 2 has its slot") };
        assert_eq!(inputs(&b), [20]);
        assert_eq!(batcher.lock().len(), 0);
    }

    #[test]
    fn a_request_the_batcher_refuses_comes_back_to_its_submitter() {
        let (lane, _, _rx) = lane(&policy(1));
        let Route::Refused(refused) = lane.route(request(9, 1, false), false) else { panic!("no START: refused") };
        assert!(refused.1.message.contains(crate::sequence::NO_START), "{}", refused.1.message);
    }

    #[test]
    fn while_the_model_drains_or_a_request_is_on_its_way_to_the_actor_requests_follow_it() {
        let (lane, _, _rx) = lane(&policy(1));
        lane.turn().close();
        assert!(matches!(lane.route(request(7, 1, true), false), Route::Scheduler(_)));
        let (lane, _, _rx) = self::lane(&policy(1));
        lane.state.lock().in_flight = 1;
        assert!(matches!(lane.route(request(7, 1, true), false), Route::Scheduler(_)));
    }

    #[test]
    fn an_instance_that_ended_gives_its_batch_back_to_its_sequences() {
        let (lane, batcher, rx) = lane(&policy(1));
        drop(rx);
        assert!(matches!(lane.route(request(7, 1, true), false), Route::Queued));
        assert!(lane.turn().free().is_empty(), "the ended instance is not free");
        // The request waits at the head of its sequence for the instance's successor.
        assert_eq!(batcher.lock().len(), 1);
        let (tx, rx) = mailbox();
        lane.turn().up(0, 2, tx, None);
        let Next::Batch(b) = batcher.lock().next(0, Instant::now()) else { panic!("ready again") };
        assert_eq!(inputs(&b), [1]);
        drop(rx);
    }

    fn pulls(rx: &Receiver<InstanceMsg>) -> bool {
        matches!(rx.try_recv(), Ok(InstanceMsg::Pull))
    }

    #[test]
    fn with_oldest_the_idle_instance_waits_out_the_delay_itself_and_the_batch_that_fills_wakes_it() {
        // One instance, 4 preferred, a delay of 60 s (`oldest_policies`).
        let (lane, _, rx) = lane(&crate::sequence::tests::oldest_policies().0);
        assert!(matches!(lane.route(request(1, 1, true), false), Route::Queued));
        assert!(pulls(&rx), "the idle instance is told to pull, not the actor to time the delay");
        assert!(lane.turn().free().is_empty(), "taken off the free list");
        let Pulled::Wait(at) = lane.pull(0, 1).0 else { panic!("the batch may still grow: it waits") };
        assert!(at > Instant::now() + Duration::from_secs(50), "until the head's delay ran out");
        for id in 2..=3 {
            assert!(matches!(lane.route(request(id, id as i32, true), false), Route::Queued));
            assert!(!pulls(&rx), "{id} of 4: not ready yet");
        }
        assert!(matches!(lane.route(request(4, 4, true), false), Route::Queued));
        assert!(pulls(&rx), "four, the preferred size: woken");
        assert!(!lane.stop_waiting(0), "the wait was taken with the `Pull`");
        let Pulled::Batch(b) = lane.pull(0, 1).0 else { panic!("the batch is ready") };
        assert_eq!(inputs(&b), [1, 2, 3, 4]);
    }

    #[test]
    fn with_oldest_an_instance_that_finishes_with_too_few_ready_waits_and_a_drain_wakes_it() {
        let (lane, _, rx) = lane(&crate::sequence::tests::oldest_policies().0);
        lane.turn().take(0);
        for id in 1..=2 {
            assert!(matches!(lane.route(request(id, id as i32, true), false), Route::Queued));
        }
        assert_eq!(lane.finish(0, 1, Duration::ZERO).0, Finish::Pull, "two ready behind the busy instance");
        assert!(matches!(lane.pull(0, 1).0, Pulled::Wait(_)), "two of four: it waits for the batch");
        assert!(!pulls(&rx));
        lane.nudge(false);
        assert!(!pulls(&rx), "the actor's turn finds the batch not ready");
        lane.turn().close();
        lane.nudge(true);
        assert!(pulls(&rx), "the model drains: woken at once");
        assert!(matches!(lane.pull(0, 1).0, Pulled::Free { .. }), "the actor drains what waits");
        assert!(lane.turn().all_free());
    }

    #[test]
    fn the_actor_is_asked_for_a_turn_only_when_its_timer_does_not_come_round_in_time() {
        let (lane, _, _rx) = lane(&policy(1));
        let now = Instant::now();
        let s = lane.state.lock();
        assert!(!needs_turn(&s, std::iter::empty()));
        assert!(needs_turn(&s, [now].into_iter()));
        drop(s);
        lane.turn().arm(Some(now));
        let s = lane.state.lock();
        assert!(!needs_turn(&s, [now + Duration::from_millis(1)].into_iter()));
        assert!(needs_turn(&s, [now - Duration::from_millis(1)].into_iter()));
    }
}
