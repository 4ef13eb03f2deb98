//! The batcher: which queued requests form the next batch, and when. A plain struct that the
//! scheduler actor drives; it holds no threads and no timers of its own.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use crate::instance::Pending;
use crate::policy::{ModelPolicy, SchedulerPolicy};

/// What the batcher says when asked for work.
#[derive(Debug)]
pub enum Next {
    /// Send these requests as one execution now.
    Batch(Vec<Pending>),
    /// A batch could still grow; ask again at this instant.
    WaitUntil(Instant),
    /// Nothing queued.
    Empty,
}

#[derive(Debug)]
pub struct Batcher {
    queue: VecDeque<Pending>,
    /// Largest batch, in items (1 when batching is off: each request goes alone).
    max_items: usize,
    dynamic: bool,
    preferred: Vec<usize>,
    max_delay: Duration,
    capacity: usize,
}

impl Batcher {
    pub fn new(policy: &ModelPolicy) -> Self {
        let (dynamic, preferred, max_delay, capacity) = match &policy.scheduler {
            SchedulerPolicy::Dynamic(d) if policy.batches() && !policy.decoupled => {
                let cap = match d.default_queue_policy.max_queue_size {
                    0 => policy.queue_capacity,
                    n => n.min(policy.queue_capacity),
                };
                let mut pref = d.preferred_batch_sizes.clone();
                pref.sort_unstable();
                (true, pref, d.max_queue_delay, cap)
            }
            _ => (false, Vec::new(), Duration::ZERO, policy.queue_capacity),
        };
        Batcher {
            queue: VecDeque::new(),
            max_items: if dynamic { policy.max_batch_size.max(1) } else { 1 },
            dynamic,
            preferred,
            max_delay,
            capacity,
        }
    }

    pub fn len(&self) -> usize {
        self.queue.len()
    }

    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// Queues a request, or hands it back when the queue is full.
    pub fn push(&mut self, p: Pending) -> Result<(), Pending> {
        if self.queue.len() >= self.capacity {
            return Err(p);
        }
        self.queue.push_back(p);
        Ok(())
    }

    /// Removes every queued request (for failing them when no instance is left).
    pub fn drain_all(&mut self) -> Vec<Pending> {
        self.queue.drain(..).collect()
    }

    /// Removes queued requests whose client has gone.
    pub fn take_cancelled(&mut self) -> Vec<Pending> {
        let (gone, keep): (VecDeque<Pending>, VecDeque<Pending>) =
            self.queue.drain(..).partition(|p| p.reply.is_closed());
        self.queue = keep;
        gone.into_iter().collect()
    }

    fn compatible(a: &Pending, b: &Pending) -> bool {
        a.request.inputs.len() == b.request.inputs.len()
            && a.request.inputs.iter().all(|ta| {
                b.request
                    .input(&ta.name)
                    .is_some_and(|tb| ta.datatype == tb.datatype && ta.shape.get(1..) == tb.shape.get(1..))
            })
    }

    /// The next batch, if one should go now.
    pub fn next(&mut self, now: Instant) -> Next {
        let Some(head) = self.queue.front() else { return Next::Empty };
        if !self.dynamic {
            return Next::Batch(vec![self.queue.pop_front().unwrap()]);
        }
        // Count how many requests from the head can join one batch.
        let mut items = 0usize;
        let mut count = 0usize;
        let mut blocked = false;
        for p in self.queue.iter() {
            if count > 0 && !Self::compatible(head, p) {
                blocked = true;
                break;
            }
            if items + p.batch_size > self.max_items {
                blocked = true;
                break;
            }
            items += p.batch_size;
            count += 1;
        }
        let deadline = head.enqueued + self.max_delay;
        let full = items >= self.max_items || blocked;
        let preferred_hit = self.preferred.binary_search(&items).is_ok();
        let ready = full || preferred_hit || self.max_delay.is_zero() || now >= deadline;
        if !ready {
            return Next::WaitUntil(deadline);
        }
        // With preferred sizes, send the largest preferred size reachable now, if any.
        if !preferred_hit && !full && !self.preferred.is_empty() {
            let mut acc = 0usize;
            let mut best = None;
            for (i, p) in self.queue.iter().take(count).enumerate() {
                acc += p.batch_size;
                if self.preferred.binary_search(&acc).is_ok() {
                    best = Some(i + 1);
                }
            }
            if let Some(n) = best {
                count = n;
            }
        }
        Next::Batch(self.queue.drain(..count).collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::policy::{DynamicBatchPolicy, IoSpec, DEFAULT_QUEUE_CAPACITY};
    use crate::request::{InferRequest, Reply};
    use crate::tensor::{DataType, Tensor};
    use bytes::Bytes;

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
        }
    }

    fn pending(batch: i64, width: i64, at: Instant) -> Pending {
        let t = Tensor::new("IN", DataType::F32, vec![batch, width], Bytes::from(vec![0u8; (batch * width * 4) as usize]));
        let (reply, rx) = Reply::once();
        std::mem::forget(rx);
        Pending { request: InferRequest::new("m", vec![t]), reply, enqueued: at, batch_size: batch as usize, sequence: None }
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
        assert_eq!(sizes(b.next(now)), vec![2]);
        assert_eq!(sizes(b.next(now)), vec![3]);
        assert!(matches!(b.next(now), Next::Empty));
    }

    #[test]
    fn waits_up_to_the_delay_then_sends_what_it_has() {
        let delay = Duration::from_millis(5);
        let mut b = Batcher::new(&policy(Some(DynamicBatchPolicy { max_queue_delay: delay, ..Default::default() })));
        let t0 = Instant::now();
        b.push(pending(1, 4, t0)).unwrap();
        match b.next(t0) {
            Next::WaitUntil(at) => assert_eq!(at, t0 + delay),
            other => panic!("{other:?}"),
        }
        b.push(pending(2, 4, t0)).unwrap();
        assert_eq!(sizes(b.next(t0 + delay)), vec![1, 2]);
    }

    #[test]
    fn never_batches_mixed_shapes_or_past_max_batch_size() {
        let mut b = Batcher::new(&policy(Some(DynamicBatchPolicy::default())));
        let now = Instant::now();
        b.push(pending(1, 4, now)).unwrap();
        b.push(pending(1, 5, now)).unwrap();
        assert_eq!(sizes(b.next(now)), vec![1]);
        assert_eq!(sizes(b.next(now)), vec![1]);
        for _ in 0..3 {
            b.push(pending(3, 4, now)).unwrap();
        }
        assert_eq!(sizes(b.next(now)), vec![3, 3]);
    }

    #[test]
    fn preferred_size_goes_at_once_and_shapes_a_late_batch() {
        let mut b = Batcher::new(&policy(Some(DynamicBatchPolicy {
            preferred_batch_sizes: vec![4],
            max_queue_delay: Duration::from_secs(10),
            ..Default::default()
        })));
        let now = Instant::now();
        for _ in 0..4 {
            b.push(pending(1, 4, now)).unwrap();
        }
        assert_eq!(sizes(b.next(now)).len(), 4);
        for _ in 0..5 {
            b.push(pending(1, 4, now)).unwrap();
        }
        // 5 queued, max 8, preferred 4: not full and 5 is not preferred, so it waits...
        assert!(matches!(b.next(now), Next::WaitUntil(_)));
        // ...and at the deadline it sends the largest preferred size it can.
        assert_eq!(sizes(b.next(now + Duration::from_secs(10))).len(), 4);
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
}
