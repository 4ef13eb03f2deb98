//! The seam between the engine and a model library. A backend runs one instance's copy of a
//! model; it knows nothing of queues, batching or sequences.

use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::error::Result;
use crate::request::InferRequest;
use crate::tensor::Tensor;

/// Where and how an instance runs, from `instance_group`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstanceSpec {
    /// Triton's instance name: `<model>_<group>_<index>` or the group's own name.
    pub name: String,
    /// Position among the model's instances (0-based).
    pub index: usize,
    pub kind: InstanceKind,
    /// GPU ordinal for `KIND_GPU`.
    pub device: Option<i32>,
    /// The CPU cores the instance's thread is pinned to (Triton's host policy `cpu-cores`);
    /// empty = wherever the OS schedules it.
    pub cpu_cores: Vec<usize>,
    /// What the rate limiter asks of it (`instance_group.rate_limiter`).
    pub rate_limiter: RateLimiterSpec,
}

/// One resource an instance needs (`rate_limiter.resources`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceSpec {
    pub name: String,
    /// One pool for the whole server instead of one per device.
    pub global: bool,
    pub count: u64,
}

/// An instance's `rate_limiter`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RateLimiterSpec {
    pub resources: Vec<ResourceSpec>,
    /// Weighs the instance's executions (0 counts as 1): the higher, the later it goes.
    pub priority: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InstanceKind {
    Cpu,
    Gpu,
    Model,
}

/// One batch handed to a backend: the inputs merged along the batch dimension (or the single
/// request's inputs unchanged) and the union of the outputs wanted.
pub struct BatchInput<'a> {
    pub inputs: &'a [Tensor],
    /// Output names wanted by at least one request of the batch; empty = all.
    pub outputs: &'a [String],
    /// Total batch size (sum of the requests' first dims; 1 for non-batching models).
    pub batch_size: usize,
    /// The request itself when the batch holds exactly one (its id, parameters and sequence
    /// flags, for backends that pass them on, such as ensembles).
    pub request: Option<&'a InferRequest>,
    /// Every request of the batch, in order, for backends that take requests one by one (as
    /// Triton's backend API does); empty where the caller does not give them.
    pub requests: &'a [&'a InferRequest],
    /// Beside `requests`, for a backend that [`Backend::sees_cancellation`]: a flag per request
    /// that turns true (from the thread where the client goes, also while the backend runs)
    /// once its client has gone, cancelled or disconnected (`request.is_cancelled()`); empty
    /// where the caller does not say.
    pub cancelled: &'a [Arc<AtomicBool>],
    /// Beside `requests`, for a backend that [`Backend::answers_early`] (non-decoupled models):
    /// the reply of each request it may answer before `execute_each` returns (`None` where the
    /// engine must see the answer first); empty where the caller lends none. A request answered
    /// through it is done: its outcome from `execute_each` is ignored.
    pub early: &'a [Option<EarlyReply>],
}

/// A request's reply lent to a backend that [`Backend::answers_early`], while its batch runs
/// (the engine's side is the instance's `early` module).
pub trait AnswerEarly: Send + Sync {
    /// Answers the request now with its final response: its outputs (those the request asked
    /// for go out) or an error. True when this was the answer; false when the request was
    /// answered already or its batch is over (then the caller's answer goes nowhere).
    fn answer(&self, outcome: Result<Vec<Tensor>>) -> bool;
}

/// A lent reply ([`AnswerEarly`]): cheap to clone, usable from any thread.
pub type EarlyReply = Arc<dyn AnswerEarly>;

impl<'a> BatchInput<'a> {
    /// A batch with no requests behind it (a backend's own steps and tests): `inputs` as they
    /// are, the `outputs` wanted (empty = all).
    pub fn bare(inputs: &'a [Tensor], outputs: &'a [String], batch_size: usize) -> Self {
        BatchInput { inputs, outputs, batch_size, request: None, requests: &[], cancelled: &[], early: &[] }
    }
}

impl std::fmt::Debug for BatchInput<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BatchInput")
            .field("inputs", &self.inputs)
            .field("outputs", &self.outputs)
            .field("batch_size", &self.batch_size)
            .field("request", &self.request)
            .field("requests", &self.requests)
            .field("cancelled", &self.cancelled)
            .field("early", &self.early.iter().filter(|e| e.is_some()).count())
            .finish()
    }
}

/// One loaded copy of a model. Runs on the instance's own thread, one batch at a time.
pub trait Backend: Send {
    /// Runs a batch and returns its outputs, batched the same way as the inputs.
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>>;

    /// Runs a batch and answers each of its requests on its own: one outcome per request of
    /// the batch, in order, each holding that request's outputs (`sizes` are the requests'
    /// batch sizes). The engine calls this for every non-decoupled batch. The default runs
    /// `execute` and splits the batched outputs, so the batch succeeds or fails as a whole; a
    /// backend whose requests are answered separately (Triton's backend API, where one request
    /// of a dynamic batch may fail while the others succeed) overrides it. An `Err` fails every
    /// request of the batch.
    fn execute_each(&mut self, batch: BatchInput<'_>, sizes: &[usize]) -> Result<Vec<Result<Vec<Tensor>>>> {
        let outputs = self.execute(batch)?;
        Ok(crate::batch::split_outputs(outputs, sizes)?.into_iter().map(Ok).collect())
    }

    /// For decoupled models: runs one request and sends any number of responses through
    /// `emit`. The engine sends the final flag after this returns.
    fn execute_decoupled(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(Vec<Tensor>) -> Result<()>,
    ) -> Result<()> {
        let outputs = self.execute(batch)?;
        emit(outputs)
    }

    /// `execute_decoupled`, told which response is the request's last: `emit(outputs, true)`
    /// is sent as the final response, carrying the final flag (as a backend of Triton's API
    /// sends a response with `TRITONSERVER_RESPONSE_COMPLETE_FINAL`), instead of an empty final
    /// response after it. The default marks none final.
    fn execute_decoupled_final(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(Vec<Tensor>, bool) -> Result<()>,
    ) -> Result<()> {
        self.execute_decoupled(batch, &mut |outputs| emit(outputs, false))
    }

    /// For decoupled models: runs a batch, each request answering through `emit(index,
    /// outputs, is_final)` as `execute_decoupled_final` does; returns each request's failure
    /// (an `Err` fails them all). The engine hands several requests at once only to a backend
    /// whose factory says it takes them (`BackendFactory::decoupled_batches`); the default runs
    /// the lone request through `execute_decoupled_final`.
    fn execute_decoupled_each(
        &mut self,
        batch: BatchInput<'_>,
        emit: &mut dyn FnMut(usize, Vec<Tensor>, bool) -> Result<()>,
    ) -> Result<Vec<Option<crate::error::Error>>> {
        self.execute_decoupled_final(batch, &mut |outputs, is_final| emit(0, outputs, is_final))?;
        Ok(vec![None])
    }

    /// Whether a batch may run on another thread than the instance's own: the thread that
    /// submitted a lone request to a free instance runs it itself when the instance's recent
    /// executions were short (no thread wake-up to the instance and back). Only a backend whose
    /// runtime keeps no per-thread state between runs says yes (ONNX Runtime on the CPU); one
    /// bound to its thread (a Python process's stub, libtorch's thread-local modes, a CUDA
    /// stream) keeps the default.
    fn runs_inline(&self) -> bool {
        false
    }

    /// Whether it reads `BatchInput::cancelled` (the engine then watches each request's client
    /// while the batch runs).
    fn sees_cancellation(&self) -> bool {
        false
    }

    /// Whether it answers requests from inside `execute_each` through `BatchInput::early` (as
    /// Triton's backend API answers from `TRITONBACKEND_ResponseSend`): the engine then lends
    /// it the replies of the requests it may answer so.
    fn answers_early(&self) -> bool {
        false
    }

    /// Asked after every batch: an error says the instance cannot serve any more (a backend
    /// whose worker process died), and the supervisor replaces it with a new one.
    fn health(&mut self) -> Result<()> {
        Ok(())
    }

    /// After `execute` of a single request: the times its statistics should show instead of
    /// the instance's own measure. An ensemble reports the sum of its steps' queue and compute
    /// times, as Triton does (its own wall time would count waiting for the steps as compute).
    fn reported_times(&mut self) -> Option<crate::stats::ComputeTimes> {
        None
    }

    /// After `execute_each`: what the backend measured itself of that execution, where it
    /// measures (Triton's backend API: `ModelInstanceReportStatistics` and
    /// `ReportBatchStatistics`). The model's statistics then count what it reported, as
    /// Triton's do.
    fn backend_report(&mut self) -> Option<BackendReport> {
        None
    }

    /// After `execute_each` or `execute_decoupled`: the requests of that batch (their indices)
    /// the backend handed back to run again in a later batch, unanswered (Triton's
    /// `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`, which a backend may use only for an iterative
    /// sequence model). Their outcomes in that execution are ignored.
    fn take_rescheduled(&mut self) -> Vec<usize> {
        Vec::new()
    }
}

/// A backend's own statistics of one execution.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct BackendReport {
    /// Each execution it reported: its batch size and compute times. Empty when it reported
    /// none: the instance's own measure then counts the execution.
    pub batches: Vec<(u64, crate::stats::ComputeTimes)>,
    /// Beside each request of the batch, if reported: whether it counts as a success and its
    /// compute times (`queue` unused).
    pub requests: Vec<Option<(bool, crate::stats::ComputeTimes)>>,
}

impl BackendReport {
    /// Whether the backend reported anything of the execution (then its report is the whole
    /// account: an execution it did not report is not counted).
    pub fn measured(&self) -> bool {
        !self.batches.is_empty() || self.requests.iter().any(Option::is_some)
    }
}

/// Makes instances of one model version; called by the supervisor at load and on restart, on
/// the instance's own thread.
pub trait BackendFactory: Send + Sync {
    fn create(&self, instance: &InstanceSpec) -> Result<Box<dyn Backend>>;

    /// Whether its instances take a decoupled model's requests several at a time
    /// (`Backend::execute_decoupled_each`); a decoupled model's requests are batched only then.
    fn decoupled_batches(&self) -> bool {
        false
    }

    /// Called once the model version's statistics exist, before any instance: a backend that
    /// reports figures outside an execution (a backend library's response statistics, sent from
    /// any thread at any time) keeps them to record into.
    fn attach_stats(&self, _stats: &std::sync::Arc<crate::stats::ModelStats>) {}
}

impl<F> BackendFactory for F
where
    F: Fn(&InstanceSpec) -> Result<Box<dyn Backend>> + Send + Sync,
{
    fn create(&self, instance: &InstanceSpec) -> Result<Box<dyn Backend>> {
        self(instance)
    }
}

pub(crate) use crate::request::response;

#[cfg(test)]
mod report_tests {
    use super::BackendReport;
    use crate::stats::ComputeTimes;

    #[test]
    fn a_report_measures_once_the_backend_reported_anything() {
        assert!(!BackendReport::default().measured());
        assert!(!BackendReport { batches: vec![], requests: vec![None, None] }.measured());
        assert!(
            BackendReport { batches: vec![], requests: vec![None, Some((false, ComputeTimes::default()))] }.measured()
        );
        assert!(BackendReport { batches: vec![(1, ComputeTimes::default())], requests: vec![] }.measured());
    }
}
