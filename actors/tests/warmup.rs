//! Model warmup through the engine: samples run on every instance before the load resolves,
//! count in no statistic, and a failing sample fails the load with Triton's text.

use std::sync::{Arc, Mutex};

use bytes::Bytes;
use tritium_actors::*;

mod common;

/// Doubles every FP32 element; refuses a batch holding -1; records each execution's batch size
/// and the instance that ran it.
struct Double {
    instance: usize,
    seen: Arc<Mutex<Vec<(usize, usize)>>>,
}

impl Backend for Double {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        self.seen.lock().unwrap().push((self.instance, batch.batch_size));
        let input = &batch.inputs[0];
        let vals: Vec<f32> = input.data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
        if vals.contains(&-1.0) {
            return Err(Error::invalid("the test backend refuses -1"));
        }
        let out: Vec<u8> = vals.iter().flat_map(|v| (v * 2.0).to_le_bytes()).collect();
        Ok(vec![Tensor::new("OUT", DataType::F32, input.shape.clone(), Bytes::from(out))])
    }
}

fn tensor(vals: [f32; 2]) -> Tensor {
    let data: Vec<u8> = vals.iter().flat_map(|v| v.to_le_bytes()).collect();
    Tensor::new("IN", DataType::F32, vec![1, 2], Bytes::from(data))
}

fn policy(instances: usize, warmup: Vec<WarmupSample>) -> ModelPolicy {
    ModelPolicy {
        name: "double".into(),
        version: 1,
        max_batch_size: 8,
        inputs: vec![IoSpec::new("IN", DataType::F32, vec![2])],
        outputs: vec![IoSpec::new("OUT", DataType::F32, vec![2])],
        instances: common::cpu_instances("double", instances),
        scheduler: SchedulerPolicy::Direct,
        decoupled: false,
        queue_capacity: policy::DEFAULT_QUEUE_CAPACITY,
        warmup,
        response_cache: false,
    }
}

fn factory(seen: Arc<Mutex<Vec<(usize, usize)>>>) -> Arc<dyn BackendFactory> {
    Arc::new(move |spec: &InstanceSpec| -> Result<Box<dyn Backend>> {
        Ok(Box::new(Double { instance: spec.index, seen: seen.clone() }) as Box<dyn Backend>)
    })
}

fn sample(name: &str, batch_size: usize, count: usize, vals: [f32; 2]) -> WarmupSample {
    WarmupSample { name: name.into(), batch_size, count, inputs: vec![tensor(vals)] }
}

#[actix_rt::test]
async fn every_instance_runs_every_sample_before_the_load_resolves_and_nothing_is_counted() {
    let engine = Engine::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let warmup =
        vec![sample("pair", 2, 3, [1.0, 2.0]), sample("skipped", 0, 1, [1.0, 2.0]), sample("one", 1, 1, [3.0, 4.0])];
    let model = ModelHandle::load(&engine.handle(), policy(2, warmup), factory(seen.clone())).await.unwrap();
    let mut ran = seen.lock().unwrap().clone();
    ran.sort();
    // Per instance: "pair" three times as one batch of 2, "skipped" never, "one" once.
    assert_eq!(ran, vec![(0, 1), (0, 2), (0, 2), (0, 2), (1, 1), (1, 2), (1, 2), (1, 2)]);
    let s = model.stats.snapshot();
    assert_eq!((s.success.0, s.inference_count, s.execution_count), (0, 0, 0), "warmup counts in no statistic");
    assert!(s.batches.is_empty());
    assert!(model.figures.instance_snapshots().iter().all(|i| i.executions == 0 && i.busy_ns == 0));
    let r = model.infer(InferRequest::new("double", vec![tensor([5.0, 6.0])])).await.unwrap();
    assert_eq!(r.outputs[0].data, Bytes::from([10f32, 12.0].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<_>>()));
    assert_eq!(model.stats.snapshot().execution_count, 1);
    model.unload().await;
}

#[actix_rt::test]
async fn a_failing_sample_fails_the_load_with_its_name_and_the_backend_error() {
    let engine = Engine::new();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let warmup = vec![sample("fine", 1, 1, [1.0, 1.0]), sample("bad", 1, 5, [-1.0, 1.0])];
    let e = ModelHandle::load(&engine.handle(), policy(1, warmup), factory(seen.clone())).await.unwrap_err();
    assert_eq!(e.kind, ErrorKind::InvalidArgument);
    assert_eq!(e.message, "failed to run warmup sample 'bad': the test backend refuses -1; ");
    assert_eq!(seen.lock().unwrap().len(), 2, "the warmup ends at the first failure");
}
