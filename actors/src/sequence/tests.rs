//! The sequence batcher on its own, where the actors' tests cannot look: what a burst of
//! cancelled STARTs leaves in the backlog, and where the sweep for cancelled requests looks.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::SequenceBatcher;
use crate::clock::SystemClock;
use crate::figures::ModelFigures;
use crate::policy::{
    ControlKind, ControlSpec, IoSpec, ModelPolicy, SchedulerPolicy, SequencePolicy, SequenceStrategy,
    DEFAULT_QUEUE_CAPACITY,
};
use crate::protocol::Pending;
use crate::request::{CorrelationId, InferRequest, Reply, SequenceFlags};
use crate::tensor::{DataType, Tensor};
use crate::{InstanceKind, InstanceSpec};

/// A `direct` sequence model of one instance with one slot, and its sequence policy.
pub(crate) fn policies() -> (ModelPolicy, SequencePolicy) {
    let sequence = SequencePolicy {
        strategy: SequenceStrategy::Direct,
        max_idle: Duration::from_secs(60),
        controls: vec![ControlSpec {
            kind: ControlKind::Start,
            input: "START".into(),
            datatype: DataType::I32,
            false_value: 0i32.to_le_bytes().to_vec(),
            true_value: 1i32.to_le_bytes().to_vec(),
        }],
        states: Vec::new(),
        max_backlog: 100_000,
        start_grace: Duration::ZERO,
        max_state_bytes: None,
        iterative: false,
    };
    let model = ModelPolicy {
        name: "acc".into(),
        version: 1,
        max_batch_size: 1,
        inputs: vec![IoSpec::new("IN", DataType::I32, vec![1])],
        outputs: vec![IoSpec::new("OUT", DataType::I32, vec![1])],
        instances: vec![InstanceSpec {
            name: "acc_0_0".into(),
            index: 0,
            kind: InstanceKind::Cpu,
            device: None,
            cpu_cores: Vec::new(),
            rate_limiter: Default::default(),
        }],
        scheduler: SchedulerPolicy::Sequence(sequence.clone()),
        decoupled: false,
        queue_capacity: DEFAULT_QUEUE_CAPACITY,
        warmup: Vec::new(),
        response_cache: false,
    };
    (model, sequence)
}

type Client = tokio::sync::oneshot::Receiver<crate::Result<crate::InferResponse>>;

/// A START of sequence `id`, and the receiver whose drop is the client going away.
fn start(id: u64) -> (Pending, Client) {
    request(id, true)
}

fn request(id: u64, start: bool) -> (Pending, Client) {
    let data = Bytes::from(1i32.to_le_bytes().to_vec());
    let mut request = InferRequest::new("acc", vec![Tensor::new("IN", DataType::I32, vec![1, 1], data)]);
    request.sequence = Some(SequenceFlags { id: CorrelationId::U64(id), start, end: false });
    let (reply, rx) = Reply::once();
    let p = Pending { request, reply, enqueued: std::time::Instant::now(), batch_size: 1, sequence: None, cache: None };
    (p, rx)
}

#[test]
fn cancelled_starts_in_the_backlog_leave_nothing_behind() {
    let (model, sequence) = policies();
    let figures = Arc::new(ModelFigures::new(1));
    let mut b = SequenceBatcher::new(&model, &sequence, figures.clone(), Arc::new(SystemClock));
    // Sequence 1 holds the only slot for good.
    let (first, _keep) = start(1);
    b.push(first).unwrap();
    for round in 0..3u64 {
        let clients: Vec<_> = (0..10_000)
            .map(|i| {
                let (p, rx) = start(1_000 + round * 10_000 + i);
                b.push(p).unwrap();
                rx
            })
            .collect();
        assert_eq!(figures.sequence.snapshot().backlog, 10_000);
        assert_eq!(b.backlog.len(), 10_000);
        drop(clients);
        assert_eq!(b.take_cancelled().len(), 10_000, "round {round}");
        assert_eq!((figures.sequence.snapshot().backlog, figures.sequence.snapshot().active), (0, 1));
        assert_eq!((b.backlog.len(), b.sequences.len(), b.queued), (0, 1, 1), "round {round}");
        assert!(b.backlog.capacity() <= 256, "the backlog's room is given back: {}", b.backlog.capacity());
        assert!(b.sequences.capacity() <= 256, "the table's room is given back: {}", b.sequences.capacity());
    }
}

#[test]
fn the_cancel_sweep_finds_requests_queued_running_ready_and_backlogged() {
    let (model, sequence) = policies();
    let figures = Arc::new(ModelFigures::new(1));
    let mut b = SequenceBatcher::new(&model, &sequence, figures, Arc::new(SystemClock));
    let now = std::time::Instant::now();
    // Sequence 1 holds the only slot and runs its START.
    let (first, _client) = start(1);
    b.push(first).unwrap();
    assert!(matches!(b.next(0, now), crate::protocol::Next::Batch(batch) if batch.len() == 1));
    // Its next turn waits behind the running one, and sequence 2 waits in the backlog; both
    // clients go away.
    let (behind, gone) = request(1, false);
    b.push(behind).unwrap();
    drop(gone);
    let (backlogged, gone) = start(2);
    b.push(backlogged).unwrap();
    drop(gone);
    assert_eq!(b.take_cancelled().len(), 2);
    assert_eq!((b.queued, b.backlog.len(), b.sequences.len()), (0, 0, 1));
    // Sequence 1 is idle; a turn of it ready to run goes away too, and the sequence stays.
    assert!(b.finished(0, now).is_empty());
    let (ready, gone) = request(1, false);
    b.push(ready).unwrap();
    drop(gone);
    assert_eq!(b.take_cancelled().len(), 1);
    assert_eq!((b.queued, b.sequences.len()), (0, 1));
    assert!(matches!(b.next(0, now), crate::protocol::Next::Empty));
}

/// An `oldest` model of one instance, batches of up to 8 with 4 preferred, a delay of 60 s.
pub(crate) fn oldest_policies() -> (ModelPolicy, SequencePolicy) {
    let (mut model, mut sequence) = policies();
    sequence.strategy = SequenceStrategy::Oldest {
        max_candidate_sequences: 64,
        preferred_batch_sizes: vec![4],
        max_queue_delay: Duration::from_secs(60),
    };
    model.max_batch_size = 8;
    model.scheduler = SchedulerPolicy::Sequence(sequence.clone());
    (model, sequence)
}

#[test]
fn ready_says_whether_the_oldest_strategy_would_send_a_batch_now_and_takes_nothing() {
    let (model, sequence) = oldest_policies();
    let mut b = SequenceBatcher::new(&model, &sequence, Arc::new(ModelFigures::new(1)), Arc::new(SystemClock));
    let now = std::time::Instant::now();
    assert!(!b.ready(0, now), "nothing queued");
    let mut clients = Vec::new();
    for id in 1..=4 {
        let (p, rx) = start(id);
        b.push(p).unwrap();
        clients.push(rx);
        assert_eq!(b.ready(0, now), id == 4, "a preferred size of 4 goes at once; {id} waits");
        if id < 4 {
            assert!(matches!(b.next(0, now), crate::protocol::Next::WaitUntil(_)), "`next` agrees");
        }
    }
    assert_eq!(b.queued, 4, "ready takes nothing");
    assert!(matches!(b.next(0, now), crate::protocol::Next::Batch(batch) if batch.len() == 4));
    let (p, _rx) = start(5);
    b.push(p).unwrap();
    assert!(!b.ready(0, now) && b.ready(0, now + Duration::from_secs(61)), "a lone request goes once its delay ran");

    // `direct` has no delay: a sequence with a request ready goes at once.
    let (model, sequence) = policies();
    let mut b = SequenceBatcher::new(&model, &sequence, Arc::new(ModelFigures::new(1)), Arc::new(SystemClock));
    let (p, _rx) = start(1);
    b.push(p).unwrap();
    assert!(b.ready(0, now));
}
