//! Tritium's engine: tensors, requests and responses, the `Backend` trait, and the design's
//! actors that schedule and run models — the batcher actor and the sequence actor (one
//! scheduler actor over the dynamic or the sequence batcher, `scheduler::{BatcherActor,
//! SequenceActor}`), the supervisor (`supervisor::Supervisor`) and the instances it owns
//! (`instance`), and the ensemble actor (`ensemble::EnsembleActor`). The messages between them
//! are in `protocol`. It knows nothing of HTTP, gRPC, `config.pbtxt` or any model library;
//! `docs/architecture.md` maps the design to these types.

pub mod backend;
pub mod batch;
pub mod batcher;
pub mod cache;
pub mod clock;
pub mod ensemble;
pub mod error;
pub mod exit;
pub mod figures;
pub mod handle;
pub mod histogram;
pub mod instance;
mod lane;
pub mod limiter;
pub mod mailbox;
pub mod ordering;
pub mod policy;
pub mod protocol;
pub mod queue;
pub mod request;
pub mod scheduler;
pub mod sequence;
pub mod stats;
pub mod supervisor;
pub mod tensor;
pub mod timer;
pub mod trace;
pub mod validate;
mod warmup;

pub use backend::{
    AnswerEarly, Backend, BackendFactory, BackendReport, BatchInput, EarlyReply, InstanceKind, InstanceSpec,
};
pub use error::{Error, ErrorKind, Result};
pub use exit::{ExitCause, InstanceExit};
pub use handle::{Engine, ModelHandle, Shared};
pub use instance::INLINE_MAX_COMPUTE;
pub use policy::{
    ControlKind, ControlSpec, DynamicBatchPolicy, InitialState, IoSpec, ModelPolicy, QueuePolicy, SchedulerPolicy,
    SequencePolicy, SequenceStrategy, StateSpec, TimeoutAction, WarmupSample,
};
pub use request::{
    CorrelationId, InferRequest, InferResponse, ParamValue, Parameters, Reply, RequestedOutput, SequenceFlags,
};
pub use scheduler::{BatcherActor, SequenceActor};
pub use stats::{
    ComputeTimes, MemoryUsage, MemoryUsageSource, ModelStats, ResponseFigures, ResponseKind, ResponseReport,
    StatsSnapshot,
};
pub use supervisor::Supervisor;
pub use tensor::{DataType, Tensor};
pub use trace::Trace;
