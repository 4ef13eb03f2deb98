//! Iterative sequences end to end in the engine: a backend hands requests back to run again
//! (`Backend::take_rescheduled`), the sequence actor queues them behind the others without START
//! or END, keeps their slot, and ends the sequence when the request is answered; a request
//! without a correlation ID gets one of the batcher's own; a model that is not an iterative
//! sequence refuses the reschedule with Triton's text.

mod common;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::settle;
use tritium_actors::figures::SequenceSnapshot;
use tritium_actors::*;

fn i32s(t: &Tensor) -> Vec<i32> {
    t.data.chunks_exact(4).map(|c| i32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn tensor(name: &str, v: i32) -> Tensor {
    Tensor::new(name, DataType::I32, vec![1, 1], Bytes::copy_from_slice(&v.to_le_bytes()))
}

/// What each execution held: (correlation ID, START, END) of each request.
type Log = Arc<Mutex<Vec<Vec<(u64, bool, bool)>>>>;

/// IN = how many iterations a request takes: each execution of it is one iteration, handed
/// back until the last, which answers OUT = the iterations it ran.
struct Countdown {
    done: HashMap<u64, i32>,
    again: Vec<usize>,
    log: Log,
}

impl Backend for Countdown {
    fn execute(&mut self, _: BatchInput<'_>) -> Result<Vec<Tensor>> {
        unreachable!("the engine calls execute_each")
    }

    fn execute_each(&mut self, batch: BatchInput<'_>, _: &[usize]) -> Result<Vec<Result<Vec<Tensor>>>> {
        let mut outcomes = Vec::new();
        let mut seen = Vec::new();
        for (i, r) in batch.requests.iter().enumerate() {
            let f = r.sequence.clone().expect("a sequence request");
            let CorrelationId::U64(id) = f.id else { panic!("numeric ids") };
            seen.push((id, f.start, f.end));
            let n = i32s(r.input("IN").unwrap())[0];
            let done = self.done.entry(id).or_insert(0);
            *done += 1;
            if *done < n {
                self.again.push(i);
                outcomes.push(Ok(Vec::new()));
            } else {
                outcomes.push(Ok(vec![tensor("OUT", *done)]));
                self.done.remove(&id);
            }
        }
        self.log.lock().unwrap().push(seen);
        Ok(outcomes)
    }

    fn take_rescheduled(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.again)
    }
}

fn policy(iterative: bool) -> ModelPolicy {
    ModelPolicy {
        name: "countdown".into(),
        version: 1,
        max_batch_size: 4,
        inputs: vec![IoSpec::new("IN", DataType::I32, vec![1])],
        outputs: vec![IoSpec::new("OUT", DataType::I32, vec![1])],
        instances: common::cpu_instances("countdown", 1),
        scheduler: SchedulerPolicy::Sequence(SequencePolicy {
            strategy: SequenceStrategy::Direct,
            max_idle: Duration::from_secs(5),
            controls: Vec::new(),
            states: Vec::new(),
            max_backlog: 8,
            start_grace: Duration::ZERO,
            max_state_bytes: None,
            iterative,
        }),
        decoupled: false,
        queue_capacity: policy::DEFAULT_QUEUE_CAPACITY,
        warmup: Vec::new(),
        response_cache: false,
    }
}

async fn load(policy: ModelPolicy) -> (ModelHandle, Log) {
    let log: Log = Arc::default();
    let l = log.clone();
    let factory: Arc<dyn BackendFactory> = Arc::new(move |_: &InstanceSpec| -> Result<Box<dyn Backend>> {
        Ok(Box::new(Countdown { done: HashMap::new(), again: Vec::new(), log: l.clone() }) as Box<dyn Backend>)
    });
    let engine = Engine::new();
    let model = ModelHandle::load(&engine.handle(), policy, factory).await.unwrap();
    std::mem::forget(engine); // the arbiter lives for the test
    (model, log)
}

fn req(n: i32, sequence: Option<(u64, bool, bool)>) -> InferRequest {
    let mut r = InferRequest::new("countdown", vec![tensor("IN", n)]);
    r.sequence = sequence.map(|(id, start, end)| SequenceFlags { id: CorrelationId::U64(id), start, end });
    r
}

async fn run(model: &ModelHandle, n: i32, sequence: Option<(u64, bool, bool)>) -> Result<i32> {
    Ok(i32s(&model.infer(req(n, sequence)).await?.outputs[0])[0])
}

#[actix_rt::test]
async fn a_rescheduled_request_runs_again_without_start_until_it_is_answered() {
    let (model, log) = load(policy(true)).await;
    assert_eq!(run(&model, 3, None).await.unwrap(), 3);
    assert_eq!(run(&model, 2, Some((0, false, false))).await.unwrap(), 2, "an ID of 0 is no ID");
    assert_eq!(run(&model, 2, Some((70, true, false))).await.unwrap(), 2);
    let executions: Vec<_> = log.lock().unwrap().iter().flatten().copied().collect();
    assert_eq!(
        executions,
        [
            (1, true, false),
            (1, false, false),
            (1, false, false),
            (2, true, false),
            (2, false, false),
            (70, true, false),
            (70, false, false)
        ],
        "the batcher's own IDs count from 1; START on the first iteration only"
    );
    // Each sequence ended with its answer: no slot is held.
    let expected = SequenceSnapshot { slots_used: vec![0], ..Default::default() };
    settle(|| model.figures.sequence.snapshot() == expected).await;
    assert_eq!(model.figures.sequence.snapshot(), expected);
    let stats = model.stats.snapshot();
    assert_eq!((stats.success.0, stats.inference_count), (7, 7), "each iteration is an inference");
    model.unload().await;
}

#[actix_rt::test]
async fn concurrent_iterative_sequences_share_the_batches() {
    let (model, log) = load(policy(true)).await;
    let answers = futures::future::join_all([4, 1, 2].map(|n| run(&model, n, None))).await;
    assert_eq!(answers.into_iter().map(|a| a.unwrap()).collect::<Vec<_>>(), [4, 1, 2]);
    let executions = log.lock().unwrap().clone();
    assert!(
        executions.iter().any(|batch| batch.len() > 1),
        "iterations of several sequences batch together: {executions:?}"
    );
    assert_eq!(executions.iter().map(Vec::len).sum::<usize>(), 7);
    model.unload().await;
}

#[actix_rt::test]
async fn a_model_that_is_not_iterative_refuses_the_reschedule_with_tritons_text() {
    let (model, _) = load(policy(false)).await;
    let e = run(&model, 2, Some((5, true, false))).await.unwrap_err();
    assert_eq!(
        e.message,
        "Request is released with TRITONSERVER_REQUEST_RELEASE_RESCHEDULE, while the model is not configured to handle such a flag."
    );
    let e = run(&model, 1, None).await.unwrap_err();
    assert!(e.message.contains("must specify a non-zero or non-empty correlation ID"), "{e}");
    model.unload().await;
}

/// Decoupled: each iteration sends OUT = iterations left; the last sends it with the final flag.
struct Stream {
    left: HashMap<u64, i32>,
    again: bool,
}

impl Backend for Stream {
    fn execute(&mut self, _: BatchInput<'_>) -> Result<Vec<Tensor>> {
        unreachable!("the engine calls execute_decoupled_final")
    }

    fn execute_decoupled_final(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(Vec<Tensor>, bool) -> Result<()>,
    ) -> Result<()> {
        assert_eq!(batch.requests.len(), 1, "a decoupled model runs one request at a time");
        let r = batch.requests[0];
        let CorrelationId::U64(id) = r.sequence.as_ref().unwrap().id else { panic!("numeric ids") };
        let n = i32s(r.input("IN").unwrap())[0];
        let left = self.left.entry(id).or_insert(n);
        *left -= 1;
        let out = *left;
        self.again = out > 0;
        if out == 0 {
            self.left.remove(&id);
        }
        emit(vec![tensor("OUT", out)], out == 0)
    }

    fn take_rescheduled(&mut self) -> Vec<usize> {
        if std::mem::take(&mut self.again) {
            vec![0]
        } else {
            Vec::new()
        }
    }
}

#[actix_rt::test]
async fn a_decoupled_iterative_sequence_streams_each_iteration_and_ends_with_the_last() {
    let mut p = policy(true);
    p.decoupled = true;
    let factory: Arc<dyn BackendFactory> = Arc::new(|_: &InstanceSpec| -> Result<Box<dyn Backend>> {
        Ok(Box::new(Stream { left: HashMap::new(), again: false }) as Box<dyn Backend>)
    });
    let engine = Engine::new();
    let model = ModelHandle::load(&engine.handle(), p, factory).await.unwrap();
    std::mem::forget(engine);
    let request = |n: i32| {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        model.submit(req(n, None), Reply::Stream(tx)).unwrap();
        async move {
            let mut got = Vec::new();
            while let Some(resp) = rx.recv().await {
                let resp = resp.unwrap();
                got.push((resp.outputs.iter().map(|t| i32s(t)[0]).collect::<Vec<_>>(), resp.is_final));
                if resp.is_final {
                    break;
                }
            }
            got
        }
    };
    // Two at once on a model with max_batch_size 4: each runs alone, both are answered.
    let (a, b) = futures::join!(request(3), request(2));
    assert_eq!(a, [(vec![2], false), (vec![1], false), (vec![0], true)], "the last response carries the final flag");
    assert_eq!(b, [(vec![1], false), (vec![0], true)]);
    let expected = SequenceSnapshot { slots_used: vec![0], ..Default::default() };
    settle(|| model.figures.sequence.snapshot() == expected).await;
    model.unload().await;
}

/// `Stream` for a whole batch: each request of it streams on its own.
struct BatchedStream {
    left: HashMap<u64, i32>,
    again: Vec<usize>,
    sizes: Log,
    /// Set: the next health check fails (the instance is replaced), once.
    sick: Arc<std::sync::atomic::AtomicBool>,
}

impl Backend for BatchedStream {
    fn execute(&mut self, _: BatchInput<'_>) -> Result<Vec<Tensor>> {
        unreachable!("the engine calls execute_decoupled_each")
    }

    fn execute_decoupled_each(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(usize, Vec<Tensor>, bool) -> Result<()>,
    ) -> Result<Vec<Option<Error>>> {
        let mut seen = Vec::new();
        for (i, r) in batch.requests.iter().enumerate() {
            let f = r.sequence.clone().unwrap();
            let CorrelationId::U64(id) = f.id else { panic!("numeric ids") };
            seen.push((id, f.start, f.end));
            let left = self.left.entry(id).or_insert(i32s(r.input("IN").unwrap())[0]);
            *left -= 1;
            let out = *left;
            if out > 0 {
                self.again.push(i);
            } else {
                self.left.remove(&id);
            }
            emit(i, vec![tensor("OUT", out)], out == 0)?;
        }
        self.sizes.lock().unwrap().push(seen);
        Ok(vec![None; batch.requests.len()])
    }

    fn take_rescheduled(&mut self) -> Vec<usize> {
        std::mem::take(&mut self.again)
    }

    fn health(&mut self) -> Result<()> {
        match self.sick.swap(false, std::sync::atomic::Ordering::SeqCst) {
            true => Err(Error::internal("the instance is gone")),
            false => Ok(()),
        }
    }
}

#[derive(Default)]
struct BatchedFactory(Log, Arc<std::sync::atomic::AtomicBool>);

impl BackendFactory for BatchedFactory {
    fn create(&self, _: &InstanceSpec) -> Result<Box<dyn Backend>> {
        let sizes = self.0.clone();
        Ok(Box::new(BatchedStream { left: HashMap::new(), again: Vec::new(), sizes, sick: self.1.clone() }))
    }

    fn decoupled_batches(&self) -> bool {
        true
    }
}

#[actix_rt::test]
async fn a_backend_that_takes_decoupled_batches_gets_several_iterations_at_once() {
    let mut p = policy(true);
    p.decoupled = true;
    let log: Log = Arc::default();
    let engine = Engine::new();
    let factory = BatchedFactory(log.clone(), Arc::default());
    let model = ModelHandle::load(&engine.handle(), p, Arc::new(factory)).await.unwrap();
    std::mem::forget(engine);
    let request = |n: i32| {
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        model.submit(req(n, None), Reply::Stream(tx)).unwrap();
        async move {
            let mut got = Vec::new();
            while let Some(resp) = rx.recv().await {
                let resp = resp.unwrap();
                got.push((i32s(&resp.outputs[0])[0], resp.is_final));
                if resp.is_final {
                    break;
                }
            }
            got
        }
    };
    let (a, b, c) = futures::join!(request(3), request(2), request(1));
    assert_eq!(a, [(2, false), (1, false), (0, true)]);
    assert_eq!(b, [(1, false), (0, true)]);
    assert_eq!(c, [(0, true)]);
    let executions = log.lock().unwrap().clone();
    assert!(executions.iter().any(|e| e.len() > 1), "iterations shared an execution: {executions:?}");
    assert_eq!(executions.iter().map(Vec::len).sum::<usize>(), 6);
    let stats = model.stats.snapshot();
    assert_eq!((stats.success.0, stats.execution_count), (6, executions.len() as u64));
    model.unload().await;
}

#[actix_rt::test]
async fn a_sequence_whose_client_went_away_ends_at_once() {
    let mut p = policy(true);
    p.decoupled = true;
    let engine = Engine::new();
    let model = ModelHandle::load(&engine.handle(), p, Arc::new(BatchedFactory::default())).await.unwrap();
    std::mem::forget(engine);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    model.submit(req(1_000_000, None), Reply::Stream(tx)).unwrap();
    assert!(!rx.recv().await.unwrap().unwrap().is_final);
    drop(rx);
    // Well within the 5 s idle timeout: the sequence ended with its request.
    let expected = SequenceSnapshot { slots_used: vec![0], ..Default::default() };
    settle(|| model.figures.sequence.snapshot() == expected).await;
    assert_eq!(model.figures.sequence.snapshot(), expected);
    assert_eq!(model.stats.snapshot().failures.get("CANCELED"), Some(&1), "{:?}", model.stats.snapshot());
    model.unload().await;
}

#[actix_rt::test]
async fn a_rescheduled_request_outlives_the_instance_that_ran_it() {
    let mut p = policy(true);
    p.decoupled = true;
    let factory = BatchedFactory::default();
    factory.1.store(true, std::sync::atomic::Ordering::SeqCst);
    let engine = Engine::new();
    let model = ModelHandle::load(&engine.handle(), p, Arc::new(factory)).await.unwrap();
    std::mem::forget(engine);
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    model.submit(req(2, None), Reply::Stream(tx)).unwrap();
    let mut got = Vec::new();
    while let Some(resp) = rx.recv().await {
        let resp = resp.unwrap();
        got.push((i32s(&resp.outputs[0])[0], resp.is_final));
        if resp.is_final {
            break;
        }
    }
    // The first instance ran iteration 1 and was replaced; the new one (its own count) went on.
    assert_eq!(got, [(1, false), (1, false), (0, true)]);
    model.unload().await;
}
