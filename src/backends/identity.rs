//! `backend: "identity"`, as Triton's identity backend: output *i* is input *i* of the config,
//! unchanged, after an optional `execute_delay_ms` parameter. Needs no model file; used for
//! slow-model tests (graceful shutdown, queueing) and for measuring the server without compute.

use std::time::Duration;

use tritium_actors::{Backend, BackendFactory, BatchInput, Error, InstanceSpec, Result, Tensor};

use crate::config::ModelConfig;

pub struct IdentityFactory {
    /// (input name, output name) pairs, by position in the config.
    pairs: Vec<(String, String)>,
    delay: Duration,
}

impl IdentityFactory {
    pub fn from_config(config: &ModelConfig) -> Result<Self> {
        if config.input.len() != config.output.len() || config.input.is_empty() {
            return Err(Error::invalid(format!(
                "model '{}': the identity backend needs as many outputs as inputs (got {} inputs, {} outputs)",
                config.name,
                config.input.len(),
                config.output.len()
            )));
        }
        for (i, o) in config.input.iter().zip(&config.output) {
            if i.data_type != o.data_type {
                return Err(Error::invalid(format!(
                    "model '{}': identity output '{}' must have the datatype of input '{}'",
                    config.name, o.name, i.name
                )));
            }
        }
        let delay_ms =
            crate::config::uint_parameter(&config.name, &config.parameters, "execute_delay_ms")?.unwrap_or(0);
        Ok(IdentityFactory {
            pairs: config.input.iter().zip(&config.output).map(|(i, o)| (i.name.clone(), o.name.clone())).collect(),
            delay: Duration::from_millis(delay_ms),
        })
    }
}

impl BackendFactory for IdentityFactory {
    fn create(&self, _instance: &InstanceSpec) -> Result<Box<dyn Backend>> {
        Ok(Box::new(Identity { pairs: self.pairs.clone(), delay: self.delay }))
    }
}

struct Identity {
    pairs: Vec<(String, String)>,
    delay: Duration,
}

impl Backend for Identity {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        if !self.delay.is_zero() {
            std::thread::sleep(self.delay);
        }
        let mut outputs = Vec::new();
        for (input, output) in &self.pairs {
            if !batch.outputs.is_empty() && !batch.outputs.contains(output) {
                continue;
            }
            // Optional inputs may be absent; their outputs are then absent too.
            if let Some(t) = batch.inputs.iter().find(|t| &t.name == input) {
                outputs.push(Tensor::new(output.clone(), t.datatype, t.shape.clone(), t.data.clone()));
            }
        }
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use tritium_actors::{DataType, InstanceKind};

    use super::*;
    use crate::config::{ModelInput, ModelOutput};
    use crate::proto::inference::ModelParameter;

    fn config(delay: &str) -> ModelConfig {
        let mut c = ModelConfig {
            name: "slow".into(),
            input: vec![ModelInput { name: "IN".into(), data_type: 11, dims: vec![-1], ..Default::default() }],
            output: vec![ModelOutput { name: "OUT".into(), data_type: 11, dims: vec![-1], ..Default::default() }],
            ..Default::default()
        };
        c.parameters.insert("execute_delay_ms".into(), ModelParameter { string_value: delay.into() });
        c
    }

    #[test]
    fn copies_inputs_to_outputs_after_the_delay() {
        let f = IdentityFactory::from_config(&config("20")).unwrap();
        let spec = InstanceSpec { name: "slow_0".into(), index: 0, kind: InstanceKind::Cpu, device: None };
        let mut b = f.create(&spec).unwrap();
        let t = Tensor::new("IN", DataType::F32, vec![1, 1], Bytes::from_static(&[0, 0, 128, 63]));
        let start = std::time::Instant::now();
        let out = b.execute(BatchInput { inputs: &[t], outputs: &[], batch_size: 1, request: None }).unwrap();
        assert!(start.elapsed() >= Duration::from_millis(20));
        assert_eq!(out[0].name, "OUT");
        assert_eq!(&out[0].data[..], &[0, 0, 128, 63]);
    }

    #[test]
    fn refuses_a_bad_delay_and_mismatched_outputs() {
        assert!(IdentityFactory::from_config(&config("soon")).is_err());
        let mut c = config("0");
        c.output.clear();
        assert!(IdentityFactory::from_config(&c).is_err());
    }
}
