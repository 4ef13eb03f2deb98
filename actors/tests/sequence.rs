//! The sequence actor end to end: implicit state owned by the engine, slots and backlog, idle
//! release, and a panicking instance that loses no conversation.

mod common;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::settle;
use tritium_actors::clock::{ManualClock, SharedClock, SystemClock};
use tritium_actors::figures::SequenceSnapshot;
use tritium_actors::*;

/// OUT = (START ? 0 : ACC_IN) + IN, ACC_OUT = OUT, per batch element; panics once when an
/// input is 666 (the fault injection), and counts that panic in `panicked`; takes 300 ms when
/// an input is 500 (a long execution).
struct Accumulate {
    panicked: Arc<AtomicBool>,
}

fn i32s(t: &Tensor) -> Vec<i32> {
    t.data.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn tensor(name: &str, shape: Vec<i64>, v: &[i32]) -> Tensor {
    Tensor::new(name, DataType::I32, shape, Bytes::from(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()))
}

impl Backend for Accumulate {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        let get = |n: &str| batch.inputs.iter().find(|t| t.name == n).map(i32s).expect(n);
        let (x, start, acc) = (get("IN"), get("START"), get("ACC_IN"));
        if x.contains(&666) && !self.panicked.swap(true, Ordering::SeqCst) {
            panic!("injected fault");
        }
        if x.contains(&500) {
            std::thread::sleep(Duration::from_millis(300));
        }
        let out: Vec<i32> =
            x.iter().zip(&start).zip(&acc).map(|((x, s), a)| if *s == 1 { *x } else { a + x }).collect();
        let shape = vec![out.len() as i64, 1];
        Ok(vec![tensor("OUT", shape.clone(), &out), tensor("ACC_OUT", shape, &out)])
    }
}

fn policy(instances: usize, max_batch: usize, strategy: SequenceStrategy, idle: Duration) -> ModelPolicy {
    ModelPolicy {
        name: "acc".into(),
        version: 1,
        max_batch_size: max_batch,
        inputs: vec![IoSpec::new("IN", DataType::I32, vec![1])],
        outputs: vec![IoSpec::new("OUT", DataType::I32, vec![1])],
        instances: common::cpu_instances("acc", instances),
        scheduler: SchedulerPolicy::Sequence(SequencePolicy {
            strategy,
            max_idle: idle,
            controls: vec![ControlSpec {
                kind: ControlKind::Start,
                input: "START".into(),
                datatype: DataType::I32,
                false_value: 0i32.to_le_bytes().to_vec(),
                true_value: 1i32.to_le_bytes().to_vec(),
            }],
            states: vec![StateSpec {
                input: "ACC_IN".into(),
                output: "ACC_OUT".into(),
                datatype: DataType::I32,
                dims: vec![1],
                initial: InitialState::Zero,
            }],
            max_backlog: 2,
            start_grace: GRACE,
            max_state_bytes: None,
            iterative: false,
        }),
        decoupled: false,
        queue_capacity: policy::DEFAULT_QUEUE_CAPACITY,
        warmup: Vec::new(),
        response_cache: false,
    }
}

/// Waits (up to a second) for a figure the actors publish just after they answer.
const GRACE: Duration = Duration::from_millis(50);

/// Moves virtual time on in 5 ms steps, letting the actors (on their own thread) answer the
/// wake-ups between steps, until `done`.
async fn advance_until(clock: &ManualClock, done: impl Fn() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        clock.advance(Duration::from_millis(5));
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
}

async fn load(policy: ModelPolicy) -> (ModelHandle, Arc<AtomicBool>) {
    load_on(policy, Arc::new(SystemClock)).await
}

/// `load` on the given clock (a `ManualClock` runs the sequence actor's time on virtual time).
async fn load_on(policy: ModelPolicy, clock: SharedClock) -> (ModelHandle, Arc<AtomicBool>) {
    let panicked = Arc::new(AtomicBool::new(false));
    let p = panicked.clone();
    let factory: Arc<dyn BackendFactory> = Arc::new(move |_: &InstanceSpec| -> Result<Box<dyn Backend>> {
        Ok(Box::new(Accumulate { panicked: p.clone() }) as Box<dyn Backend>)
    });
    let engine = Engine::new();
    let model = ModelHandle::load_with_clock(&engine.handle(), policy, factory, clock).await.unwrap();
    std::mem::forget(engine); // the arbiter lives for the test
    (model, panicked)
}

fn req(id: CorrelationId, v: i32, start: bool, end: bool) -> InferRequest {
    let mut r = InferRequest::new("acc", vec![tensor("IN", vec![1, 1], &[v])]);
    r.sequence = Some(SequenceFlags { id, start, end });
    r
}

async fn send(model: &ModelHandle, id: u64, v: i32, start: bool, end: bool) -> Result<i32> {
    let r = model.infer(req(CorrelationId::U64(id), v, start, end)).await?;
    assert_eq!(r.outputs.len(), 1, "the state output is not returned to the client");
    Ok(i32s(&r.outputs[0])[0])
}

#[actix_rt::test]
async fn state_is_per_sequence_and_resets_at_start() {
    let (model, _) = load(policy(1, 4, SequenceStrategy::Direct, Duration::from_secs(5))).await;
    assert_eq!(send(&model, 1, 5, true, false).await.unwrap(), 5);
    assert_eq!(send(&model, 2, 100, true, false).await.unwrap(), 100);
    assert_eq!(send(&model, 1, 2, false, false).await.unwrap(), 7);
    assert_eq!(send(&model, 2, 1, false, false).await.unwrap(), 101);
    assert_eq!(send(&model, 1, 1, true, false).await.unwrap(), 1, "START resets the state");
    assert_eq!(send(&model, 1, 1, false, true).await.unwrap(), 2);
    let e = send(&model, 1, 1, false, false).await.unwrap_err();
    assert!(e.message.contains("must specify the START flag"), "{e}");
    // Sequence 2 still holds its slot and its state (one INT32); sequence 1 ended.
    let expected = SequenceSnapshot { active: 1, state_bytes: 4, slots_used: vec![1], ..Default::default() };
    settle(|| model.figures.sequence.snapshot() == expected).await;
    assert_eq!(model.figures.sequence.snapshot(), expected);
    model.unload().await;
}

#[actix_rt::test]
async fn a_request_that_overtakes_its_start_waits_for_it() {
    // Two unary calls of one sequence may reach the server out of order (perf_analyzer sends a
    // sequence's END while its START is in flight): the early one waits for its START.
    // Virtual time: the grace is over only when the test says so.
    let clock = ManualClock::new();
    let (model, _) = load_on(policy(1, 4, SequenceStrategy::Direct, Duration::from_secs(5)), clock.clone()).await;
    let m = Arc::new(model);
    let m2 = m.clone();
    let early = tokio::spawn(async move { send(&m2, 9, 2, false, true).await });
    tokio::time::sleep(Duration::from_millis(10)).await;
    assert!(!early.is_finished(), "held for its START");
    assert_eq!(send(&m, 9, 5, true, false).await.unwrap(), 5, "the START runs first");
    assert_eq!(early.await.unwrap().unwrap(), 7, "then the request that came early, with the START's state");
    // The slot is freed once the scheduler hears the instance finished, just after the answer.
    let ended = SequenceSnapshot { slots_used: vec![0], ..Default::default() };
    settle(|| m.figures.sequence.snapshot() == ended).await;
    assert_eq!(m.figures.sequence.snapshot(), ended, "its END ended the sequence");
    // No START within the grace: Triton's error, once the grace is over.
    let m3 = m.clone();
    let orphan = tokio::spawn(async move { send(&m3, 10, 1, false, false).await });
    settle(|| m.figures.scheduler().queue_len == 1).await;
    clock.advance(GRACE - Duration::from_millis(1));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(!orphan.is_finished(), "held until the grace is over");
    clock.advance(Duration::from_millis(1));
    let e = orphan.await.unwrap().unwrap_err();
    assert!(e.message.contains("must specify the START flag"), "{e}");
    // The figure is published when the scheduler's turn ends, just after the answer.
    settle(|| m.figures.scheduler().queue_len == 0).await;
    assert_eq!(m.figures.scheduler().queue_len, 0);
    m.unload().await;
}

#[actix_rt::test]
async fn string_ids_and_missing_ids() {
    let (model, _) = load(policy(1, 1, SequenceStrategy::Direct, Duration::from_secs(5))).await;
    let id = CorrelationId::Str("chat-7".into());
    let r = model.infer(req(id.clone(), 3, true, false)).await.unwrap();
    assert_eq!(i32s(&r.outputs[0]), vec![3]);
    let r = model.infer(req(id, 4, false, true)).await.unwrap();
    assert_eq!(i32s(&r.outputs[0]), vec![7]);
    let mut no_id = req(CorrelationId::U64(0), 1, true, false);
    no_id.sequence = None;
    let e = model.infer(no_id).await.unwrap_err();
    assert!(e.message.contains("must specify a non-zero or non-empty correlation ID"), "{e}");
    model.unload().await;
}

#[actix_rt::test]
async fn a_full_set_of_slots_backlogs_new_sequences_in_order() {
    // One instance, one slot: sequence 2 waits until sequence 1 ends, then 3 after 2.
    let (model, _) = load(policy(1, 1, SequenceStrategy::Direct, Duration::from_secs(5))).await;
    assert_eq!(send(&model, 1, 1, true, false).await.unwrap(), 1);
    let m = Arc::new(model);
    let (m2, m3) = (m.clone(), m.clone());
    let second = tokio::spawn(async move { send(&m2, 2, 10, true, true).await });
    tokio::time::sleep(Duration::from_millis(20)).await;
    let third = tokio::spawn(async move { send(&m3, 3, 20, true, true).await });
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!second.is_finished() && !third.is_finished(), "both wait for the slot");
    let waiting = SequenceSnapshot { active: 1, backlog: 2, state_bytes: 4, slots_used: vec![1], ..Default::default() };
    assert_eq!(m.figures.sequence.snapshot(), waiting);
    // The backlog holds two sequences: a third new one is refused at once.
    let e = send(&m, 4, 1, true, true).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable);
    assert!(e.message.contains("backlog is full"), "{e}");
    assert_eq!(send(&m, 1, 1, false, true).await.unwrap(), 2);
    assert_eq!(second.await.unwrap().unwrap(), 10);
    assert_eq!(third.await.unwrap().unwrap(), 20);
    assert_eq!(m.figures.sequence.snapshot().backlog, 0);
}

#[actix_rt::test]
async fn an_idle_sequence_gives_its_slot_up() {
    // Virtual time: idle for 50 ms means 50 ms of the test's clock.
    let clock = ManualClock::new();
    let (model, _) = load_on(policy(1, 1, SequenceStrategy::Direct, Duration::from_millis(50)), clock.clone()).await;
    assert_eq!(send(&model, 1, 1, true, false).await.unwrap(), 1);
    let holding = SequenceSnapshot { active: 1, state_bytes: 4, slots_used: vec![1], ..Default::default() };
    settle(|| model.figures.sequence.snapshot() == holding).await;
    clock.advance(Duration::from_millis(40));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(model.figures.sequence.snapshot(), holding, "not idle long enough yet");
    let released = SequenceSnapshot { idle_releases: 1, slots_used: vec![0], ..Default::default() };
    advance_until(&clock, || model.figures.sequence.snapshot() == released).await;
    assert_eq!(model.figures.sequence.snapshot(), released, "the slot and the state are freed");
    // Its next request is an orphan now: refused once the START grace is over.
    let model = Arc::new(model);
    let m = model.clone();
    let orphan = tokio::spawn(async move { send(&m, 1, 1, false, false).await });
    settle(|| model.figures.scheduler().queue_len == 1).await;
    advance_until(&clock, || orphan.is_finished()).await;
    let e = orphan.await.unwrap().unwrap_err();
    assert!(e.message.contains("must specify the START flag"), "{e}");
    // The freed slot serves a new sequence at once.
    assert_eq!(send(&model, 2, 4, true, true).await.unwrap(), 4);
    model.unload().await;
}

#[actix_rt::test]
async fn oldest_batches_several_sequences_into_one_execution() {
    let strategy = SequenceStrategy::Oldest {
        max_candidate_sequences: 64,
        preferred_batch_sizes: vec![8],
        max_queue_delay: Duration::from_millis(20),
    };
    let (model, _) = load(policy(1, 8, strategy, Duration::from_secs(5))).await;
    let model = Arc::new(model);
    let mut tasks = Vec::new();
    for id in 1..=16u64 {
        let m = model.clone();
        tasks.push(tokio::spawn(async move {
            let mut last = 0;
            for step in 0..5 {
                last = send(&m, id, id as i32, step == 0, step == 4).await.unwrap();
            }
            last
        }));
    }
    for (k, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap(), 5 * (k as i32 + 1), "no cross-talk between sequences");
    }
    let s = model.stats.snapshot();
    assert_eq!(s.inference_count, 80);
    assert!(
        s.execution_count < s.inference_count / 2,
        "executions {} for {} inferences",
        s.execution_count,
        s.inference_count
    );
}

/// `oldest`, batches of 4 preferred, the given delay.
fn oldest_by_four(delay: Duration) -> ModelPolicy {
    let strategy = SequenceStrategy::Oldest {
        max_candidate_sequences: 64,
        preferred_batch_sizes: vec![4],
        max_queue_delay: delay,
    };
    policy(1, 8, strategy, Duration::from_secs(5))
}

/// Sends the STARTs of sequences `ids` (each with its ID times 10) 20 ms apart.
async fn starts(
    model: &Arc<ModelHandle>,
    ids: std::ops::RangeInclusive<u64>,
) -> Vec<tokio::task::JoinHandle<Result<i32>>> {
    let mut tasks = Vec::new();
    for id in ids {
        let m = model.clone();
        tasks.push(tokio::spawn(async move { send(&m, id, 10 * id as i32, true, false).await }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    tasks
}

#[actix_rt::test]
async fn with_oldest_the_instance_waits_out_the_delay_itself_and_the_request_that_fills_the_batch_wakes_it() {
    // Real time, a delay of 60 s: the first request finds the model's one instance idle, which
    // waits for the batch on its own thread (the actor's timer not used); the fourth sequence's
    // request makes the preferred size and wakes it long before the delay ends.
    let (model, _) = load(oldest_by_four(Duration::from_secs(60))).await;
    let model = Arc::new(model);
    // A first batch; the figures below count from after it.
    for t in starts(&model, 101..=104).await {
        t.await.unwrap().unwrap();
    }
    let before = model.figures.scheduler();
    let started = std::time::Instant::now();
    let mut tasks = starts(&model, 1..=3).await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(tasks.iter().all(|t| !t.is_finished()), "three of four wait for the batch");
    tasks.extend(starts(&model, 4..=4).await);
    for (k, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap().unwrap(), 10 * (k as i32 + 1));
    }
    assert!(started.elapsed() < Duration::from_secs(30), "woken by the fourth request, not by the delay");
    let s = model.figures.scheduler();
    let took = (s.batches - before.batches, s.pulled - before.pulled, s.direct - before.direct);
    assert_eq!(took, (1, 1, 0), "the instance took the batch itself: {s:?}");
    model.unload().await;
}

#[actix_rt::test]
async fn unloading_while_the_instance_waits_out_the_oldest_delay_still_answers_the_batch() {
    let (model, _) = load(oldest_by_four(Duration::from_millis(500))).await;
    let model = Arc::new(model);
    let tasks = starts(&model, 1..=2).await;
    assert!(tasks.iter().all(|t| !t.is_finished()), "two of four wait for the batch");
    model.unload().await;
    for (k, t) in tasks.into_iter().enumerate() {
        assert_eq!(t.await.unwrap().unwrap(), 10 * (k as i32 + 1), "answered before the model went");
    }
    assert_eq!(model.stats.snapshot().execution_count, 1, "as one batch, once the delay was over");
}

#[actix_rt::test]
async fn a_panicking_instance_loses_no_conversation() {
    let clock = ManualClock::new();
    let (model, panicked) =
        load_on(policy(1, 2, SequenceStrategy::Direct, Duration::from_secs(5)), clock.clone()).await;
    assert_eq!(send(&model, 1, 10, true, false).await.unwrap(), 10);
    assert_eq!(send(&model, 2, 1, true, false).await.unwrap(), 1);
    // The fault: this request's execution panics; it gets an error, not silence, and once.
    let e = send(&model, 1, 666, false, false).await.unwrap_err();
    assert!(e.message.contains("panicked"), "{e}");
    assert!(panicked.load(Ordering::SeqCst));
    // The supervisor restarts the instance after its backoff (virtual time); both sequences go
    // on from their last state.
    settle(|| model.figures.supervisor.snapshot().restarts[0].panicked == 1).await;
    clock.advance(Duration::from_millis(50));
    settle(|| model.figures.live_instances() == 1).await;
    assert_eq!(send(&model, 1, 5, false, false).await.unwrap(), 15, "sequence 1 kept its state across the crash");
    assert_eq!(send(&model, 2, 2, false, true).await.unwrap(), 3, "sequence 2 too");
    // The retried request now runs (the fault was injected once).
    assert_eq!(send(&model, 1, 666, false, true).await.unwrap(), 681);
    model.unload().await;
}

#[actix_rt::test]
async fn a_cancelled_request_of_a_sequence_leaves_and_the_sequence_keeps_its_slot_and_state() {
    // Triton's rule: a cancelled request is dropped; its sequence lives on (until END or idle).
    let (model, _) = load(policy(1, 1, SequenceStrategy::Direct, Duration::from_secs(5))).await;
    let m = Arc::new(model);
    assert_eq!(send(&m, 1, 1, true, false).await.unwrap(), 1);
    let long = {
        let m = m.clone();
        tokio::spawn(async move { send(&m, 1, 500, false, false).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Queued behind the long one, then its client goes away.
    let cancelled = {
        let m = m.clone();
        tokio::spawn(async move { send(&m, 1, 10, false, false).await })
    };
    tokio::time::sleep(Duration::from_millis(50)).await;
    cancelled.abort();
    assert_eq!(long.await.unwrap().unwrap(), 501);
    settle(|| m.stats.snapshot().pending == 0).await;
    let held = SequenceSnapshot { active: 1, state_bytes: 4, slots_used: vec![1], ..Default::default() };
    assert_eq!(m.figures.sequence.snapshot(), held, "the sequence keeps its slot and state");
    assert_eq!(send(&m, 1, 2, false, true).await.unwrap(), 503, "the cancelled request never ran");
    settle(|| m.figures.sequence.snapshot() == SequenceSnapshot { slots_used: vec![0], ..Default::default() }).await;
    let s = m.stats.snapshot();
    assert_eq!((s.success.0, s.fail.0), (3, 1), "the cancelled request counts as failed");
}

#[actix_rt::test]
async fn past_the_state_cap_the_longest_idle_sequence_is_evicted_and_told_so() {
    // Room for the state of two sequences (one INT32 each).
    let mut p = policy(1, 4, SequenceStrategy::Direct, Duration::from_secs(5));
    if let SchedulerPolicy::Sequence(s) = &mut p.scheduler {
        s.max_state_bytes = Some(8);
    }
    let (model, _) = load(p).await;
    assert_eq!(model.figures.sequence.snapshot().state_bytes_limit, 8);
    assert_eq!(send(&model, 1, 1, true, false).await.unwrap(), 1);
    assert_eq!(send(&model, 2, 2, true, false).await.unwrap(), 2);
    assert_eq!(send(&model, 1, 10, false, false).await.unwrap(), 11);
    assert_eq!(send(&model, 3, 3, true, false).await.unwrap(), 3);
    // Sequence 2 was idle the longest: it goes, with its state.
    let after = SequenceSnapshot {
        active: 2,
        evictions: 1,
        state_bytes: 8,
        state_bytes_limit: 8,
        slots_used: vec![2],
        ..Default::default()
    };
    settle(|| model.figures.sequence.snapshot() == after).await;
    assert_eq!(model.figures.sequence.snapshot(), after);
    let e = send(&model, 2, 5, false, false).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert!(e.message.contains("sequence 2") && e.message.contains("evicted"), "{e}");
    assert!(e.message.contains("max_sequence_state_bytes (8 bytes)"), "{e}");
    assert_eq!(send(&model, 1, 100, false, false).await.unwrap(), 111, "the others keep their state");
    assert_eq!(send(&model, 3, 4, false, false).await.unwrap(), 7);
    assert_eq!(send(&model, 2, 9, true, true).await.unwrap(), 9, "a new START under the ID starts afresh");
    model.unload().await;
}

/// Decoupled and stateful: sends IN responses counting on from the state (OUT = ACC_IN + i),
/// the last with ACC_OUT = ACC_IN + IN, the state of the next request.
struct Counter;

impl Backend for Counter {
    fn execute(&mut self, _: BatchInput<'_>) -> Result<Vec<Tensor>> {
        Err(Error::unsupported("decoupled"))
    }

    fn execute_decoupled(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(Vec<Tensor>) -> Result<()>,
    ) -> Result<()> {
        let get = |n: &str| batch.inputs.iter().find(|t| t.name == n).map(i32s).expect(n)[0];
        let (n, acc) = (get("IN"), get("ACC_IN"));
        for i in 1..n {
            emit(vec![tensor("OUT", vec![1], &[acc + i])])?;
        }
        emit(vec![tensor("OUT", vec![1], &[acc + n]), tensor("ACC_OUT", vec![1], &[acc + n])])
    }
}

#[actix_rt::test]
async fn a_decoupled_sequence_model_keeps_the_state_of_its_last_response() {
    let mut p = policy(1, 0, SequenceStrategy::Direct, Duration::from_secs(5));
    p.decoupled = true;
    let factory: Arc<dyn BackendFactory> =
        Arc::new(|_: &InstanceSpec| -> Result<Box<dyn Backend>> { Ok(Box::new(Counter) as Box<dyn Backend>) });
    let engine = Engine::new();
    let model = ModelHandle::load(&engine.handle(), p, factory).await.unwrap();
    std::mem::forget(engine);
    let turn = |v: i32, start: bool| {
        let mut r = InferRequest::new("acc", vec![tensor("IN", vec![1], &[v])]);
        r.sequence = Some(SequenceFlags { id: CorrelationId::Str("chat".into()), start, end: false });
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        model.submit(r, Reply::Stream(tx)).unwrap();
        async move {
            let mut outs = Vec::new();
            while let Some(resp) = rx.recv().await {
                let resp = resp.unwrap();
                assert!(resp.outputs.iter().all(|t| t.name == "OUT"), "the state is not sent to the client");
                outs.extend(resp.outputs.iter().map(i32s).map(|v| v[0]));
                if resp.is_final {
                    break;
                }
            }
            outs
        }
    };
    assert_eq!(turn(3, true).await, vec![1, 2, 3]);
    // (The first request may find the instance not yet in the lane, just after the load.)
    let before = model.figures.scheduler();
    assert_eq!(turn(2, false).await, vec![4, 5], "the second turn goes on from the first one's state");
    assert_eq!(turn(1, true).await, vec![1], "START begins again");
    // A turn sent while the one before it still runs waits for it and goes on from its state;
    // the instance that finishes the first takes the second itself.
    let (a, b) = (turn(2, false), turn(1, false));
    assert_eq!(a.await, vec![2, 3]);
    assert_eq!(b.await, vec![4]);
    let first = model.stats.responses.first.snapshot();
    let between = model.stats.responses.between.snapshot();
    assert_eq!((first.count, between.count), (5, 4), "a first response per request, the gaps between the others");
    // Every later turn went from the submitting thread into the sequence batcher
    // (`lane::sequence`), none through the sequence actor's mailbox.
    let s = model.figures.scheduler();
    let lane = s.direct + s.pulled - before.direct - before.pulled;
    assert_eq!((lane, s.batches - before.batches), (4, 4), "{s:?}");
}
