//! The checks Triton makes on a config before loading it, with messages that name the model
//! and the field. Run after auto-completion and normalization.

use std::collections::HashSet;

use tritium_actors::{Error, Result};

use super::model_config::SchedulingChoice;
use super::{engine_data_type, ModelConfig, ModelTensorReshape};

fn invalid(config: &ModelConfig, message: impl std::fmt::Display) -> Error {
    Error::invalid(format!("model '{}': {message}", config.name))
}

fn check_dims(
    config: &ModelConfig,
    what: &str,
    name: &str,
    dims: &[i64],
    reshape: Option<&ModelTensorReshape>,
) -> Result<()> {
    if let Some(bad) = dims.iter().find(|d| **d < -1 || **d == 0) {
        return Err(invalid(
            config,
            format!("{what} '{name}' dimension {bad} in dims {dims:?} must be positive or -1"),
        ));
    }
    if let Some(reshape) = reshape {
        if let Some(bad) = reshape.shape.iter().find(|d| **d < -1) {
            return Err(invalid(config, format!("{what} '{name}' reshape dimension {bad} must be >= -1")));
        }
        let fixed = |d: &[i64]| (!d.contains(&-1)).then(|| d.iter().product::<i64>());
        if let (Some(a), Some(b)) = (fixed(dims), fixed(&reshape.shape)) {
            if a != b {
                return Err(invalid(
                    config,
                    format!("{what} '{name}' has different size for dims {dims:?} and reshape {:?}", reshape.shape),
                ));
            }
        }
    }
    Ok(())
}

/// Validates a normalized config.
pub fn validate(config: &ModelConfig) -> Result<()> {
    if config.name.is_empty() {
        return Err(Error::invalid("model configuration must specify 'name'"));
    }
    if config.backend.is_empty() && config.platform.is_empty() {
        return Err(invalid(config, "must specify 'platform' or 'backend'"));
    }
    if config.max_batch_size < 0 {
        return Err(invalid(config, format!("'max_batch_size' must be non-negative, got {}", config.max_batch_size)));
    }
    let ensemble = matches!(config.scheduling_choice, Some(SchedulingChoice::EnsembleScheduling(_)));
    if config.input.is_empty() && !ensemble {
        return Err(invalid(
            config,
            "must specify at least one 'input' (or enable auto-complete with --strict-model-config=false)",
        ));
    }
    if config.output.is_empty() && !ensemble {
        return Err(invalid(
            config,
            "must specify at least one 'output' (or enable auto-complete with --strict-model-config=false)",
        ));
    }
    let mut seen = HashSet::new();
    for input in &config.input {
        if input.name.is_empty() {
            return Err(invalid(config, "an input has no 'name'"));
        }
        if !seen.insert(input.name.as_str()) {
            return Err(invalid(config, format!("input '{}' is declared twice", input.name)));
        }
        if engine_data_type(input.data_type).is_none() {
            return Err(invalid(config, format!("input '{}' must specify a valid 'data_type'", input.name)));
        }
        check_dims(config, "input", &input.name, &input.dims, input.reshape.as_ref())?;
    }
    let mut seen = HashSet::new();
    for output in &config.output {
        if output.name.is_empty() {
            return Err(invalid(config, "an output has no 'name'"));
        }
        if !seen.insert(output.name.as_str()) {
            return Err(invalid(config, format!("output '{}' is declared twice", output.name)));
        }
        if engine_data_type(output.data_type).is_none() {
            return Err(invalid(config, format!("output '{}' must specify a valid 'data_type'", output.name)));
        }
        check_dims(config, "output", &output.name, &output.dims, output.reshape.as_ref())?;
    }
    if let Some(SchedulingChoice::DynamicBatching(db)) = &config.scheduling_choice {
        if config.max_batch_size == 0 && !db.preferred_batch_size.is_empty() {
            return Err(invalid(config, "'preferred_batch_size' needs 'max_batch_size' > 0"));
        }
        for size in &db.preferred_batch_size {
            if *size < 1 || *size > config.max_batch_size {
                return Err(invalid(
                    config,
                    format!("dynamic batching preferred size {size} must be in 1..={}", config.max_batch_size),
                ));
            }
        }
        if db.priority_levels > 0 {
            if db.default_priority_level < 1 || db.default_priority_level > db.priority_levels {
                return Err(invalid(
                    config,
                    format!(
                        "default_priority_level {} must be in 1..={}",
                        db.default_priority_level, db.priority_levels
                    ),
                ));
            }
            if let Some(level) = db.priority_queue_policy.keys().find(|l| **l < 1 || **l > db.priority_levels) {
                return Err(invalid(
                    config,
                    format!("priority_queue_policy level {level} must be in 1..={}", db.priority_levels),
                ));
            }
        } else if !db.priority_queue_policy.is_empty() {
            return Err(invalid(config, "'priority_queue_policy' needs 'priority_levels' > 0"));
        }
    }
    for group in &config.instance_group {
        if group.count < 1 {
            return Err(invalid(config, format!("instance group '{}' must have 'count' >= 1", group.name)));
        }
        // Normalization turns KIND_AUTO into KIND_GPU only for a backend that can use a GPU here.
        // PyTorch and ONNX models check their GPU instances when making them (CUDA on, the
        // provider in the ONNX Runtime library); every other backend runs on the CPU only.
        let gpu_backend = matches!(config.backend.as_str(), "pytorch" | "onnxruntime");
        if group.kind == crate::config::model_instance_group::Kind::Gpu as i32 && !gpu_backend {
            let ids: Vec<String> = group.gpus.iter().map(|g| g.to_string()).collect();
            return Err(invalid(
                config,
                format!(
                    "instance group '{}' asks for KIND_GPU (gpus [{}]), but Tritium runs '{}' models on the CPU only (GPUs serve PyTorch and ONNX models); use KIND_CPU or KIND_AUTO",
                    group.name,
                    ids.join(", "),
                    config.backend
                ),
            ));
        }
        // Normalization lists every usable GPU for a KIND_GPU group without `gpus`; none listed
        // means none is usable here for this backend (no CUDA, or a library without a GPU provider).
        if group.kind == crate::config::model_instance_group::Kind::Gpu as i32 && group.gpus.is_empty() {
            return Err(invalid(
                config,
                format!(
                    "instance group '{}' asks for KIND_GPU on every GPU, but no GPU is usable here for '{}' models; list the GPU ids in 'gpus' (a GPU instance's load then says what is missing) or use KIND_AUTO",
                    group.name, config.backend
                ),
            ));
        }
        if group.gpus.iter().any(|g| *g < 0) {
            return Err(invalid(config, format!("instance group '{}' has a negative GPU id", group.name)));
        }
    }
    // Triton's own texts for these three.
    if ensemble && !config.model_warmup.is_empty() {
        return Err(Error::invalid(format!("model_warmup can not be specified for ensemble '{}'", config.name)));
    }
    if config.response_cache.as_ref().is_some_and(|c| c.enable) {
        if matches!(config.scheduling_choice, Some(SchedulingChoice::SequenceBatching(_))) {
            return Err(Error::invalid(format!(
                "Response Cache does not currently support model {} with sequence batching scheduler. Please disable the response cache.",
                config.name
            )));
        }
        if config.model_transaction_policy.as_ref().is_some_and(|t| t.decoupled) {
            return Err(Error::invalid(format!(
                "Response Cache does not currently support model {} with 'decoupled' transaction policy. Please disable the response cache.",
                config.name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{from_json, normalize};
    use super::*;

    #[test]
    fn kind_gpu_is_refused_without_gpu_execution() {
        let e = check(&format!(
            r#"{{"name":"m","backend":"identity",{IO},"instance_group":[{{"kind":"KIND_GPU","gpus":[0]}}]}}"#
        ))
        .unwrap_err();
        assert!(e.message.contains("KIND_GPU") && e.message.contains("gpus [0]"), "{e}");
        check(&format!(r#"{{"name":"m","backend":"onnxruntime",{IO},"instance_group":[{{"kind":"KIND_AUTO"}}]}}"#))
            .unwrap();
        check(&format!(r#"{{"name":"m","backend":"onnxruntime",{IO},"instance_group":[{{"kind":"KIND_MODEL"}}]}}"#))
            .unwrap();
        // PyTorch GPU instances pass here; whether CUDA serves them is checked when they are made.
        check(&format!(
            r#"{{"name":"m","backend":"pytorch",{IO},"instance_group":[{{"kind":"KIND_GPU","gpus":[0]}}]}}"#
        ))
        .unwrap();
        let e = check(&format!(
            r#"{{"name":"m","backend":"pytorch",{IO},"instance_group":[{{"kind":"KIND_GPU","gpus":[-1]}}]}}"#
        ))
        .unwrap_err();
        assert!(e.message.contains("negative GPU id"), "{e}");
        // Without `gpus` and without a usable GPU (normalized with 0 GPUs), the group would make no instance.
        let e = check(&format!(r#"{{"name":"m","backend":"pytorch",{IO},"instance_group":[{{"kind":"KIND_GPU"}}]}}"#))
            .unwrap_err();
        assert!(e.message.contains("asks for KIND_GPU on every GPU, but no GPU is usable here"), "{e}");
    }

    fn check(json: &str) -> Result<()> {
        let mut config = from_json(json).unwrap();
        normalize(&mut config, 0);
        validate(&config)
    }

    const IO: &str = r#""input":[{"name":"I","data_type":"TYPE_FP32","dims":[4]}],"output":[{"name":"O","data_type":"TYPE_FP32","dims":[4]}]"#;

    #[test]
    fn accepts_a_plain_config() {
        check(&format!(r#"{{"name":"m","backend":"onnxruntime","max_batch_size":8,{IO},"dynamic_batching":{{"preferred_batch_size":[4,8]}}}}"#)).unwrap();
    }

    #[test]
    fn rejects_what_triton_rejects() {
        let cases = [
            (format!(r#"{{"name":"m",{IO}}}"#), "'platform' or 'backend'"),
            (format!(r#"{{"name":"m","backend":"onnxruntime","max_batch_size":-1,{IO}}}"#), "non-negative"),
            (r#"{"name":"m","backend":"onnxruntime","output":[{"name":"O","data_type":"TYPE_FP32","dims":[1]}]}"#.to_string(), "at least one 'input'"),
            (r#"{"name":"m","backend":"onnxruntime","input":[{"name":"I","dims":[1]}],"output":[{"name":"O","data_type":"TYPE_FP32","dims":[1]}]}"#.to_string(), "valid 'data_type'"),
            (r#"{"name":"m","backend":"onnxruntime","input":[{"name":"I","data_type":"TYPE_FP32","dims":[0]}],"output":[{"name":"O","data_type":"TYPE_FP32","dims":[1]}]}"#.to_string(), "must be positive or -1"),
            (r#"{"name":"m","backend":"onnxruntime","input":[{"name":"I","data_type":"TYPE_FP32","dims":[4],"reshape":{"shape":[3]}}],"output":[{"name":"O","data_type":"TYPE_FP32","dims":[1]}]}"#.to_string(), "different size"),
            (format!(r#"{{"name":"m","backend":"onnxruntime","max_batch_size":4,{IO},"dynamic_batching":{{"preferred_batch_size":[8]}}}}"#), "preferred size 8"),
            (format!(r#"{{"name":"m","backend":"onnxruntime","max_batch_size":4,{IO},"dynamic_batching":{{"priority_levels":2,"default_priority_level":3}}}}"#), "default_priority_level"),
        ];
        let seq = r#""sequence_batching":{}"#;
        let cached = r#""response_cache":{"enable":true}"#;
        let more = [
            (
                r#"{"name":"e","platform":"ensemble","model_warmup":[{"name":"w","batch_size":1}],"ensemble_scheduling":{"step":[{"model_name":"m","model_version":-1}]}}"#.to_string(),
                "model_warmup can not be specified for ensemble 'e'",
            ),
            (
                format!(r#"{{"name":"m","backend":"onnxruntime",{IO},{seq},{cached}}}"#),
                "Response Cache does not currently support model m with sequence batching scheduler",
            ),
            (
                format!(
                    r#"{{"name":"m","backend":"onnxruntime",{IO},"model_transaction_policy":{{"decoupled":true}},{cached}}}"#
                ),
                "Response Cache does not currently support model m with 'decoupled' transaction policy",
            ),
        ];
        for (json, want) in cases.into_iter().chain(more) {
            let err = check(&json).unwrap_err();
            assert!(err.message.contains(want), "{json}: {}", err.message);
        }
    }
}
