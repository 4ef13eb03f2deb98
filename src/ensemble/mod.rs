//! Ensembles on the server's side: reading and checking an ensemble's graph from its
//! `ensemble_scheduling` config (`graph`). The ensemble actor that runs the graph is the
//! engine's (`tritium_actors::ensemble`); the server reaches composing models for it through
//! the repository's router, which implements the engine's `Route`.

pub mod graph;

pub use graph::Graph;
pub use tritium_actors::ensemble::{EnsembleFactory, StepFigures};
