//! The free instances of one model version, shared by its scheduler actor, its instances and
//! the threads that submit its requests: the direct lane. A request that finds the scheduler
//! with nothing queued or on its way, and an instance free with no batching delay to wait for,
//! goes from the submitting thread (an HTTP worker, a gRPC connection) straight into that
//! instance's mailbox, without the scheduler actor's hop; an instance that finishes with
//! nothing queued for it puts itself back here without a message to the scheduler.
//!
//! The scheduler's batcher stays the authority for queued work: whenever requests are queued
//! (or some are on their way to the scheduler) while an instance is free, submitters go through
//! the scheduler, and an instance that frees itself tells it. So priorities, `max_queue_size`,
//! queue timeouts, the batcher's delay and preferred sizes decide as before; the lane only
//! skips the scheduler when the batcher would have sent the request alone at once: nothing runs
//! and the model's requests have not come in company lately (`company`; Triton's
//! dynamic batcher makes even a lone client's request wait for its delay). Sequence models
//! have a lane of their own (`sequence`): their requests go into the sequence batcher, shared under a lock,
//! and to a free instance from there, decoupled or not. A decoupled model without sequences takes the
//! direct lane too (its batcher runs each request alone, with no delay). Iterative sequences keep
//! the scheduler for every request.
//!
//! An instance that finishes while requests wait takes its next batch itself (`pull`), once
//! its answers are out: it asks the batcher, shared with the scheduler under a lock, as the
//! scheduler would, instead of telling the scheduler and waiting for its hand-off (two thread
//! wake-ups per batch). When the batcher says wait (its delay runs), the instance waits for the
//! batch on its own thread where it can (`waiter`); else, or when the batcher has nothing, it is
//! free and tells the scheduler if work waits there, and the scheduler keeps the timers.
//!
//! A request that finds every instance busy waits in that batcher too, put there by its
//! submitting thread (`busy`), when nothing in the batcher needs the scheduler's timers (a
//! queue timeout) or priority levels and nothing is on its way to the scheduler: the instance that finishes
//! first pulls it, with no wake-up of the scheduler's thread per request (Triton's frontend thread, too, puts
//! the request in the model's queue itself).
//!
//! Every decision is taken under one lock (the lane's, then the batcher's), so a request never
//! finds a free instance while earlier requests wait in the scheduler, and an instance never
//! frees itself unseen while requests wait for one.

mod busy;
mod company;
mod sequence;
mod turn;
mod waiter;

use std::sync::mpsc::TrySendError;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use actix::Recipient;
use company::Company;
use parking_lot::Mutex;
pub(crate) use turn::Turn;

use crate::batcher::Batcher;
use crate::clock::SharedClock;
use crate::error::Error;
use crate::figures::ModelFigures;
use crate::mailbox::Sender;
use crate::policy::{ModelPolicy, SchedulerPolicy};
use crate::protocol::{InstanceMsg, Next, Pending, Pump, Refused, RunHere};
use crate::sequence::SequenceBatcher;

/// One model version's free instances and what the scheduler holds.
pub(crate) struct Lane {
    /// Submitters may hand requests to free instances themselves (not for sequence models).
    direct: bool,
    /// The batcher waits for a batch to fill (`max_queue_delay_microseconds` > 0) unless
    /// nothing runs: a request goes direct only when every instance is free.
    delays: bool,
    /// The batcher the instances pull from (direct models).
    batcher: Option<Arc<Mutex<Batcher>>>,
    /// A request that finds every instance busy may wait in `batcher` without the scheduler:
    /// nothing there needs its timers (no queue timeout) and there is one priority level
    /// (`busy`).
    queues: bool,
    /// A sequence model's batcher, shared with its sequence actor (not for iterative sequence
    /// models: they keep the actor for every request).
    sequence: Option<Arc<Mutex<SequenceBatcher>>>,
    /// The scheduler actor's turn, for work the lane queued that it must time or hand out.
    pump: OnceLock<Recipient<Pump>>,
    clock: SharedClock,
    /// Where the queue's length is reported (`tritium_scheduler_queue_length`), as the lane
    /// changes it.
    figures: Arc<ModelFigures>,
    state: Mutex<State>,
}

struct State {
    /// Each instance slot's live mailbox and its generation (none while it is down).
    slots: Vec<Option<(u64, Sender<InstanceMsg>)>>,
    /// Beside each slot: the instance's backend, where a submitter may run a lone request on
    /// it (`lane::Claim`).
    inline: Vec<Option<Arc<dyn RunHere>>>,
    /// Free instance slots, the most recently freed last (its caches are the warmest).
    free: Vec<usize>,
    /// Requests sent to the scheduler that it has not read yet.
    in_flight: usize,
    /// Requests the scheduler holds queued, as of its last turn.
    queued: usize,
    /// False once the model drains: every request goes through the scheduler.
    open: bool,
    /// The scheduler's timer, as of its last turn: it takes a turn then (or soon after). Also
    /// set to the time of a turn the lane asked for (`busy`), until that turn.
    armed: Option<Instant>,
    /// Whether the model's load is concurrent, for a lone request on an idle model to wait for
    /// the batcher's delay (`company`).
    company: Company,
    /// The instance that waits out the batcher's delay on its own thread (`waiter`), not free.
    waiter: Option<usize>,
}

impl State {
    fn live(&self) -> usize {
        self.slots.iter().filter(|s| s.is_some()).count()
    }

    fn backlog(&self) -> bool {
        self.in_flight > 0 || self.queued > 0
    }
}

/// What an instance that finished its batch does next (`Lane::finish`).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    /// It is free in the lane and nothing waits: nobody needs telling.
    Freed,
    /// Work waits, or the model drains: once its answers are out it calls `pull`.
    Pull,
    /// Not the lane's to free: the scheduler hears as before.
    Scheduler,
}

/// What `pull` gave an instance.
#[derive(Debug)]
pub(crate) enum Pulled {
    /// Its next batch, as the batcher formed it.
    Batch(Vec<Pending>),
    /// Free in the lane; `tell`: the scheduler must hear (work waits for a delay or is on its
    /// way, or the model drains).
    Free { tell: bool },
    /// Not free: the batch may still grow, and the instance waits for it until this instant on
    /// its own thread, unless a submitter whose request made it ready wakes it first (`waiter`).
    Wait(Instant),
    /// Not the lane's (a stale generation): the scheduler hears as before.
    NotMine,
}

/// A free instance the lane gave a lone request to, for the submitting thread to run it on.
pub(crate) struct Claim {
    pub instance: usize,
    pub core: Arc<dyn RunHere>,
    /// The instance's mailbox: its thread hears there what only it may do next.
    pub mailbox: Sender<InstanceMsg>,
}

impl Claim {
    /// Runs `p` on this thread; gives it back unrun if the instance ended meanwhile.
    pub fn run(self, p: Pending) -> Option<Pending> {
        self.core.run(self.instance, &self.mailbox, p)
    }
}

/// How a request went on: straight to an instance, or to the scheduler (counted as on its way).
/// The request moves through either way, unboxed: an allocation per request would cost more on
/// this path than the enum's size.
#[allow(clippy::large_enum_variant)]
pub(crate) enum Route {
    /// Sent to `instance` in a batch of `items` (more than the request's own for a sequence
    /// model's batch) whose oldest request waited `waited`.
    Direct {
        instance: usize,
        items: usize,
        waited: Duration,
    },
    Scheduler(Pending),
    /// Claimed for the caller to run on its own thread (`Claim::run`); if that finds the
    /// instance ended, the request is routed again.
    Inline(Claim, Pending),
    /// In the sequence batcher, or in the batcher behind busy instances: an instance, or the
    /// scheduler, takes it on from there.
    Queued,
    /// The sequence batcher, or the batcher behind busy instances, refused it (to be failed by
    /// the submitter).
    Refused(Refused),
}

impl Lane {
    /// `batcher`: the batcher the scheduler drives, shared (a direct model's); `sequence`: the
    /// sequence batcher the sequence actor drives, shared (a sequence model's).
    pub fn new(
        policy: &ModelPolicy,
        batcher: Option<Arc<Mutex<Batcher>>>,
        sequence: Option<Arc<Mutex<SequenceBatcher>>>,
        clock: SharedClock,
        figures: Arc<ModelFigures>,
    ) -> Self {
        // The batcher holds a decoupled model's requests for no delay: each runs alone (`Batcher::new`).
        let max_delay = match &policy.scheduler {
            SchedulerPolicy::Dynamic(d) if !policy.decoupled => d.max_queue_delay,
            _ => Duration::ZERO,
        };
        let delays = !max_delay.is_zero();
        let direct = policy.sequence().is_none();
        let takes_sequences = policy.sequence().is_some_and(|s| !s.iterative);
        let batcher = batcher.filter(|_| direct);
        Lane {
            direct,
            delays,
            queues: batcher.is_some() && busy::unaided(policy),
            batcher,
            sequence: sequence.filter(|_| takes_sequences),
            pump: OnceLock::new(),
            clock,
            figures,
            state: Mutex::new(State {
                slots: (0..policy.instances.len()).map(|_| None).collect(),
                inline: (0..policy.instances.len()).map(|_| None).collect(),
                free: Vec::new(),
                in_flight: 0,
                queued: 0,
                open: true,
                armed: None,
                company: Company::new(max_delay),
                waiter: None,
            }),
        }
    }

    /// Where the lane asks the scheduler actor for a turn (set once it started).
    pub fn set_pump(&self, pump: Recipient<Pump>) {
        let _ = self.pump.set(pump);
    }

    /// Hands `p` to a free instance when nothing is queued and no delay applies; else counts it
    /// as on its way to the scheduler and gives it back to be sent there (`unsent` if that
    /// send fails). With `inline`, a free instance whose backend allows it and whose recent
    /// executions were short is claimed for the caller to run `p` on itself (`Route::Inline`).
    pub fn route(&self, p: Pending, inline: bool) -> Route {
        let mut p = p;
        if let Some(sequence) = &self.sequence {
            return self.route_sequence(sequence, p);
        }
        if self.direct {
            loop {
                let mut s = self.state.lock();
                let all_free = s.free.len() == s.live();
                let mut company = false;
                if self.delays {
                    let now = self.clock.now();
                    if !all_free || s.backlog() {
                        s.company.came(now);
                    }
                    company = s.company.waits(now);
                }
                if self.queues && s.free.is_empty() && s.open && s.in_flight == 0 && s.live() > 0 {
                    return self.route_busy(s, p);
                }
                if !s.open || s.backlog() || (self.delays && (!all_free || company)) {
                    if company && all_free && self.waits_here(&s) {
                        return self.wait_here(s, p);
                    }
                    s.in_flight += 1;
                    return Route::Scheduler(p);
                }
                let Some(index) = s.free.pop() else {
                    s.in_flight += 1;
                    return Route::Scheduler(p);
                };
                let Some((_, mailbox)) = s.slots[index].clone() else { continue };
                let core = s.inline[index].as_ref().filter(|c| inline && c.short()).cloned();
                drop(s);
                if let Some(core) = core {
                    return Route::Inline(Claim { instance: index, core, mailbox }, p);
                }
                // A free instance waits on an empty mailbox: the send fails only when it ended
                // meanwhile (the supervisor tells the scheduler); the request tries again.
                let items = p.batch_size;
                match mailbox.try_send(InstanceMsg::Execute(vec![p])) {
                    Ok(()) => return Route::Direct { instance: index, items, waited: Duration::ZERO },
                    Err(TrySendError::Full(InstanceMsg::Execute(mut b)))
                    | Err(TrySendError::Disconnected(InstanceMsg::Execute(mut b))) => {
                        p = b.pop().expect("the one request sent");
                    }
                    Err(_) => unreachable!("only Execute is sent here"),
                }
            }
        }
        self.state.lock().in_flight += 1;
        Route::Scheduler(p)
    }

    /// A request counted by `route` as on its way never reached the scheduler.
    pub fn unsent(&self) {
        let mut s = self.state.lock();
        s.in_flight = s.in_flight.saturating_sub(1);
    }

    /// An instance finished its batch, which took `took`, with no request to hand back (before
    /// its answers go out): free at once when nothing waits, so the client's next request finds
    /// it free. For a sequence model, the requests that can no longer run come back, to be
    /// failed.
    pub fn finish(&self, index: usize, generation: u64, took: Duration) -> (Finish, Vec<(Pending, Error)>) {
        if let Some(sequence) = &self.sequence {
            return self.finish_sequence(sequence, index, generation);
        }
        (self.finish_direct(index, generation, took), Vec::new())
    }

    fn finish_direct(&self, index: usize, generation: u64, took: Duration) -> Finish {
        if !self.direct {
            return Finish::Scheduler;
        }
        let mut s = self.state.lock();
        if !matches!(&s.slots[index], Some((g, _)) if *g == generation) {
            return Finish::Scheduler;
        }
        s.company.executed(took);
        if s.backlog() || !s.open {
            return Finish::Pull;
        }
        if !s.free.contains(&index) {
            s.free.push(index);
        }
        Finish::Freed
    }

    /// After `Finish::Pull`, with the answers out: the instance's next batch if the batcher
    /// has one for it now (requests past their queue timeout come back in `expired`, to be
    /// failed as the scheduler fails them), else it is free.
    pub fn pull(&self, index: usize, generation: u64) -> (Pulled, Vec<Pending>) {
        if let Some(sequence) = &self.sequence {
            return (self.pull_sequence(sequence, index, generation), Vec::new());
        }
        let mut s = self.state.lock();
        if !matches!(&s.slots[index], Some((g, _)) if *g == generation) {
            return (Pulled::NotMine, Vec::new());
        }
        if s.waiter == Some(index) {
            s.waiter = None;
        }
        let mut expired = Vec::new();
        if let (true, true, Some(batcher)) = (s.open, s.backlog(), &self.batcher) {
            let now = self.clock.now();
            let mut q = batcher.lock();
            expired = q.take_expired(now);
            // Nothing else executes and the load is not concurrent: a lone request need not
            // wait for company.
            let idle = s.free.len() + 1 >= s.live() && !s.company.waits(now);
            let next = q.next(now, idle);
            s.queued = q.len();
            self.figures.scheduler.queued(s.queued);
            match next {
                Next::Batch(batch) => return (Pulled::Batch(batch), expired),
                Next::WaitUntil(at) if self.may_wait(&s) => {
                    s.waiter = Some(index);
                    return (Pulled::Wait(at), expired);
                }
                Next::WaitUntil(_) | Next::Empty => {}
            }
        }
        if !s.free.contains(&index) {
            s.free.push(index);
        }
        let tell = s.backlog() || !s.open;
        (Pulled::Free { tell }, expired)
    }

    /// The model's time (its scheduler's clock).
    pub fn now(&self) -> Instant {
        self.clock.now()
    }

    /// Whether requests wait for an instance: queued in the scheduler or on their way to it.
    pub fn waiting(&self) -> bool {
        self.state.lock().backlog()
    }

    /// Locks the lane for one turn of the scheduler.
    pub fn turn(&self) -> Turn<'_> {
        Turn { s: self.state.lock() }
    }

    /// Asks the scheduler actor for a turn.
    fn poke(&self) {
        if let Some(pump) = self.pump.get() {
            pump.do_send(Pump);
        }
    }
}

#[cfg(test)]
mod tests;
