//! Completing a missing or partial config from the model file (`--strict-model-config=false`),
//! as Triton's ONNX Runtime backend does: inputs and outputs with their datatypes and dims, and
//! `max_batch_size` (Triton's default of 4, with `dynamic_batching {}`) when every input and
//! output of the file has a variable first dimension. PyTorch configs cannot be completed (as in
//! Triton); for them this says exactly what the config lacks.

use std::path::Path;

use tritium_actors::Result;

use super::{backend_name, model_file, onnx, BackendEnv};
use crate::config::model_config::SchedulingChoice;
use crate::config::{proto_data_type, ModelConfig, ModelDynamicBatching, ModelInput, ModelOutput};

/// Triton's `--backend-config=default-max-batch-size`, 4 by default.
pub const DEFAULT_MAX_BATCH_SIZE: i32 = 4;

/// What auto-complete loaded and the load keeps until the versions' factories are made: a
/// Triton backend library stays initialized from its model's auto-complete to its factory
/// (not finalized between the two when no other model holds it).
#[derive(Default)]
pub struct Completed {
    _backend: Option<tritium_ffi::backend_api::LoadedBackend>,
}

/// Fills what the config leaves out from the latest version's model file.
pub fn autocomplete(config: &mut ModelConfig, model_dir: &Path, version: i64, env: &BackendEnv) -> Result<Completed> {
    let version_dir = model_dir.join(version.to_string());
    let Some(backend) = backend_name(config, &version_dir) else { return Ok(Completed::default()) };
    if config.backend.is_empty() && config.platform.is_empty() {
        config.backend = backend.clone();
    }
    if backend == "pytorch" {
        pytorch_says_what_is_missing(config, &model_file(config, model_dir, version, "model.pt"))?;
        return Ok(Completed::default());
    }
    if backend == "tensorflow" {
        tensorflow_auto_complete(config, &model_file(config, model_dir, version, "model.savedmodel"))?;
        return Ok(Completed::default());
    }
    if backend == "python" || super::triton::library_path(&env.backend_directory(), &backend).is_file() {
        let backend =
            super::triton::auto_complete(config, model_dir, version, &env.backend_directory(), &env.backend_config)?;
        return Ok(Completed { _backend: backend });
    }
    if backend != "onnxruntime" {
        return Ok(Completed::default());
    }
    let file = model_file(config, model_dir, version, "model.onnx");
    if !file.is_file() {
        // The factory reports the missing file.
        return Ok(Completed::default());
    }
    onnx::init_runtime(&env.onnxruntime_library())?;
    let (inputs, outputs) = onnx::inspect(&file)?;
    complete(config, &inputs, &outputs);
    Ok(Completed::default())
}

/// A SavedModel's config is completed from its serving signature (Triton's TensorFlow backend does
/// the same); without the `tensorflow` feature the factory says the backend is missing.
#[cfg(feature = "tensorflow")]
fn tensorflow_auto_complete(config: &mut ModelConfig, dir: &Path) -> Result<()> {
    if config.platform == "tensorflow_graphdef" || !dir.is_dir() {
        // The factory reports it.
        return Ok(());
    }
    super::tensorflow::auto_complete(config, dir)
}

#[cfg(not(feature = "tensorflow"))]
fn tensorflow_auto_complete(_config: &mut ModelConfig, _dir: &Path) -> Result<()> {
    Ok(())
}

/// Triton cannot complete a PyTorch config (a TorchScript file does not declare its tensors'
/// types and shapes); neither does Tritium, but it says exactly what the config lacks, with
/// `forward`'s argument names when the file tells them.
fn pytorch_says_what_is_missing(config: &ModelConfig, file: &Path) -> Result<()> {
    let mut missing = Vec::new();
    if config.input.is_empty() {
        missing.push("an input for each argument of forward".to_string());
    }
    if config.output.is_empty() {
        missing.push("an output for each element of forward's result".to_string());
    }
    for (kind, name, data_type, dims) in config
        .input
        .iter()
        .map(|i| ("input", &i.name, i.data_type, &i.dims))
        .chain(config.output.iter().map(|o| ("output", &o.name, o.data_type, &o.dims)))
    {
        if data_type == 0 {
            missing.push(format!("data_type of {kind} '{name}'"));
        }
        if dims.is_empty() {
            missing.push(format!("dims of {kind} '{name}'"));
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    let arguments = match super::pytorch::forward_arguments(file) {
        Some(args) => format!(" (forward takes: {})", args.join(", ")),
        None => String::new(),
    };
    Err(tritium_actors::Error::invalid(format!(
        "model '{}': a PyTorch model's config cannot be completed from its TorchScript file, which does not \
         declare its tensors' types and shapes; the config must give {}{arguments}",
        config.name,
        missing.join("; ")
    )))
}

fn batchable(io: &[onnx::OnnxIo]) -> bool {
    io.iter().all(|t| t.shape.first() == Some(&-1))
}

/// The pure part of auto-completion, given what the model file declares.
pub fn complete(config: &mut ModelConfig, inputs: &[onnx::OnnxIo], outputs: &[onnx::OnnxIo]) {
    let nothing_declared = config.input.is_empty() && config.output.is_empty();
    if config.max_batch_size == 0 && nothing_declared && !inputs.is_empty() && batchable(inputs) && batchable(outputs) {
        config.max_batch_size = DEFAULT_MAX_BATCH_SIZE;
        if config.scheduling_choice.is_none() {
            config.scheduling_choice = Some(SchedulingChoice::DynamicBatching(ModelDynamicBatching::default()));
        }
    }
    let skip = usize::from(config.max_batch_size > 0);
    let (no_inputs, no_outputs) = (config.input.is_empty(), config.output.is_empty());
    let dims = |shape: &[i64]| shape.iter().skip(skip).copied().collect::<Vec<_>>();
    for io in inputs {
        match config.input.iter_mut().find(|i| i.name == io.name) {
            Some(input) => {
                if input.data_type == 0 {
                    input.data_type = proto_data_type(io.datatype) as i32;
                }
                if input.dims.is_empty() {
                    input.dims = dims(&io.shape);
                }
            }
            None if no_inputs => config.input.push(ModelInput {
                name: io.name.clone(),
                data_type: proto_data_type(io.datatype) as i32,
                dims: dims(&io.shape),
                ..Default::default()
            }),
            None => {}
        }
    }
    for io in outputs {
        match config.output.iter_mut().find(|o| o.name == io.name) {
            Some(output) => {
                if output.data_type == 0 {
                    output.data_type = proto_data_type(io.datatype) as i32;
                }
                if output.dims.is_empty() {
                    output.dims = dims(&io.shape);
                }
            }
            None if no_outputs => config.output.push(ModelOutput {
                name: io.name.clone(),
                data_type: proto_data_type(io.datatype) as i32,
                dims: dims(&io.shape),
                ..Default::default()
            }),
            None => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use tritium_actors::DataType;

    use super::*;

    fn io(name: &str, datatype: DataType, shape: &[i64]) -> onnx::OnnxIo {
        onnx::OnnxIo { name: name.into(), datatype, shape: shape.to_vec() }
    }

    #[test]
    fn empty_config_with_batch_dims_gets_max_batch_size_and_dynamic_batching() {
        let mut config = ModelConfig::default();
        complete(&mut config, &[io("x", DataType::F32, &[-1, 16])], &[io("y", DataType::I64, &[-1, 16])]);
        assert_eq!(config.max_batch_size, DEFAULT_MAX_BATCH_SIZE);
        assert!(matches!(config.scheduling_choice, Some(SchedulingChoice::DynamicBatching(_))));
        assert_eq!(config.input[0].dims, vec![16]);
        assert_eq!(config.output[0].data_type, proto_data_type(DataType::I64) as i32);
    }

    #[test]
    fn fixed_first_dim_means_no_batching() {
        let mut config = ModelConfig::default();
        complete(&mut config, &[io("x", DataType::F32, &[3, 4])], &[io("y", DataType::F32, &[3, 4])]);
        assert_eq!(config.max_batch_size, 0);
        assert!(config.scheduling_choice.is_none());
        assert_eq!(config.input[0].dims, vec![3, 4]);
    }

    #[test]
    fn partial_config_keeps_its_values_and_fills_gaps() {
        let mut config = ModelConfig {
            max_batch_size: 8,
            input: vec![ModelInput { name: "x".into(), ..Default::default() }],
            ..Default::default()
        };
        complete(&mut config, &[io("x", DataType::F16, &[-1, 2])], &[io("y", DataType::F16, &[-1, 2])]);
        assert_eq!(config.max_batch_size, 8);
        assert_eq!(config.input[0].dims, vec![2]);
        assert_eq!(config.input[0].data_type, proto_data_type(DataType::F16) as i32);
        assert_eq!(config.output.len(), 1);
        assert!(config.scheduling_choice.is_none());
    }

    #[test]
    fn a_pytorch_config_is_told_what_it_lacks() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("model.pt");
        let config = ModelConfig { name: "t".into(), ..Default::default() };
        let e = pytorch_says_what_is_missing(&config, &file).unwrap_err().to_string();
        assert!(e.contains("an input for each argument of forward; an output for each element"), "{e}");
        let config = ModelConfig {
            name: "t".into(),
            input: vec![ModelInput { name: "x".into(), dims: vec![2], ..Default::default() }],
            output: vec![ModelOutput { name: "y".into(), data_type: 11, ..Default::default() }],
            ..Default::default()
        };
        let e = pytorch_says_what_is_missing(&config, &file).unwrap_err().to_string();
        assert!(e.ends_with("the config must give data_type of input 'x'; dims of output 'y'"), "{e}");
        let complete = ModelConfig {
            input: vec![ModelInput { name: "x".into(), dims: vec![2], data_type: 11, ..Default::default() }],
            ..config
        };
        let complete = ModelConfig {
            output: vec![ModelOutput { name: "y".into(), data_type: 11, dims: vec![2], ..Default::default() }],
            ..complete
        };
        pytorch_says_what_is_missing(&complete, &file).unwrap();
    }
}
