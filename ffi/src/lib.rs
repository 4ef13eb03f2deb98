//! Tritium's one crate for foreign code.
//!
//! Everything that calls into C or C++ libraries without a safe Rust crate in between lives
//! here, each `unsafe` block with its `SAFETY:` reason, so the rest of the workspace stays safe
//! Rust. Modules:
//! - [`cuda`]: enabling CUDA at run time (the `libtorch_cuda.so` beside the libtorch in use) and the C++ shim
//!   over libtorch's CUDA streams, graphs and events, which `tch` does not expose.
//! - [`backend_api`]: the host of Triton backend libraries (Triton's Python backend first): the
//!   `TRITONSERVER_*`/`TRITONBACKEND_*` functions a backend calls, and loading and driving it.
//! - [`heap`]: how much memory the C allocator holds free, and giving it back to the system.
#![deny(unsafe_op_in_unsafe_fn)]
pub mod backend_api;
pub mod cuda;
pub mod heap;
