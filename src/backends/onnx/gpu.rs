//! ONNX models on a GPU: ONNX Runtime's CUDA execution provider for a KIND_GPU instance, and its
//! TensorRT provider in front of it when the config asks for it (Triton's
//! `optimization { execution_accelerators { gpu_execution_accelerator: [{ name: "tensorrt" }] } }`),
//! with CUDA graphs when `optimization { cuda { graphs: true } }`. Providers come from the ONNX
//! Runtime library the server loads (`onnxruntime-gpu` has them; the `onnxruntime` wheel that
//! `scripts/setup.sh` installs has neither): a missing one fails the load naming it.

use ort::ep::{ExecutionProvider, ExecutionProviderDispatch, TensorRT, CUDA};
use tritium_actors::{Error, InstanceKind, InstanceSpec, Result};

use crate::config::ModelConfig;

/// What a model's GPU instances ask of ONNX Runtime.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OnnxGpu {
    pub tensorrt: bool,
    pub cuda_graphs: bool,
}

impl OnnxGpu {
    pub fn from_config(config: &ModelConfig) -> Result<Self> {
        let optimization = config.optimization.as_ref();
        let mut gpu = OnnxGpu {
            cuda_graphs: optimization.and_then(|o| o.cuda.as_ref()).is_some_and(|c| c.graphs),
            ..OnnxGpu::default()
        };
        let accelerators = optimization.and_then(|o| o.execution_accelerators.as_ref());
        for accelerator in accelerators.map(|a| a.gpu_execution_accelerator.as_slice()).unwrap_or_default() {
            match accelerator.name.as_str() {
                "tensorrt" => gpu.tensorrt = true,
                other => {
                    return Err(Error::invalid(format!(
                        "model '{}': unknown GPU execution accelerator '{other}' for the onnxruntime backend \
                         (known: tensorrt)",
                        config.name
                    )))
                }
            }
        }
        Ok(gpu)
    }

    /// The providers a session of `instance` registers, in order: none for a CPU instance; for a
    /// GPU instance TensorRT (when asked) then CUDA, each checked to exist in the loaded library.
    pub fn providers(&self, model: &str, instance: &InstanceSpec) -> Result<Vec<ExecutionProviderDispatch>> {
        if instance.kind != InstanceKind::Gpu {
            return Ok(Vec::new());
        }
        let device = instance.device.unwrap_or(0);
        let mut providers = Vec::new();
        if self.tensorrt {
            require::<TensorRT>(model, instance, "TensorrtExecutionProvider", "gpu_execution_accelerator 'tensorrt'")?;
            providers.push(TensorRT::default().with_device_id(device).build().error_on_failure());
        }
        require::<CUDA>(model, instance, "CUDAExecutionProvider", "KIND_GPU")?;
        providers
            .push(CUDA::default().with_device_id(device).with_cuda_graph(self.cuda_graphs).build().error_on_failure());
        Ok(providers)
    }
}

fn require<P: ExecutionProvider>(model: &str, instance: &InstanceSpec, name: &str, why: &str) -> Result<()> {
    let available = P::is_available()
        .map_err(|e| Error::internal(format!("model '{model}': asking ONNX Runtime for its providers: {e}")))?;
    if available {
        return Ok(());
    }
    Err(Error::invalid(format!(
        "model '{model}': instance '{}' needs ONNX Runtime's {name} ({why}), which the ONNX Runtime library this \
         server loaded does not have (install onnxruntime-gpu's library and pass it with --onnxruntime-library)",
        instance.name
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_tritons_accelerator_and_graph_settings() {
        let c = crate::config::from_json(
            r#"{"name":"m","optimization":{"cuda":{"graphs":true},
                "execution_accelerators":{"gpu_execution_accelerator":[{"name":"tensorrt"}]}}}"#,
        )
        .unwrap();
        assert_eq!(OnnxGpu::from_config(&c).unwrap(), OnnxGpu { tensorrt: true, cuda_graphs: true });
        let bad = crate::config::from_json(
            r#"{"name":"m","optimization":{"execution_accelerators":{"gpu_execution_accelerator":[{"name":"openvino"}]}}}"#,
        )
        .unwrap();
        assert!(OnnxGpu::from_config(&bad).unwrap_err().to_string().contains("unknown GPU execution accelerator"));
        let cpu = InstanceSpec {
            name: "m_0".into(),
            index: 0,
            kind: InstanceKind::Cpu,
            device: None,
            cpu_cores: vec![],
            rate_limiter: Default::default(),
        };
        assert!(OnnxGpu::default().providers("m", &cpu).unwrap().is_empty());
    }
}
