//! The ensemble actor: a model with `platform: "ensemble"` runs its graph of steps. Each
//! ensemble request is taken by one of the ensemble's instances, which starts every step whose
//! inputs exist, sends each step's request through that model's own scheduler (so composing
//! models batch with other traffic), runs independent branches at the same time and passes
//! tensors on without copying their data. A step that is all the request waits for may run on
//! the ensemble instance's own thread, as a frontend runs a lone request (`Route::submit_here`):
//! a chain of small steps on idle models then wakes no other thread. A failing step fails the
//! request with the step's name; the sibling steps still queued are dropped (their replies close).
//!
//! The engine does not know where models live: it reaches the composing models through
//! `Route`, which the server implements over its repository.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Instant;

use futures::stream::{FuturesUnordered, StreamExt as _};

use crate::backend::{Backend, BackendFactory, BatchInput, InstanceSpec};
use crate::error::{Error, Result};
use crate::histogram::{Histogram, LATENCY_US_BOUNDS};
use crate::request::{InferRequest, Reply, RequestedOutput};
use crate::stats::ComputeTimes;
use crate::tensor::Tensor;
use crate::trace;

/// How many ensemble requests run at once (each holds one ensemble instance thread while its
/// steps run in the composing models).
pub const ENSEMBLE_CONCURRENCY: usize = 16;

/// How the ensemble actor reaches a composing model.
pub trait Route: Send + Sync + 'static {
    /// Queues `request` in the named model (`None` = its latest ready version); its answer
    /// comes on `reply`.
    fn submit(&self, model: &str, version: Option<i64>, request: InferRequest, reply: Reply) -> Result<()>;

    /// `submit`, for a caller that awaits the answer at once: the step may run on the calling
    /// thread where its model allows it (`ModelHandle::submit_here`).
    fn submit_here(&self, model: &str, version: Option<i64>, request: InferRequest, reply: Reply) -> Result<()> {
        self.submit(model, version, request, reply)
    }
}

/// One step of an ensemble.
#[derive(Debug, Clone, PartialEq)]
pub struct Step {
    pub model: String,
    /// `None` = the latest ready version (`model_version: -1`, or left out).
    pub version: Option<i64>,
    /// (the step model's input, the ensemble tensor it reads), sorted by input name.
    pub inputs: Vec<(String, String)>,
    /// (the step model's output, the ensemble tensor it writes), sorted by output name.
    pub outputs: Vec<(String, String)>,
}

/// What the ensemble actor runs: a checked graph of steps.
#[derive(Debug, Clone, PartialEq)]
pub struct Plan {
    pub name: String,
    pub steps: Vec<Step>,
    /// The ensemble's outputs, answered when a request names none.
    pub outputs: Vec<String>,
}

/// Per-step latency of one ensemble version: from the step's request being queued in its
/// model to its answer, in µs, for `tritium_ensemble_step_duration_us`.
#[derive(Debug)]
pub struct StepFigures {
    /// (composing model, latency), in step order.
    pub steps: Vec<(String, Histogram)>,
}

impl StepFigures {
    pub fn new(plan: &Plan) -> Self {
        StepFigures { steps: plan.steps.iter().map(|s| (s.model.clone(), Histogram::new(LATENCY_US_BOUNDS))).collect() }
    }
}

/// Makes the ensemble actors of one ensemble version.
pub struct EnsembleFactory<R: Route> {
    plan: Arc<Plan>,
    router: Arc<R>,
    figures: Arc<StepFigures>,
}

impl<R: Route> EnsembleFactory<R> {
    pub fn new(plan: Plan, router: Arc<R>, figures: Arc<StepFigures>) -> Self {
        EnsembleFactory { plan: Arc::new(plan), router, figures }
    }
}

impl<R: Route> BackendFactory for EnsembleFactory<R> {
    fn create(&self, _: &InstanceSpec) -> Result<Box<dyn Backend>> {
        Ok(Box::new(EnsembleActor {
            plan: self.plan.clone(),
            router: self.router.clone(),
            figures: self.figures.clone(),
            steps_times: None,
        }))
    }
}

/// One ensemble instance: runs one ensemble request at a time through its steps.
pub struct EnsembleActor<R: Route> {
    plan: Arc<Plan>,
    router: Arc<R>,
    figures: Arc<StepFigures>,
    /// The last request's steps' times, summed.
    steps_times: Option<ComputeTimes>,
}

impl<R: Route> Backend for EnsembleActor<R> {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        let mut times = ComputeTimes::default();
        let result = futures::executor::block_on(run(&self.plan, &*self.router, &self.figures, batch, &mut times));
        self.steps_times = Some(times);
        result
    }

    /// Triton sets an ensemble's queue and compute times to the sums of its steps'.
    fn reported_times(&mut self) -> Option<ComputeTimes> {
        self.steps_times.take()
    }
}

fn step_error(plan: &Plan, i: usize, e: Error) -> Error {
    let step = &plan.steps[i];
    Error::new(e.kind, format!("in ensemble '{}', step {} ('{}'): {}", plan.name, i + 1, step.model, e.message))
}

async fn run<R: Route>(
    plan: &Plan,
    router: &R,
    figures: &StepFigures,
    batch: BatchInput<'_>,
    times: &mut ComputeTimes,
) -> Result<Vec<Tensor>> {
    let origin = batch.request;
    let mut tensors: HashMap<String, Tensor> = batch.inputs.iter().map(|t| (t.name.clone(), t.clone())).collect();
    let mut started = vec![false; plan.steps.len()];
    let mut running = FuturesUnordered::new();
    loop {
        let ready: Vec<usize> = (0..plan.steps.len())
            .filter(|&i| !started[i] && plan.steps[i].inputs.iter().all(|(_, t)| tensors.contains_key(t)))
            .collect();
        // A step that is all the request waits for (no other step ready or running) may run on
        // this thread (a lone request on a free instance whose backend allows it): no wake-up
        // of the step's instance thread, nor of this one for the answer. Steps that can run at
        // once go to their instances, to run side by side.
        let here = ready.len() == 1 && running.is_empty();
        for i in ready {
            let step = &plan.steps[i];
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
            // The ensemble's statistics add up its steps' times, as Triton's do.
            request.wants_times = true;
            if let Some(o) = origin {
                // Id, sequence flags, priority, timeout, the client's deadline and parameters
                // pass through to each step.
                request.id = o.id.clone();
                request.sequence = o.sequence.clone();
                request.priority = o.priority;
                request.timeout_us = o.timeout_us;
                request.client_deadline = o.client_deadline;
                request.parameters = o.parameters.clone();
            }
            request.outputs =
                step.outputs.iter().map(|(o, _)| RequestedOutput { name: o.clone(), class_count: 0 }).collect();
            // A traced ensemble request traces each step as a child of its own trace.
            let child = origin.and_then(|o| o.trace.as_ref()).map(|t| {
                t.set_ensemble();
                t.child(&step.model)
            });
            if let Some(c) = &child {
                c.record(trace::REQUEST_START);
                c.set_request_id(&request.id);
            }
            request.trace = child.clone();
            let (reply, rx) = Reply::once();
            let queued = Instant::now();
            let submitted = if here {
                router.submit_here(&step.model, step.version, request, reply)
            } else {
                router.submit(&step.model, step.version, request, reply)
            };
            submitted.map_err(|e| step_error(plan, i, e))?;
            running.push(async move { (i, queued, child, rx.await) });
        }
        let Some((i, queued, child, answer)) = running.next().await else { break };
        figures.steps[i].1.record_us(queued.elapsed());
        if let Some(c) = &child {
            c.record(trace::REQUEST_END);
        }
        let response = answer
            .map_err(|_| step_error(plan, i, Error::internal("the composing model dropped the request")))?
            .map_err(|e| step_error(plan, i, e))?;
        if let Some(c) = &child {
            c.set_version(response.version);
        }
        if let Some(t) = response.times {
            *times += t;
        }
        for t in response.outputs {
            if let Some((_, tensor)) = plan.steps[i].outputs.iter().find(|(o, _)| *o == t.name) {
                tensors.insert(tensor.clone(), Tensor::new(tensor.clone(), t.datatype, t.shape, t.data));
            }
        }
    }
    let wanted: Vec<&str> = if batch.outputs.is_empty() {
        plan.outputs.iter().map(String::as_str).collect()
    } else {
        batch.outputs.iter().map(String::as_str).collect()
    };
    wanted
        .into_iter()
        .map(|name| {
            tensors.remove(name).ok_or_else(|| {
                Error::internal(format!("ensemble '{}': no step produced output '{name}' for this request", plan.name))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use bytes::Bytes;

    use super::*;
    use crate::tensor::DataType;

    /// Answers each step at once, its first input as its output, and notes how it was submitted.
    #[derive(Default)]
    struct Echo {
        calls: Mutex<Vec<(String, bool)>>,
    }

    impl Echo {
        fn answer(&self, model: &str, here: bool, request: InferRequest, reply: Reply) -> Result<()> {
            self.calls.lock().unwrap().push((model.to_string(), here));
            let first = &request.inputs[0];
            let out =
                Tensor::new(request.outputs[0].name.clone(), first.datatype, first.shape.clone(), first.data.clone());
            reply.send(Ok(crate::backend::response(&request.id, model, 1, vec![out], true)));
            Ok(())
        }
    }

    impl Route for Echo {
        fn submit(&self, model: &str, _: Option<i64>, request: InferRequest, reply: Reply) -> Result<()> {
            self.answer(model, false, request, reply)
        }

        fn submit_here(&self, model: &str, _: Option<i64>, request: InferRequest, reply: Reply) -> Result<()> {
            self.answer(model, true, request, reply)
        }
    }

    fn step(model: &str, inputs: &[&str], output: &str) -> Step {
        Step {
            model: model.into(),
            version: None,
            inputs: inputs.iter().enumerate().map(|(i, t)| (format!("IN{i}"), t.to_string())).collect(),
            outputs: vec![("OUT".into(), output.into())],
        }
    }

    /// Runs `steps` on one request whose input is `X`; how each step was submitted, and the
    /// ensemble's output `Y`.
    fn submitted(steps: Vec<Step>) -> (Vec<(String, bool)>, Vec<Tensor>) {
        let plan = Plan { name: "e".into(), steps, outputs: vec!["Y".into()] };
        let echo = Echo::default();
        let x = [Tensor::new("X", DataType::I32, vec![1], Bytes::from_static(&[7, 0, 0, 0]))];
        let batch = BatchInput {
            inputs: &x,
            outputs: &[],
            batch_size: 1,
            request: None,
            requests: &[],
            cancelled: &[],
            early: &[],
        };
        let out =
            futures::executor::block_on(run(&plan, &echo, &StepFigures::new(&plan), batch, &mut Default::default()));
        (echo.calls.into_inner().unwrap(), out.unwrap())
    }

    #[test]
    fn a_step_the_request_waits_for_alone_may_run_here_and_branches_go_to_their_instances() {
        let (calls, out) = submitted(vec![step("pre", &["X"], "T"), step("model", &["T"], "Y")]);
        assert_eq!(calls, [("pre".to_string(), true), ("model".to_string(), true)], "a chain: each step alone");
        assert_eq!(&out[0].data[..], &[7, 0, 0, 0]);
        let diamond = vec![step("a", &["X"], "A"), step("b", &["X"], "B"), step("join", &["A", "B"], "Y")];
        let (calls, _) = submitted(diamond);
        let expected = [("a".to_string(), false), ("b".to_string(), false), ("join".to_string(), true)];
        assert_eq!(calls, expected, "two branches run side by side; the join alone");
    }
}
