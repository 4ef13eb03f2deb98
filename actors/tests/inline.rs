//! A lone request run on the thread that submitted it (`ModelHandle::submit_here`): where the
//! backend allows it and the model's recent executions were short, a request that finds the
//! instance free and nothing queued runs on the caller's thread, counted, traced, cancelled and
//! supervised as on the instance's own.

mod common;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::settle;
use tritium_actors::cache::ResponseCache;
use tritium_actors::clock::ManualClock;
use tritium_actors::*;

/// Where each execution ran (the thread's name) and its batch size.
type Seen = Arc<Mutex<Vec<(String, usize)>>>;

/// Adds 1 to every FP32 element; panics on 666; holds on 42 until `gate` opens; sleeps `delay`
/// per batch. Runs inline when `inline`.
struct Here {
    inline: bool,
    delay: Duration,
    gate: Arc<AtomicBool>,
    seen: Seen,
}

impl Backend for Here {
    fn runs_inline(&self) -> bool {
        self.inline
    }

    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        let thread = std::thread::current().name().unwrap_or("").to_string();
        self.seen.lock().unwrap().push((thread, batch.batch_size));
        std::thread::sleep(self.delay);
        let input = &batch.inputs[0];
        let vals: Vec<f32> = input.data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        if vals.contains(&666.0) {
            panic!("the test backend was asked to panic");
        }
        if vals.contains(&42.0) {
            while !self.gate.load(Ordering::SeqCst) {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        let out: Vec<u8> = vals.iter().flat_map(|v| (v + 1.0).to_le_bytes()).collect();
        Ok(vec![Tensor::new("OUT", DataType::F32, input.shape.clone(), Bytes::from(out))])
    }
}

fn policy(cached: bool) -> ModelPolicy {
    ModelPolicy {
        name: "here".into(),
        version: 1,
        max_batch_size: 8,
        inputs: vec![IoSpec::new("IN", DataType::F32, vec![2])],
        outputs: vec![IoSpec::new("OUT", DataType::F32, vec![2])],
        instances: common::cpu_instances("here", 1),
        scheduler: SchedulerPolicy::Direct,
        decoupled: false,
        queue_capacity: policy::DEFAULT_QUEUE_CAPACITY,
        warmup: Vec::new(),
        response_cache: cached,
    }
}

struct Setup {
    inline: bool,
    delay: Duration,
    gate: Arc<AtomicBool>,
    seen: Seen,
}

impl Setup {
    fn new(inline: bool) -> Self {
        Setup { inline, delay: Duration::ZERO, gate: Arc::new(AtomicBool::new(true)), seen: Seen::default() }
    }

    fn factory(&self) -> Arc<dyn BackendFactory> {
        let (inline, delay, gate, seen) = (self.inline, self.delay, self.gate.clone(), self.seen.clone());
        Arc::new(move |_: &InstanceSpec| -> Result<Box<dyn Backend>> {
            Ok(Box::new(Here { inline, delay, gate: gate.clone(), seen: seen.clone() }) as Box<dyn Backend>)
        })
    }

    /// The threads the executions ran on, from the `skip`th on.
    fn threads(&self, skip: usize) -> Vec<String> {
        self.seen.lock().unwrap().iter().skip(skip).map(|(t, _)| t.clone()).collect()
    }
}

fn request(vals: [f32; 2]) -> InferRequest {
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    InferRequest::new("here", vec![Tensor::new("IN", DataType::F32, vec![1, 2], Bytes::from(data))])
}

fn values(r: &InferResponse) -> Vec<f32> {
    r.outputs[0].data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

fn this_thread() -> String {
    std::thread::current().name().unwrap_or("").to_string()
}

/// Runs requests until one runs on this thread (the first executions go to the instance's: it
/// is not measured yet); returns how many executions ran.
async fn warm(model: &ModelHandle, setup: &Setup) -> usize {
    for i in 0..10 {
        // Each its own values: none is a hit of the response cache.
        model.infer(request([100.0 + i as f32, 0.0])).await.unwrap();
        if setup.threads(0).last() == Some(&this_thread()) {
            return setup.threads(0).len();
        }
    }
    panic!("no request ran on the submitting thread: {:?}", setup.threads(0));
}

#[actix_rt::test]
async fn a_lone_request_runs_on_the_submitting_thread_and_counts_as_on_the_instance() {
    let engine = Engine::new();
    let setup = Setup::new(true);
    let model = ModelHandle::load(&engine.handle(), policy(false), setup.factory()).await.unwrap();
    // The first execution is not measured yet: it runs on the instance's thread.
    model.infer(request([0.0, 0.0])).await.unwrap();
    assert_eq!(setup.threads(0), vec!["inst-here_0_0".to_string()]);
    let n = warm(&model, &setup).await as u64;
    let before = model.figures.snapshot().scheduler.direct;
    for i in 1..6 {
        let r = model.infer(request([i as f32, 0.0])).await.unwrap();
        assert_eq!(values(&r), vec![i as f32 + 1.0, 1.0]);
        assert!(r.times.is_some(), "the answer carries its compute times");
    }
    assert_eq!(setup.threads(n as usize), vec![this_thread(); 5], "each ran on the caller's thread");
    let s = model.stats.snapshot();
    let (all, execs) = (n + 5, n + 5);
    assert_eq!((s.success.0, s.inference_count, s.execution_count, s.queue.0, s.pending), (all, all, execs, all, 0));
    assert_eq!((s.compute_input.0, s.compute_infer.0, s.compute_output.0), (all, all, all));
    let f = model.figures.snapshot();
    assert_eq!(
        (f.scheduler.direct - before, f.scheduler.batches, f.scheduler.items, f.scheduler.mailbox),
        (5, all, all, 0)
    );
    assert_eq!((f.instances[0].executions, f.instances[0].mailbox), (execs, 0));
    // `submit` (a stream, an ensemble's step) never runs on the caller's thread.
    let (reply, rx) = Reply::once();
    model.submit(request([9.0, 0.0]), reply).unwrap();
    assert_eq!(values(&rx.await.unwrap().unwrap()), vec![10.0, 1.0]);
    assert_eq!(setup.threads(n as usize + 5), vec!["inst-here_0_0".to_string()]);
    model.unload().await;
}

#[actix_rt::test]
async fn a_backend_that_does_not_opt_in_or_a_slow_model_runs_on_the_instance_thread() {
    let engine = Engine::new();
    for setup in [Setup::new(false), Setup { delay: INLINE_MAX_COMPUTE * 2, ..Setup::new(true) }] {
        let model = ModelHandle::load(&engine.handle(), policy(false), setup.factory()).await.unwrap();
        for i in 0..4 {
            model.infer(request([i as f32, 0.0])).await.unwrap();
        }
        assert_eq!(setup.threads(0), vec!["inst-here_0_0".to_string(); 4]);
        model.unload().await;
    }
}

#[actix_rt::test]
async fn a_panic_on_the_submitting_thread_fails_the_request_and_the_instance_is_restarted() {
    let engine = Engine::new();
    let clock = ManualClock::new();
    let setup = Setup::new(true);
    let model =
        ModelHandle::load_with_clock(&engine.handle(), policy(false), setup.factory(), clock.clone()).await.unwrap();
    let n = warm(&model, &setup).await;
    let e = model.infer(request([666.0, 0.0])).await.unwrap_err();
    assert_eq!(setup.threads(n), vec![this_thread()], "the panic happened on the caller's thread");
    assert_eq!(e.kind, ErrorKind::Internal);
    assert!(e.message.contains("panicked"), "{e}");
    // The instance's thread ends with the panic as its cause; the supervisor restarts it after
    // its backoff.
    settle(|| model.figures.supervisor.snapshot().restarts[0].panicked == 1).await;
    assert_eq!(model.figures.live_instances(), 0, "backing off");
    clock.advance(Duration::from_millis(50));
    settle(|| model.figures.live_instances() == 1).await;
    assert_eq!(values(&model.infer(request([1.0, 1.0])).await.unwrap()), vec![2.0, 2.0]);
    let s = model.stats.snapshot();
    assert_eq!((s.success.0, s.fail.0, s.failures.get("BACKEND").copied()), (n as u64 + 1, 1, Some(1)));
    assert_eq!(s.pending, 0);
    model.unload().await;
}

#[actix_rt::test]
async fn a_request_whose_client_has_gone_is_cancelled_without_running() {
    let engine = Engine::new();
    let setup = Setup::new(true);
    let model = ModelHandle::load(&engine.handle(), policy(false), setup.factory()).await.unwrap();
    let n = warm(&model, &setup).await;
    let (reply, rx) = Reply::once();
    drop(rx);
    model.submit_here(request([1.0, 0.0]), reply).unwrap();
    assert_eq!(setup.threads(0).len(), n, "the backend did not run it");
    let s = model.stats.snapshot();
    let expected = (n as u64, 1, Some(1), 0);
    assert_eq!((s.success.0, s.fail.0, s.failures.get("CANCELED").copied(), s.pending), expected);
    // The instance is free again: the next request runs at once, here.
    model.infer(request([2.0, 0.0])).await.unwrap();
    assert_eq!(setup.threads(n), vec![this_thread()]);
    model.unload().await;
}

#[actix_rt::test]
async fn a_request_arriving_while_a_run_holds_the_instance_waits_and_its_thread_takes_it() {
    let engine = Engine::new();
    let setup = Setup::new(true);
    let model = Arc::new(ModelHandle::load(&engine.handle(), policy(false), setup.factory()).await.unwrap());
    let n = warm(&model, &setup).await;
    // Another thread's request holds the instance (inline) until the gate opens.
    setup.gate.store(false, Ordering::SeqCst);
    let (reply, held) = Reply::once();
    let submitter = {
        let model = model.clone();
        std::thread::Builder::new()
            .name("submitter".into())
            .spawn(move || model.submit_here(request([42.0, 0.0]), reply).unwrap())
            .unwrap()
    };
    settle(|| setup.threads(n).len() == 1).await;
    assert_eq!(setup.threads(n), vec!["submitter".to_string()]);
    // This one finds the instance claimed: it waits in the scheduler, not on a lock.
    let (reply, waiting) = Reply::once();
    model.submit_here(request([5.0, 0.0]), reply).unwrap();
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(setup.threads(n).len(), 1, "it waits for the instance");
    assert_eq!(model.figures.snapshot().scheduler.queue_len, 1);
    setup.gate.store(true, Ordering::SeqCst);
    submitter.join().unwrap();
    assert_eq!(values(&held.await.unwrap().unwrap()), vec![43.0, 1.0]);
    // The submitter's thread does not run the queue: the instance's own thread takes it.
    assert_eq!(values(&waiting.await.unwrap().unwrap()), vec![6.0, 1.0]);
    assert_eq!(setup.threads(n), vec!["submitter".to_string(), "inst-here_0_0".to_string()]);
    let s = model.stats.snapshot();
    assert_eq!((s.success.0, s.execution_count, s.pending), (n as u64 + 2, n as u64 + 2, 0));
    // Unloading waits for nothing more: every run is over and the instance free.
    model.unload().await;
    assert!(model.infer(request([0.0, 0.0])).await.is_err(), "an unloaded model takes no requests");
}

#[actix_rt::test]
async fn an_answer_run_on_the_submitting_thread_goes_to_the_response_cache() {
    let engine = Engine::new();
    let setup = Setup::new(true);
    let shared = Shared { cache: Some(Arc::new(ResponseCache::new(1 << 20))), ..Shared::default() };
    let model = ModelHandle::load_shared(&engine.handle(), policy(true), setup.factory(), &shared).await.unwrap();
    let n = warm(&model, &setup).await;
    let first = model.infer(request([7.0, 0.0])).await.unwrap();
    let again = model.infer(request([7.0, 0.0])).await.unwrap();
    assert_eq!(first.outputs, again.outputs);
    assert_eq!(setup.threads(n), vec![this_thread()], "the miss ran here, the second was a hit");
    let s = model.stats.snapshot();
    let n = n as u64;
    assert_eq!((s.success.0, s.execution_count, s.cache_hit.0, s.cache_miss.0), (n + 2, n + 1, 1, n + 1));
    model.unload().await;
}
