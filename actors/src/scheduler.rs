//! The scheduler actor of one model version: owns the queue, asks it for batches and hands each
//! to a free instance. It runs no model; the instances tell it when they are free. It is
//! generic over its queue: with the dynamic batcher it is the batcher actor (`BatcherActor`),
//! with the sequence batcher the sequence actor (`SequenceActor`).

use std::sync::mpsc::TrySendError;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::{Actor, Addr, ArbiterHandle, AsyncContext, Context, Handler, Message, MessageResult, Recipient};
use tokio::sync::oneshot;

use crate::batcher::{Batcher, SharedBatcher};
use crate::clock::SharedClock;
use crate::error::Error;
use crate::figures::ModelFigures;
use crate::lane::Lane;
use crate::mailbox::Sender;
use crate::policy::ModelPolicy;
use crate::protocol::{Conversations, Drain, Enqueue, InstanceDown, InstanceIdle, InstanceMsg, InstanceUp, Next, Pump};
use crate::queue::Queue;
use crate::sequence::{SequenceBatcher, SharedSequence};
use crate::stats::ModelStats;

/// The batcher actor: the scheduler actor driving the dynamic batcher, for a model without
/// `sequence_batching` (with `dynamic_batching`, or sending each request alone).
pub type BatcherActor = Scheduler<SharedBatcher>;

/// The sequence actor: the scheduler actor driving the sequence batcher, for a model with
/// `sequence_batching`. It pins each correlation ID to a slot and owns the sequences' state
/// (its batcher shared with the model's lane, where requests and instances meet it directly).
pub type SequenceActor = Scheduler<SharedSequence>;

/// How often queued requests are checked for a client that went away. The check visits every
/// queued request, so it runs at most this often (and a timer brings it round while requests
/// wait), not on every turn: at 1,000 queued requests, on every turn, it was most of the
/// scheduler's time. An instance also drops a cancelled request it is handed.
const CANCEL_SWEEP_EVERY: Duration = Duration::from_millis(10);

/// The sweep's period grows with the requests queued, this much per request, so its visits per
/// second stay the same whatever the queue's length (25,000 a second at most): at 10,000 queued
/// turns a sweep every 10 ms took the sweep's visits to about 20 per turn (the turn's cost grew
/// with the queue). At 10 µs a request perf_analyzer's 4,000 sequences (2,976 of them in the
/// backlog) still paid 6.7 µs of the sequence actor's CPU per turn for the sweep, a quarter more
/// than at 64 sequences; at 40 µs it is a quarter of that. A cancelled request is then noticed
/// within 160 ms at 4,000 queued and 400 ms at 10,000, where a turn waits longer than that in the
/// queue anyway; an instance handed one drops it.
const CANCEL_SWEEP_PER_QUEUED: Duration = Duration::from_micros(40);

/// The cancel sweep's period with `queued` requests queued.
fn cancel_sweep_every(queued: usize) -> Duration {
    CANCEL_SWEEP_EVERY.max(CANCEL_SWEEP_PER_QUEUED.saturating_mul(queued.min(u32::MAX as usize) as u32))
}

struct Slot {
    mailbox: Option<Sender<InstanceMsg>>,
    generation: u64,
}

pub struct Scheduler<Q: Queue> {
    policy: Arc<ModelPolicy>,
    stats: Arc<ModelStats>,
    figures: Arc<ModelFigures>,
    queue: Q,
    clock: SharedClock,
    slots: Vec<Slot>,
    /// Which instances are free (shared with the instances and the submitting threads).
    lane: Arc<Lane>,
    /// The deadline a timer is set for.
    wake: Option<Instant>,
    drained: Vec<oneshot::Sender<()>>,
    draining: bool,
    /// When the queue was last checked for cancelled requests.
    cancel_sweep: Option<Instant>,
}

impl<Q: Queue> Scheduler<Q> {
    pub(crate) fn new(
        policy: Arc<ModelPolicy>,
        stats: Arc<ModelStats>,
        figures: Arc<ModelFigures>,
        queue: Q,
        clock: SharedClock,
        lane: Arc<Lane>,
    ) -> Self {
        let slots = (0..policy.instances.len()).map(|_| Slot { mailbox: None, generation: 0 }).collect();
        Scheduler {
            queue,
            clock,
            lane,
            policy,
            stats,
            figures,
            slots,
            wake: None,
            drained: Vec::new(),
            draining: false,
            cancel_sweep: None,
        }
    }

    fn has_live_instance(&self) -> bool {
        self.slots.iter().any(|s| s.mailbox.is_some())
    }

    /// Hands batches to free instances while both exist; arms a timer when a batch may grow.
    fn pump(&mut self, ctx: &mut Context<Self>) {
        let now = self.clock.now();
        if self.cancel_sweep.is_none_or(|t| now >= t + cancel_sweep_every(self.queue.len())) {
            self.cancel_sweep = Some(now);
            for p in self.queue.take_cancelled() {
                p.fail(&self.stats, Error::cancelled("the client cancelled the request"));
            }
        }
        for p in self.queue.take_expired(self.clock.now()) {
            p.fail(&self.stats, Error::unavailable("Request timeout expired"));
        }
        for (p, e) in self.queue.take_refused(self.clock.now()) {
            p.fail(&self.stats, e);
        }
        loop {
            let now = self.clock.now();
            // The lane stays locked while a batch is chosen and its instance taken, so no
            // submitter takes that instance meanwhile.
            let mut lane = self.lane.turn();
            let free: Vec<usize> = lane.free().into_iter().filter(|&i| self.slots[i].mailbox.is_some()).collect();
            let mut wait: Option<Instant> = None;
            let mut found = None;
            // Nothing executing, and the load not concurrent: a lone queued request has
            // nothing to wait for.
            let idle = lane.lone_goes(now);
            for idx in free {
                match self.queue.next(idx, now, idle) {
                    Next::Empty => continue,
                    Next::WaitUntil(at) => wait = Some(wait.map_or(at, |w: Instant| w.min(at))),
                    Next::Batch(batch) => {
                        found = Some((idx, batch));
                        break;
                    }
                }
            }
            if let Some((idx, _)) = &found {
                lane.take(*idx);
                // What stays queued, published before the batch is sent (see `Enqueue`).
                lane.publish(self.queue.len(), 0);
            }
            let Some((idx, batch)) = found else {
                // Wake for the batcher's delay or the next queue timeout, whichever comes first.
                let wait = match (wait, self.queue.next_deadline()) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                // Requests wait: the next check for cancelled ones comes round by itself.
                let queued = self.queue.len();
                let sweep = self.cancel_sweep.filter(|_| queued > 0).map(|t| t + cancel_sweep_every(queued));
                let wait = match (wait, sweep) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
                if let Some(at) = wait {
                    // One timer per earliest deadline; a wake that finds nothing due only pumps.
                    if self.wake.is_none_or(|t| at < t || t <= now) {
                        self.wake = Some(at);
                        let addr = ctx.address();
                        self.clock.at(at, Box::new(move || addr.do_send(Wake(at))));
                    }
                }
                // Published under the lock the decision was taken under: a request the lane
                // queues after it sees the timer that will come round for it (or asks for a turn).
                lane.arm(self.wake);
                break;
            };
            drop(lane);
            let items: usize = batch.iter().map(|p| p.batch_size).sum();
            let waited = batch.iter().map(|p| p.enqueued).min().map(|oldest| now.saturating_duration_since(oldest));
            self.figures.scheduler.batch(items, waited);
            let slot = &mut self.slots[idx];
            let mailbox = slot.mailbox.as_ref().expect("live slot");
            match mailbox.try_send(InstanceMsg::Execute(batch)) {
                Ok(()) => self.figures.scheduler.dispatched(idx),
                Err(TrySendError::Full(InstanceMsg::Execute(batch)))
                | Err(TrySendError::Disconnected(InstanceMsg::Execute(batch))) => {
                    // The instance died between messages; its requests must not be lost.
                    slot.mailbox = None;
                    self.lane.turn().down(idx);
                    self.queue.instance_down(idx);
                    for p in batch.into_iter().rev() {
                        if let Err(refused) = self.queue.requeue(p) {
                            let (p, e) = *refused;
                            p.fail(&self.stats, e);
                        }
                    }
                }
                Err(_) => unreachable!("only Execute is sent here"),
            }
        }
        self.figures.scheduler.queued(self.queue.len());
        // The receiver first: the queue's length is read under the lane's lock, as instances
        // pull under it.
        self.lane.turn().publish(self.queue.len(), 0);
        // An instance that waits for its batch to grow hears if this turn's requests made it
        // ready, or at once while the model drains (`lane::waiter`).
        self.lane.nudge(self.draining);
        self.finish_drain_if_done(ctx);
    }

    fn finish_drain_if_done(&mut self, ctx: &mut Context<Self>) {
        if self.draining && self.queue.is_empty() && self.lane.turn().all_free() {
            self.lane.turn().clear();
            for s in &mut self.slots {
                if let Some(mb) = s.mailbox.take() {
                    let _ = mb.send(InstanceMsg::Shutdown);
                }
            }
            for tx in self.drained.drain(..) {
                let _ = tx.send(());
            }
            actix::ActorContext::stop(ctx);
        }
    }
}

impl<Q: Queue> Actor for Scheduler<Q> {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(self.policy.queue_capacity);
        self.check_idle_later(ctx);
    }

    /// The instances' mailboxes go with the scheduler: they end once theirs are gone.
    fn stopped(&mut self, _: &mut Context<Self>) {
        self.lane.turn().clear();
    }
}

impl<Q: Queue> Scheduler<Q> {
    /// Asks the clock for the queue's next idle check, if it has them.
    fn check_idle_later(&self, ctx: &mut Context<Self>) {
        if let Some(every) = self.queue.idle_check_every() {
            let addr = ctx.address();
            self.clock.at(self.clock.now() + every, Box::new(move || addr.do_send(CheckIdle)));
        }
    }
}

/// Time for the queue's idle check (the sequence actor frees idle sequences' slots).
#[derive(Message)]
#[rtype(result = "()")]
struct CheckIdle;

impl<Q: Queue> Handler<CheckIdle> for Scheduler<Q> {
    type Result = ();
    fn handle(&mut self, _: CheckIdle, ctx: &mut Context<Self>) {
        self.queue.expire_idle(self.clock.now());
        self.pump(ctx);
        self.check_idle_later(ctx);
    }
}

impl<Q: Queue> Handler<Enqueue> for Scheduler<Q> {
    type Result = ();
    fn handle(&mut self, Enqueue(p): Enqueue, ctx: &mut Context<Self>) {
        self.figures.scheduler.handled();
        let queued = if !self.has_live_instance() {
            let e = Error::unavailable(format!("model '{}' has no live instance", self.policy.name));
            p.fail(&self.stats, e);
            false
        } else if let Err(refused) = self.queue.push(p) {
            let (p, e) = *refused;
            p.fail(&self.stats, e);
            false
        } else {
            true
        };
        // Read off the lane's request on its way, with what is queued, in one step, and before
        // the turn hands it out: an instance finishing that batch must see nothing on its way
        // and free itself before it answers, or the client's next request would find it busy
        // and go round by the scheduler.
        self.lane.turn().publish(self.queue.len(), 1);
        if queued {
            self.pump(ctx);
        }
    }
}

/// The lane queued work the scheduler must time or hand out (a sequence model's), or that its
/// cancel sweep must come round for (requests behind busy instances).
impl<Q: Queue> Handler<Pump> for Scheduler<Q> {
    type Result = ();
    fn handle(&mut self, _: Pump, ctx: &mut Context<Self>) {
        self.pump(ctx);
    }
}

/// A batcher deadline passed.
#[derive(Message)]
#[rtype(result = "()")]
struct Wake(Instant);

impl<Q: Queue> Handler<Wake> for Scheduler<Q> {
    type Result = ();
    fn handle(&mut self, Wake(at): Wake, ctx: &mut Context<Self>) {
        if self.wake == Some(at) {
            self.wake = None;
        }
        self.pump(ctx);
    }
}

impl<Q: Queue> Handler<InstanceIdle> for Scheduler<Q> {
    type Result = ();
    fn handle(&mut self, m: InstanceIdle, ctx: &mut Context<Self>) {
        // Requests to run again go back to their sequences before the batch's end is seen, so
        // a sequence with its request rescheduled keeps its slot.
        for p in m.rescheduled {
            if let Err(refused) = self.queue.reschedule(p) {
                let (p, e) = *refused;
                p.fail(&self.stats, e);
            }
        }
        if let Some(s) = self.slots.get_mut(m.index) {
            if s.generation == m.generation {
                if m.release {
                    self.lane.turn().release(m.index, m.generation);
                }
                for (p, e) in self.queue.finished(m.index, self.clock.now()) {
                    p.fail(&self.stats, e);
                }
            }
        }
        self.pump(ctx);
    }
}

impl<Q: Queue> Handler<InstanceUp> for Scheduler<Q> {
    type Result = ();
    fn handle(&mut self, m: InstanceUp, ctx: &mut Context<Self>) {
        if self.draining {
            let _ = m.mailbox.send(InstanceMsg::Shutdown);
            // Unloaded while loading: the load itself went through, as before this hand-over.
            if let Some(tx) = m.loaded {
                let _ = tx.send(Ok(()));
            }
            return;
        }
        self.lane.turn().up(m.index, m.generation, m.mailbox.clone(), m.inline);
        self.slots[m.index] = Slot { mailbox: Some(m.mailbox), generation: m.generation };
        if let Some(tx) = m.loaded {
            let _ = tx.send(Ok(()));
        }
        self.pump(ctx);
    }
}

impl<Q: Queue> Handler<InstanceDown> for Scheduler<Q> {
    type Result = ();
    fn handle(&mut self, m: InstanceDown, ctx: &mut Context<Self>) {
        let s = &mut self.slots[m.index];
        if s.generation == m.generation {
            s.mailbox = None;
            self.lane.turn().down(m.index);
            self.queue.instance_down(m.index);
        }
        if !self.has_live_instance() && m.permanent {
            for p in self.queue.drain_all() {
                p.fail(&self.stats, Error::unavailable(format!("model '{}' has no live instance", self.policy.name)));
            }
        }
        self.finish_drain_if_done(ctx);
    }
}

impl<Q: Queue> Handler<Drain> for Scheduler<Q> {
    type Result = ();
    fn handle(&mut self, Drain(tx): Drain, ctx: &mut Context<Self>) {
        self.draining = true;
        self.lane.turn().close();
        self.drained.push(tx);
        if !self.has_live_instance() {
            for p in self.queue.drain_all() {
                p.fail(&self.stats, Error::unavailable(format!("model '{}' is unloading", self.policy.name)));
            }
        }
        self.pump(ctx);
    }
}

/// A watcher's query (`ModelHandle::conversations`): the sequence actor reads it between two
/// batches like any message and answers with one pass over its sequences.
impl Handler<Conversations> for SequenceActor {
    type Result = MessageResult<Conversations>;
    fn handle(&mut self, _: Conversations, _: &mut Context<Self>) -> Self::Result {
        MessageResult(self.queue.0.lock().conversations(self.clock.now()))
    }
}

/// How the supervisor and the instances reach a scheduler actor, whichever its queue.
#[derive(Clone)]
pub(crate) struct SchedulerAddr {
    /// The model's free instances, shared with the scheduler actor.
    pub lane: Arc<Lane>,
    pub enqueue: Recipient<Enqueue>,
    pub idle: Recipient<InstanceIdle>,
    pub up: Recipient<InstanceUp>,
    pub down: Recipient<InstanceDown>,
    pub drain: Recipient<Drain>,
    /// The sequence actor's table of conversations (none for the batcher actor).
    pub conversations: Option<Recipient<Conversations>>,
}

impl SchedulerAddr {
    pub fn of<Q: Queue>(addr: Addr<Scheduler<Q>>, lane: Arc<Lane>) -> Self {
        SchedulerAddr {
            lane,
            enqueue: addr.clone().recipient(),
            idle: addr.clone().recipient(),
            up: addr.clone().recipient(),
            down: addr.clone().recipient(),
            drain: addr.recipient(),
            conversations: None,
        }
    }

    /// Starts the scheduler actor of `policy` on `engine`: the sequence actor for a model with
    /// `sequence_batching`, else the batcher actor. `decoupled_batches`: the model's instances
    /// take a decoupled model's requests several at a time.
    pub fn start(
        engine: &ArbiterHandle,
        policy: Arc<ModelPolicy>,
        stats: Arc<ModelStats>,
        figures: Arc<ModelFigures>,
        clock: SharedClock,
        decoupled_batches: bool,
    ) -> Self {
        match policy.sequence() {
            Some(seq) => {
                let mut queue = SequenceBatcher::new(&policy, seq, figures.clone(), clock.clone());
                // An iterative sequence's step streams its responses within its execution, so
                // its requests may share one (Triton's inflight batching); other decoupled
                // models keep one request per execution, each streaming at its own pace.
                if decoupled_batches && seq.iterative {
                    queue.batch_decoupled(&policy);
                }
                // Submitters and instances meet it directly (`lane::sequence`).
                let queue = SharedSequence(Arc::new(parking_lot::Mutex::new(queue)));
                let lane = Arc::new(Lane::new(&policy, None, Some(queue.0.clone()), clock.clone(), figures.clone()));
                let shared = lane.clone();
                let new = move |_: &mut Context<_>| Scheduler::new(policy, stats, figures, queue, clock, lane);
                let addr = SequenceActor::start_in_arbiter(engine, new);
                shared.set_pump(addr.clone().recipient());
                Self { conversations: Some(addr.clone().recipient()), ..Self::of(addr, shared) }
            }
            None => {
                // The instances take their next batch from it themselves (`Lane::pull`).
                let batcher = Arc::new(parking_lot::Mutex::new(Batcher::new(&policy)));
                // Requests that find every instance busy wait in it too, put there by their
                // submitters (`lane::busy`), who ask the scheduler for a turn when it must time them.
                let lane = Arc::new(Lane::new(&policy, Some(batcher.clone()), None, clock.clone(), figures.clone()));
                let shared = lane.clone();
                let queue = SharedBatcher(batcher);
                let new = move |_: &mut Context<_>| Scheduler::new(policy, stats, figures, queue, clock, lane);
                let addr = BatcherActor::start_in_arbiter(engine, new);
                shared.set_pump(addr.clone().recipient());
                Self::of(addr, shared)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::cancel_sweep_every;

    #[test]
    fn the_cancel_sweep_slows_with_the_queue_so_its_visits_per_request_stay_bounded() {
        assert_eq!(cancel_sweep_every(0), Duration::from_millis(10));
        assert_eq!(cancel_sweep_every(250), Duration::from_millis(10));
        assert_eq!(cancel_sweep_every(4_000), Duration::from_millis(160));
        assert_eq!(cancel_sweep_every(10_000), Duration::from_millis(400));
        // Visits per second (queued ÷ period) stop growing past 250 queued, at 25,000.
        let visits = |q: usize| q as f64 / cancel_sweep_every(q).as_secs_f64();
        assert_eq!(visits(10_000), visits(250));
        assert_eq!(visits(10_000), 25_000.0);
        assert!(cancel_sweep_every(usize::MAX) >= Duration::from_secs(3600));
    }
}
