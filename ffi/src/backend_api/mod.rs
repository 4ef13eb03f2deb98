//! Tritium as a host for Triton backend libraries (`libtriton_<name>.so`, such as Triton's own
//! Python backend): the functions of `tritonbackend.h` and the `tritonserver.h` subset backends
//! call, with Triton's C ABI and semantics, and the loader that drives a backend through
//! `TRITONBACKEND_Initialize`, `ModelInitialize`, `ModelInstanceInitialize`,
//! `ModelInstanceExecute` and the finalizers.
//!
//! The declarations are Tritium's own, written from the public headers of
//! triton-inference-server/core. Every exported function goes through one boundary macro
//! (`boundary::export!`) that catches panics and checks pointers. The engine never sees this
//! module's C types: `host` is the safe API the `triton` backend of the binary uses.

#![warn(clippy::undocumented_unsafe_blocks)]

pub mod abi;
mod boundary;
mod buffer;
mod elf;
mod error;
pub mod exports;
mod host;
mod inprocess;
mod library;
mod memory_usage;
mod message;
mod metrics;
mod model;
mod request;
mod response;
mod response_stats;
mod state;
mod trace;

pub use host::{
    load_backend, BackendSpec, FinalHook, HostError, HostEvent, HostParam, HostRequest, HostResponse, HostTensor,
    InstanceSpec, LoadedBackend, LoadedInstance, LoadedModel, ModelSpec, Pending, ReportedStats,
};
pub use inprocess::{set_inference_server, EventSink, InProcessEvent, InProcessRequest, InferenceServer};
pub use memory_usage::MemoryUsage;
/// Custom metrics of backends in Prometheus text, for `/metrics`.
pub use metrics::render as metrics_text;
pub use response_stats::{ResponseOutcome, ResponseReport, ResponseStatsSink};
pub use trace::HostTrace;
