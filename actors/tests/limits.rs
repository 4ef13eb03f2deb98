//! The engine's shared services across models: the rate limiter keeps two models that need the
//! one copy of a resource from executing together (and, off, lets them), and the response cache
//! answers a repeated request without running the model.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use tritium_actors::backend::{RateLimiterSpec, ResourceSpec};
use tritium_actors::cache::ResponseCache;
use tritium_actors::limiter::RateLimiter;
use tritium_actors::*;

type Spans = Arc<Mutex<Vec<(&'static str, Instant, Instant)>>>;

/// Echoes its input after 30 ms, noting when each execution ran.
struct Slow {
    model: &'static str,
    spans: Spans,
}

impl Backend for Slow {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(30));
        self.spans.lock().unwrap().push((self.model, start, Instant::now()));
        let t = &batch.inputs[0];
        Ok(vec![Tensor::new("OUT", t.datatype, t.shape.clone(), t.data.clone())])
    }
}

fn policy(name: &'static str, resource: Option<&str>, cached: bool) -> ModelPolicy {
    let rate_limiter = RateLimiterSpec {
        resources: resource.map(|r| vec![ResourceSpec { name: r.into(), global: false, count: 1 }]).unwrap_or_default(),
        priority: 0,
    };
    ModelPolicy {
        name: name.into(),
        version: 1,
        max_batch_size: 0,
        inputs: vec![IoSpec::new("IN", DataType::F32, vec![-1])],
        outputs: vec![IoSpec::new("OUT", DataType::F32, vec![-1])],
        instances: vec![InstanceSpec {
            name: format!("{name}_0"),
            index: 0,
            kind: InstanceKind::Cpu,
            device: None,
            cpu_cores: Vec::new(),
            rate_limiter,
        }],
        scheduler: SchedulerPolicy::Direct,
        decoupled: false,
        queue_capacity: policy::DEFAULT_QUEUE_CAPACITY,
        warmup: Vec::new(),
        response_cache: cached,
    }
}

fn factory(model: &'static str, spans: Spans) -> Arc<dyn BackendFactory> {
    Arc::new(move |_: &InstanceSpec| -> Result<Box<dyn Backend>> {
        Ok(Box::new(Slow { model, spans: spans.clone() }) as Box<dyn Backend>)
    })
}

fn request(model: &str, v: f32) -> InferRequest {
    InferRequest::new(model, vec![Tensor::new("IN", DataType::F32, vec![1], Bytes::from(v.to_le_bytes().to_vec()))])
}

/// Runs 4 requests on each of two models at once; the number of their executions that overlap.
async fn overlaps(shared: Shared) -> usize {
    let engine = Engine::new();
    let spans: Spans = Arc::default();
    let arbiter = engine.handle();
    let a = ModelHandle::load_shared(&arbiter, policy("a", Some("R"), false), factory("a", spans.clone()), &shared);
    let b = ModelHandle::load_shared(&arbiter, policy("b", Some("R"), false), factory("b", spans.clone()), &shared);
    let (a, b) = (a.await.unwrap(), b.await.unwrap());
    let calls = (0..4).flat_map(|i| [a.infer(request("a", i as f32)), b.infer(request("b", i as f32))]);
    for r in futures::future::join_all(calls).await {
        r.unwrap();
    }
    a.unload().await;
    b.unload().await;
    let spans = spans.lock().unwrap().clone();
    assert_eq!(spans.len(), 8);
    let (sa, sb): (Vec<_>, Vec<_>) = spans.into_iter().partition(|s| s.0 == "a");
    sa.iter().flat_map(|x| sb.iter().map(move |y| (x, y))).filter(|(x, y)| x.1 < y.2 && y.1 < x.2).count()
}

#[actix_rt::test]
async fn models_sharing_one_copy_of_a_resource_never_execute_together_and_do_without_the_limiter() {
    let limited = Shared { limiter: Some(Arc::new(RateLimiter::new(Vec::new()))), ..Shared::default() };
    assert_eq!(overlaps(limited).await, 0);
    assert!(overlaps(Shared::default()).await > 0);
}

#[actix_rt::test]
async fn a_repeated_request_is_answered_from_the_cache_without_running_the_model() {
    let engine = Engine::new();
    let spans: Spans = Arc::default();
    let shared = Shared { cache: Some(Arc::new(ResponseCache::new(1 << 20))), ..Shared::default() };
    let m = ModelHandle::load_shared(&engine.handle(), policy("c", None, true), factory("c", spans.clone()), &shared)
        .await
        .unwrap();
    assert!(m.caches());
    let first = m.infer(request("c", 7.0)).await.unwrap();
    let again = m.infer(request("c", 7.0)).await.unwrap();
    assert_eq!(first.outputs, again.outputs);
    m.infer(request("c", 8.0)).await.unwrap();
    assert_eq!(spans.lock().unwrap().len(), 2, "the hit did not run the model");
    let s = m.stats.snapshot();
    assert_eq!((s.success.0, s.execution_count, s.inference_count, s.cache_hit.0, s.cache_miss.0), (3, 2, 2, 1, 2));
    assert_eq!((s.queue.0, s.compute_infer.0), (3, 2), "a hit has a queue time and no compute");
    assert_eq!(s.pending, 0);
    m.unload().await;
}
