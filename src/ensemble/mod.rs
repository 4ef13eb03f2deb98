//! The ensemble actor: `platform: "ensemble"` runs its `ensemble_scheduling` graph. Each
//! ensemble request is taken by one of the ensemble's instance actors, which starts every step
//! whose inputs exist, sends each step's request through that model's own scheduler (so
//! composing models batch with other traffic), runs independent branches at the same time and
//! passes tensors on without copying their data. A failing step fails the request with the
//! step's name; the sibling steps still queued are dropped (their replies close).

pub mod graph;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt as _};
pub use graph::{is_ensemble, Graph};
use tritium_actors::figures::{Histogram, LATENCY_US_BOUNDS};
use tritium_actors::stats::ComputeTimes;
use tritium_actors::{
    Backend, BackendFactory, BatchInput, Error, InferRequest, InstanceSpec, Reply, RequestedOutput, Result, Tensor,
};

use crate::repository::Router;

/// How many ensemble requests run at once (each holds one ensemble instance thread while its
/// steps run in the composing models).
pub const ENSEMBLE_CONCURRENCY: usize = 16;

/// Per-step latency of one ensemble version: from the step's request being queued in its
/// model to its answer, in µs, for `tritium_ensemble_step_duration_us`.
#[derive(Debug)]
pub struct StepFigures {
    /// (composing model, latency), in step order.
    pub steps: Vec<(String, Histogram)>,
}

impl StepFigures {
    pub fn new(graph: &Graph) -> Self {
        StepFigures {
            steps: graph.steps.iter().map(|s| (s.model.clone(), Histogram::new(LATENCY_US_BOUNDS))).collect(),
        }
    }
}

pub struct EnsembleFactory {
    graph: Arc<Graph>,
    router: Arc<Router>,
    figures: Arc<StepFigures>,
}

impl EnsembleFactory {
    pub fn new(graph: Graph, router: Arc<Router>, figures: Arc<StepFigures>) -> Self {
        EnsembleFactory { graph: Arc::new(graph), router, figures }
    }
}

impl BackendFactory for EnsembleFactory {
    fn create(&self, _: &InstanceSpec) -> Result<Box<dyn Backend>> {
        Ok(Box::new(Ensemble {
            graph: self.graph.clone(),
            router: self.router.clone(),
            figures: self.figures.clone(),
            steps_times: None,
        }))
    }
}

struct Ensemble {
    graph: Arc<Graph>,
    router: Arc<Router>,
    figures: Arc<StepFigures>,
    /// The last request's steps' times, summed.
    steps_times: Option<ComputeTimes>,
}

impl Backend for Ensemble {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        let mut times = ComputeTimes::default();
        let result = futures::executor::block_on(run(&self.graph, &self.router, &self.figures, batch, &mut times));
        self.steps_times = Some(times);
        result
    }

    /// Triton sets an ensemble's queue and compute times to the sums of its steps'.
    fn reported_times(&mut self) -> Option<ComputeTimes> {
        self.steps_times.take()
    }
}

fn step_error(graph: &Graph, i: usize, e: Error) -> Error {
    let step = &graph.steps[i];
    Error::new(e.kind, format!("in ensemble '{}', step {} ('{}'): {}", graph.name, i + 1, step.model, e.message))
}

async fn run(
    graph: &Graph,
    router: &Router,
    figures: &StepFigures,
    batch: BatchInput<'_>,
    times: &mut ComputeTimes,
) -> Result<Vec<Tensor>> {
    let origin = batch.request;
    let mut tensors: HashMap<String, Tensor> = batch.inputs.iter().map(|t| (t.name.clone(), t.clone())).collect();
    let mut started = vec![false; graph.steps.len()];
    let mut running = FuturesUnordered::new();
    loop {
        for (i, step) in graph.steps.iter().enumerate() {
            if started[i] || !step.inputs.iter().all(|(_, t)| tensors.contains_key(t)) {
                continue;
            }
            started[i] = true;
            let inputs = step
                .inputs
                .iter()
                .map(|(model_input, t)| {
                    let src = &tensors[t];
                    Tensor::new(model_input.clone(), src.datatype, src.shape.clone(), src.data.clone())
                })
                .collect();
            let mut request = InferRequest::new(step.model.clone(), inputs);
            request.version = step.version;
            if let Some(o) = origin {
                // Id, sequence flags, priority, timeout and parameters pass through to each step.
                request.id = o.id.clone();
                request.sequence = o.sequence.clone();
                request.priority = o.priority;
                request.timeout_us = o.timeout_us;
                request.parameters = o.parameters.clone();
            }
            request.outputs =
                step.outputs.iter().map(|(o, _)| RequestedOutput { name: o.clone(), class_count: 0 }).collect();
            let model = router.get(&step.model, step.version).map_err(|e| step_error(graph, i, e))?;
            let (reply, rx) = Reply::once();
            model.handle.submit(request, reply).map_err(|e| step_error(graph, i, e))?;
            let queued = Instant::now();
            running.push(async move { (i, queued, rx.await) });
        }
        let Some((i, queued, answer)) = running.next().await else { break };
        figures.steps[i].1.record_us(queued.elapsed());
        let response = answer
            .map_err(|_| step_error(graph, i, Error::internal("the composing model dropped the request")))?
            .map_err(|e| step_error(graph, i, e))?;
        if let Some(t) = response.times {
            *times += t;
        }
        for t in response.outputs {
            if let Some((_, tensor)) = graph.steps[i].outputs.iter().find(|(o, _)| *o == t.name) {
                tensors.insert(tensor.clone(), Tensor::new(tensor.clone(), t.datatype, t.shape, t.data));
            }
        }
    }
    let wanted: Vec<&str> = if batch.outputs.is_empty() {
        graph.outputs.iter().map(|(n, _, _)| n.as_str()).collect()
    } else {
        batch.outputs.iter().map(String::as_str).collect()
    };
    wanted
        .into_iter()
        .map(|name| {
            tensors.remove(name).ok_or_else(|| {
                Error::internal(format!("ensemble '{}': no step produced output '{name}' for this request", graph.name))
            })
        })
        .collect()
}
