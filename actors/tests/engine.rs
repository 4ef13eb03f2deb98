//! The engine end to end: a supervisor, scheduler and instances around small test backends.

mod common;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use common::settle;
use tritium_actors::clock::ManualClock;
use tritium_actors::figures::{Restarts, SupervisorSnapshot};
use tritium_actors::*;

/// Adds 1 to every FP32 element; panics on 666, fails on -1; optionally sleeps per batch and
/// records the batch sizes it saw.
struct AddOne {
    delay: Duration,
    seen: Arc<Mutex<Vec<usize>>>,
}

impl Backend for AddOne {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        self.seen.lock().unwrap().push(batch.batch_size);
        std::thread::sleep(self.delay);
        let input = &batch.inputs[0];
        let vals: Vec<f32> = input.data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        if vals.contains(&666.0) {
            panic!("the test backend was asked to panic");
        }
        if vals.contains(&-1.0) {
            return Err(Error::internal("the test backend refuses -1"));
        }
        let out: Vec<u8> = vals.iter().flat_map(|v| (v + 1.0).to_le_bytes()).collect();
        Ok(vec![Tensor::new("OUT", DataType::F32, input.shape.clone(), Bytes::from(out))])
    }
}

fn policy(instances: usize, dynamic: Option<DynamicBatchPolicy>) -> ModelPolicy {
    ModelPolicy {
        name: "addone".into(),
        version: 1,
        max_batch_size: 8,
        inputs: vec![IoSpec::new("IN", DataType::F32, vec![2])],
        outputs: vec![IoSpec::new("OUT", DataType::F32, vec![2])],
        instances: common::cpu_instances("addone", instances),
        scheduler: dynamic.map(SchedulerPolicy::Dynamic).unwrap_or(SchedulerPolicy::Direct),
        decoupled: false,
        queue_capacity: policy::DEFAULT_QUEUE_CAPACITY,
        warmup: Vec::new(),
        response_cache: false,
    }
}

fn factory(delay: Duration, seen: Arc<Mutex<Vec<usize>>>) -> Arc<dyn BackendFactory> {
    Arc::new(move |_: &InstanceSpec| -> Result<Box<dyn Backend>> {
        Ok(Box::new(AddOne { delay, seen: seen.clone() }) as Box<dyn Backend>)
    })
}

/// The add-one model with one instance and no dynamic batching, each batch taking `delay`,
/// shared by the test's concurrent callers.
async fn one_instance(engine: &Engine, delay: Duration, seen: Arc<Mutex<Vec<usize>>>) -> Arc<ModelHandle> {
    Arc::new(ModelHandle::load(&engine.handle(), policy(1, None), factory(delay, seen)).await.unwrap())
}

fn request(vals: [f32; 2]) -> InferRequest {
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    InferRequest::new("addone", vec![Tensor::new("IN", DataType::F32, vec![1, 2], Bytes::from(data))])
}

fn values(r: &InferResponse) -> Vec<f32> {
    r.outputs[0].data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect()
}

#[actix_rt::test]
async fn runs_requests_and_counts_them() {
    let engine = Engine::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ModelHandle::load(&engine.handle(), policy(1, None), factory(Duration::ZERO, seen)).await.unwrap();
    assert!(model.is_ready());
    let r = model.infer(request([1.0, 2.0])).await.unwrap();
    assert_eq!(values(&r), vec![2.0, 3.0]);
    assert!(r.is_final);
    let s = model.stats.snapshot();
    assert_eq!((s.success.0, s.inference_count, s.execution_count, s.pending), (1, 1, 1, 0));
    let f = model.figures.snapshot();
    assert_eq!((f.scheduler.queue_len, f.scheduler.mailbox, f.scheduler.batches, f.scheduler.items), (0, 0, 1, 1));
    assert_eq!((f.scheduler.batch_size.count, f.scheduler.batch_size.sum), (1, 1.0));
    assert_eq!((f.instances[0].executions, f.instances[0].mailbox), (1, 0));
    assert_eq!(f.supervisor, SupervisorSnapshot { alive: vec![true], restarts: vec![Restarts::default()] });
    model.unload().await;
}

#[actix_rt::test]
async fn the_first_request_after_a_load_finds_the_instance_on_the_lane() {
    // The load is answered once the scheduler has the instance (not once the supervisor has
    // told it), so the first request goes straight to the free instance, never through the
    // scheduler's mailbox. Several loads: with the load answered by the supervisor, a first
    // request could reach the scheduler before the instance did. On the old code this test
    // failed 26 of 60 runs with the cores busy (three busy loops, two runs at once), none when
    // run alone three times; on this code it passed 60 of 60 the busy way.
    let engine = Engine::new();
    for round in 0..20 {
        let seen = Arc::new(Mutex::new(Vec::new()));
        let model = ModelHandle::load(&engine.handle(), policy(1, None), factory(Duration::ZERO, seen)).await.unwrap();
        let r = model.infer(request([round as f32, 0.0])).await.unwrap();
        assert_eq!(values(&r), vec![round as f32 + 1.0, 1.0]);
        let f = model.figures.snapshot();
        assert_eq!((f.scheduler.direct, f.scheduler.batches), (1, 1), "round {round}: {:?}", f.scheduler);
        model.unload().await;
    }
}

#[actix_rt::test]
async fn a_lone_request_goes_straight_to_the_free_instance_and_counts_as_before() {
    let engine = Engine::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = ModelHandle::load(&engine.handle(), policy(1, None), factory(Duration::ZERO, seen)).await.unwrap();
    // A first request; the figures below count from after it.
    model.infer(request([0.0, 0.0])).await.unwrap();
    let before = model.figures.snapshot().scheduler.direct;
    for i in 0..5 {
        let r = model.infer(request([i as f32, 0.0])).await.unwrap();
        assert_eq!(values(&r), vec![i as f32 + 1.0, 1.0]);
    }
    // The instance frees itself before it answers: each next request finds it free, so none
    // took the scheduler actor's hop; the statistics count them as the scheduler's would.
    let s = model.stats.snapshot();
    assert_eq!((s.success.0, s.inference_count, s.execution_count, s.queue.0, s.pending), (6, 6, 6, 6, 0));
    let f = model.figures.snapshot();
    assert_eq!(
        (f.scheduler.direct - before, f.scheduler.batches, f.scheduler.items, f.scheduler.mailbox),
        (5, 6, 6, 0)
    );
    assert_eq!((f.instances[0].executions, f.instances[0].mailbox), (6, 0));
    model.unload().await;
}

#[actix_rt::test]
async fn requests_that_find_the_instance_busy_wait_in_the_batcher_without_the_schedulers_hop() {
    let engine = Engine::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = one_instance(&engine, Duration::from_millis(150), seen.clone()).await;
    model.infer(request([0.0, 0.0])).await.unwrap();
    let before = model.figures.snapshot().scheduler.direct;
    seen.lock().unwrap().clear();
    let calls = (0..4).map(|i| {
        let model = model.clone();
        async move { model.infer(request([i as f32, 0.0])).await }
    });
    for r in futures::future::join_all(calls).await {
        r.unwrap();
    }
    // The first went straight to the instance; the others, finding it busy, were queued in
    // the batcher by their submitters (each alone: no dynamic batching) and the instance,
    // finding them there as it finished, took them itself one by one.
    let f = model.figures.snapshot();
    assert_eq!((f.scheduler.direct - before, f.scheduler.batches, f.scheduler.queue_len), (1, 5, 0));
    assert_eq!((f.scheduler.pulled, f.scheduler.lane_queued, f.scheduler.mailbox), (3, 3, 0));
    assert_eq!(*seen.lock().unwrap(), vec![1, 1, 1, 1]);
    let s = model.stats.snapshot();
    assert_eq!((s.success.0, s.execution_count, s.pending), (5, 5, 0));
    assert!(s.queue.1 >= 150_000_000, "the queued requests waited for the running one: {s:?}");
    // Once the queue is empty, a request goes straight again.
    model.infer(request([9.0, 0.0])).await.unwrap();
    assert_eq!(model.figures.snapshot().scheduler.direct - before, 2);
    model.unload().await;
}

#[actix_rt::test]
async fn a_request_queued_behind_a_busy_instance_whose_client_left_is_cancelled_before_it_runs() {
    let engine = Engine::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = one_instance(&engine, Duration::from_millis(400), seen.clone()).await;
    let (reply, running) = Reply::once();
    model.submit(request([1.0, 0.0]), reply).unwrap();
    settle(|| seen.lock().unwrap().len() == 1).await;
    // Queued by its submitter behind the running request; its client goes away at once.
    let (reply, gone) = Reply::once();
    model.submit(request([2.0, 0.0]), reply).unwrap();
    drop(gone);
    assert_eq!(model.figures.snapshot().scheduler.lane_queued, 1);
    // The scheduler's sweep comes round (the lane asked it for a turn) while the first runs.
    settle(|| model.stats.snapshot().failures.get("CANCELED").copied() == Some(1)).await;
    let s = model.stats.snapshot();
    assert_eq!((s.success.0, seen.lock().unwrap().len()), (0, 1), "the first still runs");
    assert_eq!(model.figures.snapshot().scheduler.queue_len, 0);
    running.await.unwrap().unwrap();
    let s = model.stats.snapshot();
    assert_eq!((s.success.0, s.fail.0, s.pending, s.execution_count), (1, 1, 0, 1));
    model.unload().await;
}

#[actix_rt::test]
async fn with_a_batching_delay_requests_under_load_still_form_batches() {
    let engine = Engine::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let dynamic = DynamicBatchPolicy { max_queue_delay: Duration::from_millis(5), ..Default::default() };
    let model = Arc::new(
        ModelHandle::load(&engine.handle(), policy(2, Some(dynamic)), factory(Duration::from_millis(20), seen.clone()))
            .await
            .unwrap(),
    );
    let calls = (0..16).map(|i| {
        let model = model.clone();
        async move { model.infer(request([i as f32, 0.0])).await }
    });
    for r in futures::future::join_all(calls).await {
        r.unwrap();
    }
    // Only the first request could find every instance free (if the scheduler had heard they
    // were up); the rest waited to be batched.
    let f = model.figures.snapshot();
    assert!(f.scheduler.direct <= 1, "{:?}", f.scheduler);
    assert!(seen.lock().unwrap().iter().any(|&b| b > 1), "expected batches: {:?}", seen.lock().unwrap());
    model.unload().await;
}

#[actix_rt::test]
async fn dynamic_batching_merges_concurrent_requests_and_splits_answers() {
    let engine = Engine::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let dynamic = DynamicBatchPolicy { max_queue_delay: Duration::from_millis(5), ..Default::default() };
    let model = Arc::new(
        ModelHandle::load(&engine.handle(), policy(1, Some(dynamic)), factory(Duration::from_millis(20), seen.clone()))
            .await
            .unwrap(),
    );
    let calls = (0..32).map(|i| {
        let model = model.clone();
        async move { (i, model.infer(request([i as f32, 10.0 * i as f32])).await) }
    });
    for (i, r) in futures::future::join_all(calls).await {
        assert_eq!(values(&r.unwrap()), vec![i as f32 + 1.0, 10.0 * i as f32 + 1.0], "request {i}");
    }
    let s = model.stats.snapshot();
    assert_eq!(s.inference_count, 32);
    assert!(s.execution_count < 32, "expected batching, got {} executions", s.execution_count);
    assert!(seen.lock().unwrap().iter().all(|&b| b <= 8));
    model.unload().await;
}

#[actix_rt::test]
async fn without_dynamic_batching_each_request_runs_alone() {
    let engine = Engine::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let model = one_instance(&engine, Duration::from_millis(2), seen.clone()).await;
    let calls = (0..8).map(|i| {
        let model = model.clone();
        async move { model.infer(request([i as f32, 0.0])).await.unwrap() }
    });
    futures::future::join_all(calls).await;
    let s = model.stats.snapshot();
    assert_eq!((s.inference_count, s.execution_count), (8, 8));
    model.unload().await;
}

#[actix_rt::test]
async fn a_backend_error_fails_only_that_request() {
    let engine = Engine::new();
    let model = ModelHandle::load(&engine.handle(), policy(1, None), factory(Duration::ZERO, Default::default()))
        .await
        .unwrap();
    let e = model.infer(request([-1.0, 0.0])).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
    assert!(e.message.contains("refuses -1"));
    assert_eq!(values(&model.infer(request([0.0, 0.0])).await.unwrap()), vec![1.0, 1.0]);
    let supervisor = model.figures.supervisor.snapshot();
    assert_eq!(supervisor, SupervisorSnapshot { alive: vec![true], restarts: vec![Restarts::default()] }, "no restart");
    let s = model.stats.snapshot();
    assert_eq!((s.fail.0, s.success.0), (1, 1));
    model.unload().await;
}

/// Answers each request of a batch on its own, as Triton's backend API does: a request whose
/// first value is -1 fails, the others get their values plus one.
struct EachOnItsOwn {
    seen: Arc<Mutex<Vec<usize>>>,
}

impl Backend for EachOnItsOwn {
    fn execute(&mut self, _: BatchInput<'_>) -> Result<Vec<Tensor>> {
        unreachable!("the engine calls execute_each")
    }

    fn execute_each(&mut self, batch: BatchInput<'_>, sizes: &[usize]) -> Result<Vec<Result<Vec<Tensor>>>> {
        self.seen.lock().unwrap().push(batch.requests.len());
        assert_eq!(sizes.len(), batch.requests.len());
        std::thread::sleep(Duration::from_millis(20));
        Ok(batch
            .requests
            .iter()
            .map(|r| {
                let input = &r.inputs[0];
                let vals: Vec<f32> =
                    input.data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
                if vals[0] == -1.0 {
                    return Err(Error::invalid("this request is refused"));
                }
                let out: Vec<u8> = vals.iter().flat_map(|v| (v + 1.0).to_le_bytes()).collect();
                Ok(vec![Tensor::new("OUT", DataType::F32, input.shape.clone(), Bytes::from(out))])
            })
            .collect())
    }
}

#[actix_rt::test]
async fn one_failing_request_of_a_batch_fails_alone() {
    let engine = Engine::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let dynamic = DynamicBatchPolicy { max_queue_delay: Duration::from_millis(50), ..Default::default() };
    let recorded = seen.clone();
    let factory: Arc<dyn BackendFactory> = Arc::new(move |_: &InstanceSpec| -> Result<Box<dyn Backend>> {
        Ok(Box::new(EachOnItsOwn { seen: recorded.clone() }) as Box<dyn Backend>)
    });
    let model = Arc::new(ModelHandle::load(&engine.handle(), policy(1, Some(dynamic)), factory).await.unwrap());
    let calls = (0..6).map(|i| {
        let model = model.clone();
        let first = if i == 3 { -1.0 } else { i as f32 };
        async move { (i, model.infer(request([first, 0.0])).await) }
    });
    for (i, r) in futures::future::join_all(calls).await {
        if i == 3 {
            let e = r.unwrap_err();
            assert_eq!((e.kind, e.message.as_str()), (ErrorKind::InvalidArgument, "this request is refused"));
        } else {
            assert_eq!(values(&r.unwrap()), vec![i as f32 + 1.0, 1.0], "request {i}");
        }
    }
    assert!(seen.lock().unwrap().iter().any(|&n| n > 1), "the requests were batched: {:?}", seen.lock().unwrap());
    let s = model.stats.snapshot();
    assert_eq!((s.success.0, s.fail.0), (5, 1));
    assert_eq!(model.figures.supervisor.snapshot().restarts, vec![Restarts::default()], "no restart");
    model.unload().await;
}
#[actix_rt::test]
async fn a_panicking_instance_is_restarted_and_the_others_keep_serving() {
    // Virtual time: the failed instance stays down through its backoff while the other serves.
    let engine = Engine::new();
    let clock = ManualClock::new();
    let factory = factory(Duration::from_millis(5), Default::default());
    let model = Arc::new(
        ModelHandle::load_with_clock(&engine.handle(), policy(2, None), factory, clock.clone()).await.unwrap(),
    );
    let e = model.infer(request([666.0, 0.0])).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
    assert!(e.message.contains("panicked"), "{e}");
    assert!(model.is_ready(), "one instance is still alive");
    // Everything else succeeds on the other instance while the failed one backs off.
    let calls = (0..20).map(|i| {
        let model = model.clone();
        async move { model.infer(request([i as f32, 0.0])).await }
    });
    for r in futures::future::join_all(calls).await {
        r.unwrap();
    }
    let restarts = model.figures.supervisor.snapshot().restarts;
    let panics: u64 = restarts.iter().map(|r| r.get(ExitCause::Panicked)).sum();
    assert_eq!((panics, restarts.iter().map(Restarts::total).sum::<u64>()), (1, 1), "one restart, by the panic");
    assert_eq!(model.figures.live_instances(), 1, "backing off");
    clock.advance(Duration::from_millis(50));
    settle(|| model.figures.live_instances() == 2).await;
    assert_eq!(model.figures.live_instances(), 2, "the failed instance came back after its backoff");
    model.unload().await;
}

#[actix_rt::test]
async fn a_panic_mid_batch_fails_every_request_of_that_batch_and_the_next_batch_is_served() {
    let engine = Engine::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let dynamic = DynamicBatchPolicy { max_queue_delay: Duration::from_millis(50), ..Default::default() };
    let model = Arc::new(
        ModelHandle::load(
            &engine.handle(),
            policy(1, Some(dynamic)),
            factory(Duration::from_millis(300), seen.clone()),
        )
        .await
        .unwrap(),
    );
    let batch = |values: [f32; 4]| {
        let calls = values.map(|v| {
            let model = model.clone();
            async move { model.infer(request([v, 0.0])).await }
        });
        // None may hang: every request of the batch is answered.
        tokio::time::timeout(Duration::from_secs(20), futures::future::join_all(calls))
    };
    // A first request keeps the instance busy while the next four queue up into one batch.
    let first = {
        let model = model.clone();
        tokio::spawn(async move { model.infer(request([0.0, 0.0])).await })
    };
    settle(|| seen.lock().unwrap().len() == 1).await;
    let failed = batch([1.0, 2.0, 666.0, 3.0]).await.expect("every request of the batch is answered");
    assert_eq!(values(&first.await.unwrap().unwrap()), vec![1.0, 1.0]);
    assert_eq!(*seen.lock().unwrap(), vec![1, 4], "the four requests ran as one batch");
    for r in &failed {
        let e = r.as_ref().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Internal, "{e}");
        assert!(e.message.contains("panicked"), "{e}");
    }
    let s = model.stats.snapshot();
    assert_eq!((s.success.0, s.fail.0), (1, 4));
    // The instance comes back after its backoff and serves the next batch (the answers went
    // out before the supervisor heard of the panic: wait for the restart to be counted first).
    settle(|| model.figures.supervisor.snapshot().restarts[0].panicked == 1).await;
    settle(|| model.figures.live_instances() == 1).await;
    let served = batch([4.0, 5.0, 6.0, 7.0]).await.expect("the next batch is answered");
    for (r, v) in served.iter().zip([4.0, 5.0, 6.0, 7.0]) {
        assert_eq!(values(r.as_ref().unwrap()), vec![v + 1.0, 1.0]);
    }
    assert_eq!(seen.lock().unwrap()[2..].iter().sum::<usize>(), 4, "the next requests ran, in batches of any size");
    let restarts = model.figures.supervisor.snapshot().restarts;
    assert_eq!(restarts.iter().map(|r| r.get(ExitCause::Panicked)).sum::<u64>(), 1, "one restart, by the panic");
    model.unload().await;
}

/// Waits (up to a second of real time) for what the actors do once a message arrives.
#[actix_rt::test]
async fn a_single_panicking_instance_comes_back_after_its_backoff() {
    // Virtual time: the restart waits for the supervisor's backoff (50 ms) and no longer.
    let engine = Engine::new();
    let clock = ManualClock::new();
    let factory = factory(Duration::ZERO, Default::default());
    let model = ModelHandle::load_with_clock(&engine.handle(), policy(1, None), factory, clock.clone()).await.unwrap();
    assert!(model.infer(request([666.0, 0.0])).await.is_err());
    settle(|| model.figures.supervisor.snapshot().restarts[0].panicked == 1).await;
    let e = model.infer(request([1.0, 1.0])).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Unavailable, "no instance until the backoff is over: {e}");
    clock.advance(Duration::from_millis(49));
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(model.figures.live_instances(), 0, "still backing off");
    clock.advance(Duration::from_millis(1));
    settle(|| model.figures.live_instances() == 1).await;
    assert_eq!(values(&model.infer(request([1.0, 1.0])).await.unwrap()), vec![2.0, 2.0]);
    model.unload().await;
}

#[actix_rt::test]
async fn the_batcher_waits_its_delay_on_virtual_time_then_sends_one_batch() {
    // max_queue_delay of 10 s, on virtual time: the two requests that queue behind a busy
    // instance wait for it, however long the test takes, then go as one batch.
    let engine = Engine::new();
    let clock = ManualClock::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let dynamic = DynamicBatchPolicy { max_queue_delay: Duration::from_secs(10), ..Default::default() };
    let factory = factory(Duration::from_millis(50), seen.clone());
    let model =
        ModelHandle::load_with_clock(&engine.handle(), policy(1, Some(dynamic)), factory, clock.clone()).await.unwrap();
    let mut answers = Vec::new();
    for i in 0..3 {
        let (reply, rx) = Reply::once();
        model.submit(request([i as f32, 0.0]), reply).unwrap();
        answers.push(rx);
    }
    let first = answers.remove(0).await.unwrap().unwrap();
    assert_eq!(values(&first), vec![1.0, 1.0], "alone on an idle model: at once");
    tokio::time::sleep(Duration::from_millis(30)).await;
    assert_eq!(*seen.lock().unwrap(), vec![1], "the others wait for the delay");
    clock.advance(Duration::from_secs(10));
    for (i, rx) in answers.into_iter().enumerate() {
        assert_eq!(values(&rx.await.unwrap().unwrap()), vec![i as f32 + 2.0, 1.0]);
    }
    assert_eq!(*seen.lock().unwrap(), vec![1, 2], "one batch of two at the deadline");
    let s = model.figures.scheduler();
    assert_eq!((s.batches, s.items, s.batch_delay_us.count), (2, 3, 2));
    assert!(s.batch_delay_us.sum >= 10_000_000.0, "the wait is virtual: {}", s.batch_delay_us.sum);
    model.unload().await;
}

/// The add-one model with one instance, batches of 4 preferred, the given delay and 100 ms per
/// batch, once it answered a first request (then its instance is up where submitters see it: a
/// request that came before the scheduler heard it was up would go through the scheduler).
async fn batching_by_four(engine: &Engine, delay: Duration) -> (ModelHandle, Arc<Mutex<Vec<usize>>>) {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let dynamic = DynamicBatchPolicy { preferred_batch_sizes: vec![4], max_queue_delay: delay, ..Default::default() };
    let model = ModelHandle::load(
        &engine.handle(),
        policy(1, Some(dynamic)),
        factory(Duration::from_millis(100), seen.clone()),
    )
    .await
    .unwrap();
    assert_eq!(values(&model.infer(request([9.0, 0.0])).await.unwrap()), vec![10.0, 1.0]);
    (model, seen)
}

#[actix_rt::test]
async fn an_instance_waits_for_its_batch_itself_and_the_request_that_completes_it_wakes_it() {
    // Real time, a delay of 60 s and batches of 4 preferred: the instance that finishes with two
    // requests queued waits for the batch to grow (not free, the scheduler not told), and the
    // fourth request wakes it long before the delay ends.
    let engine = Engine::new();
    let (model, seen) = batching_by_four(&engine, Duration::from_secs(60)).await;
    let started = std::time::Instant::now();
    let mut answers = Vec::new();
    let mut submit = |i: usize| {
        let (reply, rx) = Reply::once();
        model.submit(request([i as f32, 0.0]), reply).unwrap();
        answers.push(rx);
    };
    // The first runs alone on the idle model; two queue behind it.
    for i in 0..3 {
        submit(i);
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert_eq!(*seen.lock().unwrap(), vec![1, 1], "the two queued wait for company");
    for i in 3..5 {
        submit(i);
    }
    for (i, rx) in answers.into_iter().enumerate() {
        assert_eq!(values(&rx.await.unwrap().unwrap()), vec![i as f32 + 1.0, 1.0]);
    }
    assert_eq!(*seen.lock().unwrap(), vec![1, 1, 4]);
    assert!(started.elapsed() < Duration::from_secs(30), "woken by the fourth request, not by the delay");
    let s = model.figures.scheduler();
    assert_eq!((s.batches, s.pulled, s.lane_queued), (3, 1, 4), "{s:?}");
    model.unload().await;
}

#[actix_rt::test]
async fn unloading_while_an_instance_waits_for_its_batch_still_answers_the_batch() {
    // The instance that finishes with two requests queued waits for the batch to grow; the
    // model's drain hands the wait to the scheduler (as when the scheduler kept every delay),
    // and the two still run, as one batch once the delay is over, before the model is gone.
    let engine = Engine::new();
    let (model, seen) = batching_by_four(&engine, Duration::from_millis(500)).await;
    let mut answers = Vec::new();
    for i in 0..3 {
        let (reply, rx) = Reply::once();
        model.submit(request([i as f32, 0.0]), reply).unwrap();
        answers.push(rx);
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(*seen.lock().unwrap(), vec![1, 1], "two wait for company");
    model.unload().await;
    for (i, rx) in answers.into_iter().enumerate() {
        assert_eq!(values(&rx.await.unwrap().unwrap()), vec![i as f32 + 1.0, 1.0]);
    }
    assert_eq!(*seen.lock().unwrap(), vec![1, 1, 2]);
    assert!(model.infer(request([0.0, 0.0])).await.is_err(), "an unloaded model takes no requests");
}

#[actix_rt::test]
async fn unload_lets_queued_requests_finish() {
    let engine = Engine::new();
    let model = one_instance(&engine, Duration::from_millis(10), Default::default()).await;
    let mut receivers = Vec::new();
    for i in 0..10 {
        let (reply, rx) = Reply::once();
        model.submit(request([i as f32, 0.0]), reply).unwrap();
        receivers.push(rx);
    }
    model.unload().await;
    for rx in receivers {
        rx.await.unwrap().unwrap();
    }
    assert!(model.infer(request([0.0, 0.0])).await.is_err(), "an unloaded model takes no requests");
}

#[actix_rt::test]
async fn a_failing_load_is_reported() {
    let engine = Engine::new();
    let bad: Arc<dyn BackendFactory> =
        Arc::new(|_: &InstanceSpec| -> Result<Box<dyn Backend>> { Err(Error::invalid("no such model file")) });
    let e = ModelHandle::load(&engine.handle(), policy(2, None), bad).await.unwrap_err();
    assert_eq!(
        (e.kind, e.message.as_str()),
        (ErrorKind::InvalidArgument, "no such model file"),
        "the backend's own error"
    );
    let panics: Arc<dyn BackendFactory> =
        Arc::new(|_: &InstanceSpec| -> Result<Box<dyn Backend>> { panic!("the factory panicked") });
    let e = ModelHandle::load(&engine.handle(), policy(1, None), panics).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
    assert!(e.message.contains("panicked while loading: the factory panicked"), "{e}");
}

#[actix_rt::test]
async fn a_full_queue_answers_unavailable_at_once() {
    let engine = Engine::new();
    let mut p = policy(1, Some(DynamicBatchPolicy::default()));
    if let SchedulerPolicy::Dynamic(d) = &mut p.scheduler {
        d.default_queue_policy.max_queue_size = 2;
    }
    p.max_batch_size = 1;
    let model = Arc::new(
        ModelHandle::load(&engine.handle(), p, factory(Duration::from_millis(50), Default::default())).await.unwrap(),
    );
    let calls = (0..8).map(|i| {
        let model = model.clone();
        async move { model.infer(request([i as f32, 0.0])).await }
    });
    let results = futures::future::join_all(calls).await;
    let rejected: Vec<_> = results.iter().filter_map(|r| r.as_ref().err()).collect();
    assert!(!rejected.is_empty());
    assert!(rejected.iter().all(|e| e.kind == ErrorKind::Unavailable && e.message.contains("maximum queue size")));
    assert!(results.iter().filter(|r| r.is_ok()).count() >= 3);
    model.unload().await;
}

/// Sleeps for as many milliseconds as its first input element, then echoes the input.
struct SleepByValue;

impl Backend for SleepByValue {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        let input = &batch.inputs[0];
        let ms = f32::from_le_bytes(input.data[..4].try_into().unwrap());
        std::thread::sleep(Duration::from_millis(ms as u64));
        Ok(vec![Tensor::new("OUT", DataType::F32, input.shape.clone(), input.data.clone())])
    }
}

/// Two instances; a slow request then a fast one: the order their answers arrive in.
async fn answer_order(preserve_ordering: bool) -> Vec<u32> {
    let engine = Engine::new();
    let dynamic = DynamicBatchPolicy { preserve_ordering, ..Default::default() };
    let factory: Arc<dyn BackendFactory> =
        Arc::new(|_: &InstanceSpec| -> Result<Box<dyn Backend>> { Ok(Box::new(SleepByValue) as Box<dyn Backend>) });
    let model = Arc::new(ModelHandle::load(&engine.handle(), policy(2, Some(dynamic)), factory).await.unwrap());
    let order = Arc::new(Mutex::new(Vec::new()));
    let mut calls = Vec::new();
    for (i, ms) in [(0u32, 300.0f32), (1, 1.0), (2, 1.0)] {
        let (model, order) = (model.clone(), order.clone());
        calls.push(tokio::spawn(async move {
            let r = model.infer(request([ms, i as f32])).await.unwrap();
            assert_eq!(values(&r), vec![ms, i as f32], "each request gets its own answer");
            order.lock().unwrap().push(i);
        }));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    for c in calls {
        c.await.unwrap();
    }
    model.unload().await;
    let order = order.lock().unwrap().clone();
    order
}

#[actix_rt::test]
async fn preserve_ordering_answers_in_the_order_requests_came() {
    // The control's two fast requests may finish in either order (or in one batch) on a loaded
    // machine; what matters is that both overtake the slow one.
    let control = answer_order(false).await;
    assert_eq!(control.last(), Some(&0), "control: the fast requests overtake the slow one: {control:?}");
    assert_eq!(answer_order(true).await, vec![0, 1, 2], "preserve_ordering holds them behind it");
}
