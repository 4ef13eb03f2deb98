//! `backend: "identity"`, as Triton's identity backend: output *i* is input *i* of the config,
//! unchanged, after an optional `execute_delay_ms` parameter. Needs no model file; used for
//! slow-model tests (graceful shutdown, queueing) and for measuring the server without compute.
//! Three test aids, all off unless the config asks: `load_delay_ms` makes each instance take
//! that long to load (as a large model would), `first_execute_delay_ms` makes each instance's
//! first execution take that long more (as a model whose first run compiles or allocates, which
//! warmup is for), and `echo_parameters_output: "<OUTPUT>"` fills
//! that BYTES output with the request's parameters as one JSON object (as Triton's parameter
//! test models echo them), for checking what reaches a backend.

use std::time::Duration;

use bytes::Bytes;
use tritium_actors::{
    Backend, BackendFactory, BatchInput, DataType, Error, InstanceSpec, ParamValue, Parameters, Result, Tensor,
};

use crate::config::ModelConfig;

pub struct IdentityFactory {
    /// (input name, output name) pairs, by position in the config.
    pairs: Vec<(String, String)>,
    delay: Duration,
    load_delay: Duration,
    first_delay: Duration,
    /// The output that carries the request's parameters as JSON.
    echo: Option<String>,
}

/// The request parameters as one JSON object.
fn parameters_json(params: &Parameters) -> String {
    let map: serde_json::Map<String, serde_json::Value> = params
        .iter()
        .map(|(k, v)| {
            let v = match v {
                ParamValue::Bool(b) => serde_json::Value::from(*b),
                ParamValue::Int(i) => serde_json::Value::from(*i),
                ParamValue::UInt(u) => serde_json::Value::from(*u),
                ParamValue::Double(d) => serde_json::Value::from(*d),
                ParamValue::Str(s) => serde_json::Value::from(s.as_str()),
            };
            (k.clone(), v)
        })
        .collect();
    serde_json::Value::Object(map).to_string()
}

impl IdentityFactory {
    pub fn from_config(config: &ModelConfig) -> Result<Self> {
        let echo = config.parameters.get("echo_parameters_output").map(|p| p.string_value.trim().to_string());
        if let Some(name) = &echo {
            let ok = config
                .output
                .iter()
                .any(|o| &o.name == name && o.data_type == crate::config::ProtoDataType::TypeString as i32);
            if !ok || config.max_batch_size > 0 {
                return Err(Error::invalid(format!(
                    "model '{}': echo_parameters_output '{name}' must name a TYPE_STRING output of a model with max_batch_size 0",
                    config.name
                )));
            }
        }
        let outputs: Vec<_> = config.output.iter().filter(|o| Some(&o.name) != echo.as_ref()).collect();
        if config.input.len() != outputs.len() || config.input.is_empty() {
            return Err(Error::invalid(format!(
                "model '{}': the identity backend needs as many outputs as inputs (got {} inputs, {} outputs)",
                config.name,
                config.input.len(),
                outputs.len()
            )));
        }
        for (i, o) in config.input.iter().zip(outputs.iter().copied()) {
            if i.data_type != o.data_type {
                return Err(Error::invalid(format!(
                    "model '{}': identity output '{}' must have the datatype of input '{}'",
                    config.name, o.name, i.name
                )));
            }
        }
        let delay_ms =
            crate::config::uint_parameter(&config.name, &config.parameters, "execute_delay_ms")?.unwrap_or(0);
        let load_ms = crate::config::uint_parameter(&config.name, &config.parameters, "load_delay_ms")?.unwrap_or(0);
        let first_ms =
            crate::config::uint_parameter(&config.name, &config.parameters, "first_execute_delay_ms")?.unwrap_or(0);
        Ok(IdentityFactory {
            pairs: config.input.iter().zip(outputs).map(|(i, o)| (i.name.clone(), o.name.clone())).collect(),
            delay: Duration::from_millis(delay_ms),
            load_delay: Duration::from_millis(load_ms),
            first_delay: Duration::from_millis(first_ms),
            echo,
        })
    }
}

impl BackendFactory for IdentityFactory {
    fn create(&self, _instance: &InstanceSpec) -> Result<Box<dyn Backend>> {
        std::thread::sleep(self.load_delay);
        Ok(Box::new(Identity {
            pairs: self.pairs.clone(),
            delay: self.delay,
            first_delay: self.first_delay,
            echo: self.echo.clone(),
        }))
    }
}

struct Identity {
    pairs: Vec<(String, String)>,
    delay: Duration,
    /// Taken once, by the instance's first execution.
    first_delay: Duration,
    echo: Option<String>,
}

impl Backend for Identity {
    fn execute(&mut self, batch: BatchInput<'_>) -> Result<Vec<Tensor>> {
        let delay = self.delay + std::mem::take(&mut self.first_delay);
        if !delay.is_zero() {
            std::thread::sleep(delay);
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
        if let Some(name) = &self.echo {
            // max_batch_size 0: every batch is one request.
            let request = batch.request.ok_or_else(|| Error::internal("identity echo: no request in the batch"))?;
            let json = parameters_json(&request.parameters);
            let mut data = (json.len() as u32).to_le_bytes().to_vec();
            data.extend_from_slice(json.as_bytes());
            outputs.push(Tensor::new(name.clone(), DataType::Bytes, vec![1], Bytes::from(data)));
        }
        Ok(outputs)
    }
}

#[cfg(test)]
mod tests {
    use tritium_actors::InstanceKind;

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
        let spec = InstanceSpec {
            name: "slow_0".into(),
            index: 0,
            kind: InstanceKind::Cpu,
            device: None,
            cpu_cores: Vec::new(),
            rate_limiter: Default::default(),
        };
        let mut b = f.create(&spec).unwrap();
        let t = Tensor::new("IN", DataType::F32, vec![1, 1], Bytes::from_static(&[0, 0, 128, 63]));
        let start = std::time::Instant::now();
        let out = b.execute(BatchInput::bare(&[t], &[], 1)).unwrap();
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
