//! What the engine needs to know of a model version, as plain structs. The server validates a
//! `config.pbtxt` into these once; the engine never reads the config itself.

use std::time::Duration;

use crate::backend::InstanceSpec;
use crate::tensor::{DataType, Tensor};

/// One input or output of a model.
#[derive(Debug, Clone, PartialEq)]
pub struct IoSpec {
    pub name: String,
    pub datatype: DataType,
    /// Dims without the batch dimension; -1 = any size.
    pub dims: Vec<i64>,
    /// What the backend sees instead of `dims` (`reshape { shape: [...] }`).
    pub reshape: Option<Vec<i64>>,
    pub optional: bool,
    pub allow_ragged_batch: bool,
    pub is_shape_tensor: bool,
}

impl IoSpec {
    pub fn new(name: impl Into<String>, datatype: DataType, dims: Vec<i64>) -> Self {
        IoSpec {
            name: name.into(),
            datatype,
            dims,
            reshape: None,
            optional: false,
            allow_ragged_batch: false,
            is_shape_tensor: false,
        }
    }
}

/// What a queue does with a request whose timeout passed before it ran.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutAction {
    Reject,
    Delay,
}

/// `ModelQueuePolicy`.
#[derive(Debug, Clone, PartialEq)]
pub struct QueuePolicy {
    pub timeout_action: TimeoutAction,
    pub default_timeout: Option<Duration>,
    pub allow_timeout_override: bool,
    /// 0 = unbounded in Triton; the engine still applies its own hard bound.
    pub max_queue_size: usize,
}

impl Default for QueuePolicy {
    fn default() -> Self {
        QueuePolicy {
            timeout_action: TimeoutAction::Reject,
            default_timeout: None,
            allow_timeout_override: false,
            max_queue_size: 0,
        }
    }
}

/// `dynamic_batching { ... }`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct DynamicBatchPolicy {
    pub preferred_batch_sizes: Vec<usize>,
    pub max_queue_delay: Duration,
    pub preserve_ordering: bool,
    pub priority_levels: u64,
    pub default_priority_level: u64,
    pub default_queue_policy: QueuePolicy,
    pub priority_queue_policy: Vec<(u64, QueuePolicy)>,
}

/// Which sequence flag or value a control input carries (`sequence_batching.control_input`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlKind {
    Start,
    End,
    Ready,
    CorrId,
}

/// One control input the sequence actor adds to every request of a sequence.
#[derive(Debug, Clone, PartialEq)]
pub struct ControlSpec {
    pub kind: ControlKind,
    pub input: String,
    pub datatype: DataType,
    /// The element for false and for true (`int32_false_true`, …); empty for CORRID.
    pub false_value: Vec<u8>,
    pub true_value: Vec<u8>,
}

/// How a sequence's implicit state starts.
#[derive(Debug, Clone, PartialEq)]
pub enum InitialState {
    Zero,
    /// Raw little-endian contents (from `initial_state { data_file }`).
    Data(bytes::Bytes),
}

/// One implicit state tensor (`sequence_batching.state`): fed as `input`, read back from
/// `output` after each request, owned by the engine between requests.
#[derive(Debug, Clone, PartialEq)]
pub struct StateSpec {
    pub input: String,
    pub output: String,
    pub datatype: DataType,
    /// Without the batch dimension; fixed sizes.
    pub dims: Vec<i64>,
    pub initial: InitialState,
}

/// `sequence_batching`'s strategy.
#[derive(Debug, Clone, PartialEq)]
pub enum SequenceStrategy {
    /// Each sequence keeps one slot of one instance for its whole life.
    Direct,
    /// Any free instance takes the oldest sequences that have a request ready.
    Oldest { max_candidate_sequences: usize, preferred_batch_sizes: Vec<usize>, max_queue_delay: Duration },
}

/// `sequence_batching { ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct SequencePolicy {
    pub strategy: SequenceStrategy,
    /// A sequence with no request for this long gives its slot up.
    pub max_idle: Duration,
    pub controls: Vec<ControlSpec>,
    pub states: Vec<StateSpec>,
    /// Sequences that may wait for a slot; a new sequence beyond it is refused at once.
    pub max_backlog: usize,
    /// How long a request of an unknown sequence, without START, waits for its START to arrive
    /// (separate unary calls of one sequence can reach the server out of order) before it is
    /// refused as Triton refuses it. Zero refuses at once.
    pub start_grace: Duration,
    /// The most bytes of implicit state the sequences may hold together; past it the
    /// longest-idle sequences are evicted (their next request is refused, saying so). None:
    /// no cap.
    pub max_state_bytes: Option<u64>,
    /// `iterative_sequence`: a request without a correlation ID starts a sequence of its own (an
    /// ID the batcher assigns), the backend may hand a request back to run again in a later
    /// batch (Triton's `TRITONSERVER_REQUEST_RELEASE_RESCHEDULE`), and the sequence ends when its
    /// request is done.
    pub iterative: bool,
}

/// The default `start_grace`.
pub const DEFAULT_START_GRACE: Duration = Duration::from_millis(50);

impl SequencePolicy {
    pub fn control(&self, kind: ControlKind) -> Option<&ControlSpec> {
        self.controls.iter().find(|c| c.kind == kind)
    }
}

/// Which scheduler fronts the instances.
#[derive(Debug, Clone, PartialEq)]
pub enum SchedulerPolicy {
    /// Each request goes alone to a free instance.
    Direct,
    /// The batcher merges requests.
    Dynamic(DynamicBatchPolicy),
    /// The sequence actor routes each correlation ID's requests and owns their state.
    Sequence(SequencePolicy),
}

/// One `model_warmup` sample: `batch_size` requests carrying `inputs`, run together `count`
/// times on every instance after it loads and before the model turns ready. A failing sample
/// fails the instance's load; warmup counts in no statistic.
#[derive(Debug, Clone, PartialEq)]
pub struct WarmupSample {
    pub name: String,
    /// Requests per execution (0: the sample is skipped, as Triton skips it).
    pub batch_size: usize,
    /// Executions (at least 1).
    pub count: usize,
    /// One request's inputs, with the batch dimension (1) when the model batches.
    pub inputs: Vec<Tensor>,
}

/// A model version, as the engine runs it.
#[derive(Debug, Clone, PartialEq)]
pub struct ModelPolicy {
    pub name: String,
    pub version: i64,
    /// 0 = the model does not batch; inputs carry no batch dimension.
    pub max_batch_size: usize,
    pub inputs: Vec<IoSpec>,
    pub outputs: Vec<IoSpec>,
    pub instances: Vec<InstanceSpec>,
    pub scheduler: SchedulerPolicy,
    pub decoupled: bool,
    /// Hard bound on queued requests, whatever the config says (bounded mailboxes everywhere).
    pub queue_capacity: usize,
    /// `model_warmup`, in order.
    pub warmup: Vec<WarmupSample>,
    /// `response_cache { enable: true }`: answers are cached when the engine has a cache.
    pub response_cache: bool,
}

/// The engine's bound on one model's queue when the config sets none.
pub const DEFAULT_QUEUE_CAPACITY: usize = 16_384;

impl ModelPolicy {
    pub fn batches(&self) -> bool {
        self.max_batch_size > 0
    }

    pub fn input(&self, name: &str) -> Option<&IoSpec> {
        self.inputs.iter().find(|i| i.name == name)
    }

    pub fn output(&self, name: &str) -> Option<&IoSpec> {
        self.outputs.iter().find(|o| o.name == name)
    }

    pub fn sequence(&self) -> Option<&SequencePolicy> {
        match &self.scheduler {
            SchedulerPolicy::Sequence(s) => Some(s),
            _ => None,
        }
    }
}
