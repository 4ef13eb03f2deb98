//! Tritium's one crate for foreign code.
//!
//! Everything that calls into C or C++ libraries without a safe Rust crate in between lives
//! here, each `unsafe` block with its `SAFETY:` reason, so the rest of the workspace stays safe
//! Rust.
#![deny(unsafe_op_in_unsafe_fn)]
