//! Model configuration: Triton's `ModelConfig` message parsed from `config.pbtxt` or JSON,
//! printed as Triton's JSON, validated, and turned into the engine's `ModelPolicy`.

pub use crate::proto::inference::ModelConfig;
