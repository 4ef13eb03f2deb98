//! The batcher: which queued requests form the next batch, and when. A plain struct that the
//! scheduler actor drives (the two together are the batcher actor, `scheduler::BatcherActor`); it holds no
//! threads and no timers of its own.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::error::Error;
use crate::policy::{ModelPolicy, QueuePolicy, SchedulerPolicy, TimeoutAction};
use crate::protocol::{Next, Pending, Refused};
use crate::queue::Queue;

/// A queued request with what its queue policy says about waiting.
#[derive(Debug)]
struct Entry {
    p: Pending,
    /// When the request's timeout expires (`default_timeout_microseconds`, or the request's own
    /// `timeout` where `allow_timeout_override`).
    deadline: Option<Instant>,
    action: TimeoutAction,
}

#[derive(Debug)]
pub struct Batcher {
    /// One queue per priority level, highest first (a single queue without priority levels),
    /// then the queue of delayed requests (timed out under `timeout_action: DELAY`).
    levels: Vec<VecDeque<Entry>>,
    /// Each level's policy (same order as `levels`, without the delayed queue).
    policies: Vec<QueuePolicy>,
    default_level: usize,
    /// Largest batch, in items (1 when batching is off: each request goes alone).
    max_items: usize,
    dynamic: bool,
    preferred: Vec<usize>,
    max_delay: Duration,
    /// The engine's hard bound over all levels.
    capacity: usize,
    len: usize,
    /// How many queued requests have a timeout: with none, the timeout checks that run on every
    /// scheduler turn visit nothing.
    with_deadline: usize,
}

impl Batcher {
    pub fn new(policy: &ModelPolicy) -> Self {
        let (dynamic, preferred, max_delay, policies, default_level) = match &policy.scheduler {
            SchedulerPolicy::Dynamic(d) if !policy.decoupled => {
                let levels = d.priority_levels.max(1) as usize;
                let policies: Vec<QueuePolicy> = (1..=levels as u64)
                    .map(|l| {
                        d.priority_queue_policy
                            .iter()
                            .find(|(k, _)| *k == l)
                            .map(|(_, q)| q.clone())
                            .unwrap_or_else(|| d.default_queue_policy.clone())
                    })
                    .collect();
                let default_level = (d.default_priority_level.max(1) as usize).min(levels) - 1;
                let mut pref = d.preferred_batch_sizes.clone();
                pref.sort_unstable();
                (policy.batches(), pref, d.max_queue_delay, policies, default_level)
            }
            _ => (false, Vec::new(), Duration::ZERO, vec![QueuePolicy::default()], 0),
        };
        Batcher {
            levels: (0..=policies.len()).map(|_| VecDeque::new()).collect(),
            policies,
            default_level,
            max_items: if dynamic { policy.max_batch_size.max(1) } else { 1 },
            dynamic,
            preferred,
            max_delay,
            capacity: policy.queue_capacity,
            len: 0,
            with_deadline: 0,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The request's level: its `priority` (1 = highest; 0 = the default level; past the
    /// lowest level = the lowest).
    fn level_of(&self, p: &Pending) -> usize {
        match p.request.priority {
            0 => self.default_level,
            n => (n as usize - 1).min(self.policies.len() - 1),
        }
    }

    /// Queues a request, or hands it back (boxed: the rare path pays for the move) when its
    /// queue is full (`max_queue_size`, or the engine's bound).
    pub fn push(&mut self, p: Pending) -> Result<(), Box<Pending>> {
        let level = self.level_of(&p);
        let policy = &self.policies[level];
        let level_full = policy.max_queue_size > 0 && self.levels[level].len() >= policy.max_queue_size;
        if level_full || self.len >= self.capacity {
            return Err(Box::new(p));
        }
        let timeout = match (policy.allow_timeout_override, p.request.timeout_us) {
            (true, us) if us > 0 => Some(Duration::from_micros(us)),
            _ => policy.default_timeout,
        };
        let deadline = timeout.map(|t| p.enqueued + t);
        let action = policy.timeout_action;
        self.with_deadline += usize::from(deadline.is_some());
        self.levels[level].push_back(Entry { p, deadline, action });
        self.len += 1;
        Ok(())
    }

    fn entries(&self) -> impl Iterator<Item = &Entry> {
        self.levels.iter().flatten()
    }

    fn pop_front(&mut self) -> Option<Pending> {
        let q = self.levels.iter_mut().find(|q| !q.is_empty())?;
        self.len -= 1;
        let e = q.pop_front()?;
        self.with_deadline -= usize::from(e.deadline.is_some());
        Some(e.p)
    }

    /// Removes every queued request (for failing them when no instance is left).
    pub fn drain_all(&mut self) -> Vec<Pending> {
        self.len = 0;
        self.with_deadline = 0;
        self.levels.iter_mut().flat_map(|q| q.drain(..)).map(|e| e.p).collect()
    }

    fn take_where(&mut self, gone: impl Fn(&Entry) -> bool) -> Vec<Pending> {
        let mut out = Vec::new();
        for q in &mut self.levels {
            if !q.iter().any(&gone) {
                continue;
            }
            let (g, keep): (VecDeque<Entry>, VecDeque<Entry>) = q.drain(..).partition(|e| gone(e));
            *q = keep;
            self.with_deadline -= g.iter().filter(|e| e.deadline.is_some()).count();
            out.extend(g.into_iter().map(|e| e.p));
        }
        self.len -= out.len();
        out
    }

    /// Removes queued requests whose client has gone.
    pub fn take_cancelled(&mut self) -> Vec<Pending> {
        self.take_where(|e| e.p.reply.is_closed())
    }

    /// Applies the queue policies at `now`: requests past their timeout under REJECT are
    /// removed (returned, to be failed); under DELAY they move behind every request that has
    /// not timed out.
    pub fn take_expired(&mut self, now: Instant) -> Vec<Pending> {
        if self.with_deadline == 0 {
            return Vec::new();
        }
        let expired = |e: &Entry| e.deadline.is_some_and(|d| d <= now);
        let rejected = self.take_where(|e| expired(e) && e.action == TimeoutAction::Reject);
        let delayed_level = self.levels.len() - 1;
        for level in 0..delayed_level {
            let q = &mut self.levels[level];
            if !q.iter().any(expired) {
                continue;
            }
            let (late, keep): (VecDeque<Entry>, VecDeque<Entry>) = q.drain(..).partition(|e| expired(e));
            *q = keep;
            self.with_deadline -= late.len();
            self.levels[delayed_level].extend(late.into_iter().map(|mut e| {
                e.deadline = None;
                e
            }));
        }
        rejected
    }

    /// The earliest timeout still to come, for the scheduler's timer.
    pub fn next_deadline(&self) -> Option<Instant> {
        if self.with_deadline == 0 {
            return None;
        }
        self.entries().filter_map(|e| e.deadline).min()
    }

    fn compatible(a: &Pending, b: &Pending) -> bool {
        a.request.inputs.len() == b.request.inputs.len()
            && a.request.inputs.iter().all(|ta| {
                b.request
                    .input(&ta.name)
                    .is_some_and(|tb| ta.datatype == tb.datatype && ta.shape.get(1..) == tb.shape.get(1..))
            })
    }

    /// The next batch, if one should go now. Requests are taken in priority order, as Triton's
    /// dynamic batcher takes them:
    /// - a preferred size reachable from the head goes at once, the largest one, while the head's delay runs
    ///   (also past the largest preferred size: what stays under it);
    /// - once the head waited `max_delay`, or the batch cannot grow (`max_batch_size`, a request of another
    ///   shape, the largest preferred size reached), everything that fits goes;
    /// - else it waits for the head's delay.
    ///
    /// `idle`: no instance is executing and the load is not concurrent, so a lone request goes
    /// at once: no other request is in the server to join it, and waiting `max_delay` would
    /// only add latency.
    pub fn next(&mut self, now: Instant, idle: bool) -> Next {
        match self.plan(now, idle) {
            Plan::Empty => Next::Empty,
            Plan::WaitUntil(at) => Next::WaitUntil(at),
            Plan::Take(count) => Next::Batch((0..count).map(|_| self.pop_front().expect("counted")).collect()),
        }
    }

    /// Whether `next` would send a batch now while an instance executes (`idle` false), without
    /// taking it: for a submitter whose request may complete the batch an instance waits for.
    pub fn ready(&self, now: Instant) -> bool {
        matches!(self.plan(now, false), Plan::Take(_))
    }

    /// What `next` does: how many requests from the head go now, or until when to wait.
    fn plan(&self, now: Instant, idle: bool) -> Plan {
        let Some(head) = self.entries().next().map(|e| &e.p) else { return Plan::Empty };
        if !self.dynamic {
            return Plan::Take(1);
        }
        let max_preferred = self.preferred.last().copied();
        // Count how many requests from the head can join one batch, and the longest prefix of
        // them to send within the delay (a preferred size, or what stays under the largest).
        let mut items = 0usize;
        let mut count = 0usize;
        let mut blocked = false;
        let mut within_delay = None;
        for p in self.entries().map(|e| &e.p) {
            if count > 0 && !Self::compatible(head, p) {
                blocked = true;
                break;
            }
            if items + p.batch_size > self.max_items {
                blocked = true;
                break;
            }
            if count > 0 && within_delay.is_none() && max_preferred.is_some_and(|m| items + p.batch_size > m) {
                within_delay = Some(count);
            }
            items += p.batch_size;
            count += 1;
            if self.preferred.binary_search(&items).is_ok() {
                within_delay = Some(count);
            }
        }
        let deadline = head.enqueued + self.max_delay;
        let late = !self.max_delay.is_zero() && now >= deadline;
        if let (Some(n), false) = (within_delay, late) {
            count = n;
        } else {
            let full = blocked || items >= self.max_items || max_preferred.is_some_and(|m| items >= m);
            let lone = idle && count == 1 && self.len() == 1;
            if !(full || late || lone || self.max_delay.is_zero()) {
                return Plan::WaitUntil(deadline);
            }
        }
        Plan::Take(count)
    }
}

/// The batcher's decision before it takes anything (`Batcher::plan`).
enum Plan {
    Empty,
    Take(usize),
    WaitUntil(Instant),
}

impl Queue for Batcher {
    fn push(&mut self, p: Pending) -> Result<(), Refused> {
        Batcher::push(self, p).map_err(|p| Box::new((*p, Error::unavailable("Exceeds maximum queue size"))))
    }

    fn requeue(&mut self, p: Pending) -> Result<(), Refused> {
        Batcher::push(self, p).map_err(|p| Box::new((*p, Error::unavailable("instance lost and the queue is full"))))
    }

    /// The dynamic batcher serves any free instance.
    fn next(&mut self, _instance: usize, now: Instant, idle: bool) -> Next {
        Batcher::next(self, now, idle)
    }

    fn take_cancelled(&mut self) -> Vec<Pending> {
        Batcher::take_cancelled(self)
    }

    fn take_expired(&mut self, now: Instant) -> Vec<Pending> {
        Batcher::take_expired(self, now)
    }

    fn next_deadline(&self) -> Option<Instant> {
        Batcher::next_deadline(self)
    }

    fn drain_all(&mut self) -> Vec<Pending> {
        Batcher::drain_all(self)
    }

    fn len(&self) -> usize {
        self.len
    }
}

/// The batcher of a model whose instances take their next batch themselves when they finish
/// (`lane::Lane::pull`): the scheduler actor and the instances share it under one lock, each
/// call of the scheduler's taking the lock for that call alone.
#[derive(Debug, Clone)]
pub struct SharedBatcher(pub(crate) Arc<Mutex<Batcher>>);

impl Queue for SharedBatcher {
    fn push(&mut self, p: Pending) -> Result<(), Refused> {
        Queue::push(&mut *self.0.lock(), p)
    }

    fn requeue(&mut self, p: Pending) -> Result<(), Refused> {
        self.0.lock().requeue(p)
    }

    fn next(&mut self, instance: usize, now: Instant, idle: bool) -> Next {
        Queue::next(&mut *self.0.lock(), instance, now, idle)
    }

    fn take_cancelled(&mut self) -> Vec<Pending> {
        self.0.lock().take_cancelled()
    }

    fn take_expired(&mut self, now: Instant) -> Vec<Pending> {
        self.0.lock().take_expired(now)
    }

    fn next_deadline(&self) -> Option<Instant> {
        self.0.lock().next_deadline()
    }

    fn drain_all(&mut self) -> Vec<Pending> {
        self.0.lock().drain_all()
    }

    fn len(&self) -> usize {
        self.0.lock().len()
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::policy::{DynamicBatchPolicy, IoSpec, QueuePolicy, TimeoutAction, DEFAULT_QUEUE_CAPACITY};
    use crate::request::{InferRequest, Reply};
    use crate::tensor::{DataType, Tensor};

    fn policy(dynamic: Option<DynamicBatchPolicy>) -> ModelPolicy {
        ModelPolicy {
            name: "m".into(),
            version: 1,
            max_batch_size: 8,
            inputs: vec![IoSpec::new("IN", DataType::F32, vec![-1])],
            outputs: vec![],
            instances: vec![],
            scheduler: dynamic.map(SchedulerPolicy::Dynamic).unwrap_or(SchedulerPolicy::Direct),
            decoupled: false,
            queue_capacity: DEFAULT_QUEUE_CAPACITY,
            warmup: Vec::new(),
            response_cache: false,
        }
    }

    fn pending(batch: i64, width: i64, at: Instant) -> Pending {
        let t =
            Tensor::new("IN", DataType::F32, vec![batch, width], Bytes::from(vec![0u8; (batch * width * 4) as usize]));
        let (reply, rx) = Reply::once();
        std::mem::forget(rx);
        Pending {
            request: InferRequest::new("m", vec![t]),
            reply,
            enqueued: at,
            batch_size: batch as usize,
            sequence: None,
            cache: None,
        }
    }

    fn sizes(n: Next) -> Vec<usize> {
        match n {
            Next::Batch(b) => b.iter().map(|p| p.batch_size).collect(),
            other => panic!("expected a batch, got {other:?}"),
        }
    }

    #[test]
    fn direct_sends_one_request_at_a_time() {
        let mut b = Batcher::new(&policy(None));
        let now = Instant::now();
        b.push(pending(2, 4, now)).unwrap();
        b.push(pending(3, 4, now)).unwrap();
        assert_eq!(sizes(b.next(now, false)), vec![2]);
        assert_eq!(sizes(b.next(now, false)), vec![3]);
        assert!(matches!(b.next(now, false), Next::Empty));
    }

    #[test]
    fn waits_up_to_the_delay_then_sends_what_it_has() {
        let delay = Duration::from_millis(5);
        let mut b = Batcher::new(&policy(Some(DynamicBatchPolicy { max_queue_delay: delay, ..Default::default() })));
        let t0 = Instant::now();
        b.push(pending(1, 4, t0)).unwrap();
        match b.next(t0, false) {
            Next::WaitUntil(at) => assert_eq!(at, t0 + delay),
            other => panic!("{other:?}"),
        }
        b.push(pending(2, 4, t0)).unwrap();
        assert_eq!(sizes(b.next(t0 + delay, false)), vec![1, 2]);
    }

    #[test]
    fn ready_says_whether_a_batch_would_go_now_and_takes_nothing() {
        let mut b = preferring_four();
        let t0 = Instant::now();
        assert!(!b.ready(t0), "nothing queued");
        for n in 1..=4 {
            b.push(pending(1, 4, t0)).unwrap();
            assert_eq!(b.ready(t0), n == 4, "a preferred size of 4 goes at once; {n} waits");
        }
        assert_eq!(b.len(), 4, "ready takes nothing");
        assert_eq!(sizes(b.next(t0, false)).len(), 4);
        b.push(pending(1, 4, t0)).unwrap();
        assert!(!b.ready(t0) && b.ready(t0 + Duration::from_secs(10)), "a lone request goes once its delay ran");
    }

    #[test]
    fn a_lone_request_on_an_idle_model_goes_at_once() {
        let delay = Duration::from_millis(5);
        let mut b = Batcher::new(&policy(Some(DynamicBatchPolicy { max_queue_delay: delay, ..Default::default() })));
        let t0 = Instant::now();
        b.push(pending(1, 4, t0)).unwrap();
        assert_eq!(sizes(b.next(t0, true)), vec![1], "nothing executing, nothing else queued");
        b.push(pending(2, 4, t0)).unwrap();
        b.push(pending(3, 4, t0)).unwrap();
        assert!(matches!(b.next(t0, true), Next::WaitUntil(_)), "two queued: they wait for more to join");
        assert_eq!(sizes(b.next(t0 + delay, true)), vec![2, 3]);
    }

    #[test]
    fn never_batches_mixed_shapes_or_past_max_batch_size() {
        let mut b = Batcher::new(&policy(Some(DynamicBatchPolicy::default())));
        let now = Instant::now();
        b.push(pending(1, 4, now)).unwrap();
        b.push(pending(1, 5, now)).unwrap();
        assert_eq!(sizes(b.next(now, false)), vec![1]);
        assert_eq!(sizes(b.next(now, false)), vec![1]);
        for _ in 0..3 {
            b.push(pending(3, 4, now)).unwrap();
        }
        assert_eq!(sizes(b.next(now, false)), vec![3, 3]);
    }

    /// Batches of up to 8 items, 4 preferred, a delay of 10 s.
    fn preferring_four() -> Batcher {
        Batcher::new(&policy(Some(DynamicBatchPolicy {
            preferred_batch_sizes: vec![4],
            max_queue_delay: Duration::from_secs(10),
            ..Default::default()
        })))
    }

    #[test]
    fn a_preferred_size_goes_at_once_and_a_late_batch_takes_all_that_waits() {
        let mut b = preferring_four();
        let now = Instant::now();
        for _ in 0..4 {
            b.push(pending(1, 4, now)).unwrap();
        }
        assert_eq!(sizes(b.next(now, false)).len(), 4);
        // 5 queued, max 8, preferred 4: the preferred size goes at once, as in Triton...
        for _ in 0..5 {
            b.push(pending(1, 4, now)).unwrap();
        }
        assert_eq!(sizes(b.next(now, false)).len(), 4);
        // ...and what is left waits for the head's delay.
        b.push(pending(1, 4, now)).unwrap();
        assert!(matches!(b.next(now, false), Next::WaitUntil(_)));
        assert_eq!(sizes(b.next(now + Duration::from_secs(10), false)).len(), 2);
        // Requests that waited past the delay (behind a busy instance) all go, not the preferred
        // size: Triton's batcher sends what is pending once the delay is exceeded.
        for _ in 0..6 {
            b.push(pending(1, 4, now)).unwrap();
        }
        assert_eq!(sizes(b.next(now + Duration::from_secs(10), false)), vec![1; 6]);
    }

    #[test]
    fn past_the_largest_preferred_size_what_stays_under_it_goes_within_the_delay() {
        let mut b = preferring_four();
        let now = Instant::now();
        // Requests of 3 items: 3 is not preferred and 6 is past 4, so the first goes alone.
        for _ in 0..2 {
            b.push(pending(3, 4, now)).unwrap();
        }
        assert_eq!(sizes(b.next(now, false)), vec![3]);
        // A lone one under the largest preferred size waits for company.
        assert!(matches!(b.next(now, false), Next::WaitUntil(_)));
    }

    #[test]
    fn rejects_when_full() {
        let mut p = policy(Some(DynamicBatchPolicy::default()));
        if let SchedulerPolicy::Dynamic(d) = &mut p.scheduler {
            d.default_queue_policy.max_queue_size = 1;
        }
        let mut b = Batcher::new(&p);
        let now = Instant::now();
        b.push(pending(1, 4, now)).unwrap();
        assert!(b.push(pending(1, 4, now)).is_err());
    }

    fn with_priority(mut p: Pending, priority: u64, timeout_us: u64) -> Pending {
        p.request.priority = priority;
        p.request.timeout_us = timeout_us;
        p
    }

    fn prio_policy() -> ModelPolicy {
        let reject = QueuePolicy {
            timeout_action: TimeoutAction::Reject,
            default_timeout: Some(Duration::from_millis(10)),
            allow_timeout_override: true,
            max_queue_size: 2,
        };
        policy(Some(DynamicBatchPolicy {
            priority_levels: 2,
            default_priority_level: 2,
            priority_queue_policy: vec![(1, reject)],
            ..Default::default()
        }))
    }

    #[test]
    fn higher_priority_goes_first_and_levels_have_their_own_bounds() {
        let mut b = Batcher::new(&prio_policy());
        let now = Instant::now();
        b.push(with_priority(pending(1, 4, now), 0, 0)).unwrap(); // default = level 2
        b.push(with_priority(pending(2, 4, now), 1, 0)).unwrap();
        b.push(with_priority(pending(3, 4, now), 9, 0)).unwrap(); // past the lowest = level 2
        assert_eq!(sizes(b.next(now, false)), vec![2, 1, 3], "level 1 first, then level 2 in order");
        b.push(with_priority(pending(1, 4, now), 1, 0)).unwrap();
        b.push(with_priority(pending(1, 4, now), 1, 0)).unwrap();
        assert!(b.push(with_priority(pending(1, 4, now), 1, 0)).is_err(), "level 1 holds 2");
        assert!(b.push(with_priority(pending(1, 4, now), 2, 0)).is_ok(), "level 2 is unbounded");
    }

    #[test]
    fn timeouts_reject_or_delay_per_policy_and_may_be_overridden() {
        let mut b = Batcher::new(&prio_policy());
        let t0 = Instant::now();
        b.push(with_priority(pending(1, 4, t0), 1, 0)).unwrap(); // default 10 ms, REJECT
        b.push(with_priority(pending(2, 4, t0), 1, 50_000)).unwrap(); // its own 50 ms
        assert_eq!(b.next_deadline(), Some(t0 + Duration::from_millis(10)));
        let gone = b.take_expired(t0 + Duration::from_millis(20));
        assert_eq!(gone.iter().map(|p| p.batch_size).collect::<Vec<_>>(), vec![1]);
        assert_eq!(b.len(), 1);

        let mut p = prio_policy();
        if let SchedulerPolicy::Dynamic(d) = &mut p.scheduler {
            d.priority_queue_policy[0].1.timeout_action = TimeoutAction::Delay;
        }
        let mut b = Batcher::new(&p);
        b.push(with_priority(pending(1, 4, t0), 1, 0)).unwrap(); // times out: delayed
        b.push(with_priority(pending(2, 4, t0 + Duration::from_millis(15)), 2, 0)).unwrap();
        assert!(b.take_expired(t0 + Duration::from_millis(20)).is_empty(), "DELAY keeps the request");
        assert_eq!(
            sizes(b.next(t0 + Duration::from_millis(20), false)),
            vec![2, 1],
            "behind every request that has not timed out"
        );
    }
}
