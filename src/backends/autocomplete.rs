//! Completing a missing or partial config from the model file (`--strict-model-config=false`),
//! as Triton's ONNX Runtime backend does: inputs and outputs with their datatypes and dims, and
//! `max_batch_size` (Triton's default of 4, with `dynamic_batching {}`) when every input and
//! output of the file has a variable first dimension.

use std::path::Path;

use tritium_actors::Result;

use super::{backend_name, model_file, onnx, BackendEnv};
use crate::config::model_config::SchedulingChoice;
use crate::config::{proto_data_type, ModelConfig, ModelDynamicBatching, ModelInput, ModelOutput};

/// Triton's `--backend-config=default-max-batch-size`, 4 by default.
pub const DEFAULT_MAX_BATCH_SIZE: i32 = 4;

/// Fills what the config leaves out from the latest version's model file.
pub fn autocomplete(config: &mut ModelConfig, model_dir: &Path, version: i64, env: &BackendEnv) -> Result<()> {
    let version_dir = model_dir.join(version.to_string());
    let Some(backend) = backend_name(config, &version_dir) else { return Ok(()) };
    if config.backend.is_empty() && config.platform.is_empty() {
        config.backend = backend.clone();
    }
    if backend != "onnxruntime" {
        return Ok(());
    }
    let file = model_file(config, model_dir, version, "model.onnx");
    if !file.is_file() {
        // The factory reports the missing file.
        return Ok(());
    }
    onnx::init_runtime(&env.onnxruntime_library())?;
    let (inputs, outputs) = onnx::inspect(&file)?;
    complete(config, &inputs, &outputs);
    Ok(())
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
}
