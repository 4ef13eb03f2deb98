//! How a config's inputs and outputs map to a SavedModel's serving signature, as Triton's
//! TensorFlow backend maps them: a config tensor is named after the signature's key (`x`, not the
//! graph tensor `serving_default_x:0` the key stands for); every input of the signature must be
//! given (the config's inputs, plus its sequence controls and state inputs), every config output
//! must be one of the signature's outputs; datatypes must be equal and dims compatible (with
//! `max_batch_size > 0` the signature's first dimension must be variable). Pure: it works on what
//! the SavedModel's MetaGraphDef declares, so it is tested without TensorFlow.

use tritium_actors::{DataType, Error, Result};

use crate::config::model_config::SchedulingChoice;
use crate::config::{engine_data_type, proto_data_type, ModelConfig};

/// One input or output of a signature.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SigTensor {
    /// The signature's key, which is the config's tensor name.
    pub key: String,
    /// The graph operation and output index the key stands for.
    pub op: String,
    pub index: i32,
    /// `None`: a TensorFlow type that Triton does not map (complex, quantized, resource, ...).
    pub datatype: Option<DataType>,
    /// TensorFlow's name of the type, for messages.
    pub tf_type: String,
    /// `None`: unknown rank; `-1`: a dimension of any size.
    pub shape: Option<Vec<i64>>,
}

/// A serving signature, its tensors sorted by key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub name: String,
    pub inputs: Vec<SigTensor>,
    pub outputs: Vec<SigTensor>,
}

/// A config tensor bound to the signature's tensor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bound {
    pub name: String,
    pub op: String,
    pub index: i32,
    pub datatype: DataType,
    /// The signature's shape, batch dimension included; `None` when it does not say.
    pub shape: Option<Vec<i64>>,
}

/// Every input the model is fed and every output it may be asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IoPlan {
    pub inputs: Vec<Bound>,
    pub outputs: Vec<Bound>,
}

pub fn type_name(datatype: DataType) -> &'static str {
    proto_data_type(datatype).as_str_name()
}

fn keys(tensors: &[SigTensor]) -> String {
    if tensors.is_empty() {
        return "none".into();
    }
    tensors.iter().map(|t| t.key.as_str()).collect::<Vec<_>>().join(", ")
}

fn shape_text(shape: &[i64]) -> String {
    format!("[{}]", shape.iter().map(i64::to_string).collect::<Vec<_>>().join(","))
}

/// Triton's CompareDims: the signature's shape (batch dimension included) against the config's
/// dims; a variable dimension on either side matches any size.
fn compare_dims(model: &str, kind: &str, name: &str, sig: &[i64], dims: &[i64], batching: bool) -> Result<()> {
    let mismatch = |why: &str| {
        Error::invalid(format!(
            "unable to load model '{model}', {kind} '{name}': the model provides shape {}, the configuration \
             expects dims {}{}{why}",
            shape_text(sig),
            shape_text(dims),
            if batching { " with max_batch_size > 0" } else { "" }
        ))
    };
    let rest = if batching {
        match sig.first() {
            Some(-1) => &sig[1..],
            _ => return Err(mismatch(" (batching needs the model's first dimension to be variable)")),
        }
    } else {
        sig
    };
    if rest.len() != dims.len() {
        return Err(mismatch(""));
    }
    if rest.iter().zip(dims).any(|(s, d)| *s >= 0 && *d >= 0 && s != d) {
        return Err(mismatch(""));
    }
    Ok(())
}

/// A tensor as the config gives it (`data_type` 0: take the signature's).
struct ConfigTensor {
    name: String,
    data_type: i32,
    dims: Vec<i64>,
    check_dims: bool,
}

fn bind(model: &str, kind: &str, wanted: &ConfigTensor, sig: &SigTensor, batching: bool) -> Result<Bound> {
    let ConfigTensor { name, dims, .. } = wanted;
    let data_type =
        if wanted.data_type == 0 { sig.datatype.map_or(0, |d| proto_data_type(d) as i32) } else { wanted.data_type };
    let datatype = engine_data_type(data_type)
        .ok_or_else(|| Error::invalid(format!("unable to load model '{model}', {kind} '{name}' has no data_type")))?;
    match sig.datatype {
        Some(d) if d == datatype => {}
        Some(d) => {
            return Err(Error::invalid(format!(
                "unable to load model '{model}', configuration expects datatype {} for {kind} '{name}', model \
                 provides {}",
                type_name(datatype),
                type_name(d)
            )))
        }
        None => {
            return Err(Error::invalid(format!(
                "unable to load model '{model}', {kind} '{name}' of the signature has TensorFlow type {}, which \
                 Triton does not map",
                sig.tf_type
            )))
        }
    }
    if let (Some(shape), true) = (&sig.shape, wanted.check_dims) {
        compare_dims(model, kind, name, shape, dims, batching)?;
    }
    Ok(Bound { name: name.clone(), op: sig.op.clone(), index: sig.index, datatype, shape: sig.shape.clone() })
}

impl IoPlan {
    pub fn new(config: &ModelConfig, signature: &Signature) -> Result<Self> {
        let model = &config.name;
        let batching = config.max_batch_size > 0;
        let sig = &signature.name;
        // Sequence controls and states are fed like inputs.
        let mut inputs: Vec<ConfigTensor> = config
            .input
            .iter()
            .map(|i| {
                let dims = i.reshape.as_ref().map(|r| r.shape.clone()).unwrap_or_else(|| i.dims.clone());
                ConfigTensor { name: i.name.clone(), data_type: i.data_type, dims, check_dims: true }
            })
            .collect();
        let mut outputs: Vec<ConfigTensor> = config
            .output
            .iter()
            .map(|o| {
                let dims = o.reshape.as_ref().map(|r| r.shape.clone()).unwrap_or_else(|| o.dims.clone());
                ConfigTensor { name: o.name.clone(), data_type: o.data_type, dims, check_dims: true }
            })
            .collect();
        if let Some(SchedulingChoice::SequenceBatching(sb)) = &config.scheduling_choice {
            // A control's datatype is the one its false/true pair or data_type says; the model's
            // own is taken (data_type 0) and its shape, [1] per item, is the engine's to check.
            for control in &sb.control_input {
                inputs.push(ConfigTensor {
                    name: control.name.clone(),
                    data_type: 0,
                    dims: vec![1],
                    check_dims: false,
                });
            }
            for state in &sb.state {
                let (data_type, dims) = (state.data_type, state.dims.clone());
                inputs.push(ConfigTensor {
                    name: state.input_name.clone(),
                    data_type,
                    dims: dims.clone(),
                    check_dims: true,
                });
                outputs.push(ConfigTensor { name: state.output_name.clone(), data_type, dims, check_dims: true });
            }
        }
        if inputs.len() != signature.inputs.len() {
            return Err(Error::invalid(format!(
                "unable to load model '{model}', configuration expects {} inputs, model provides {} (the inputs of \
                 signature '{sig}': {})",
                inputs.len(),
                signature.inputs.len(),
                keys(&signature.inputs)
            )));
        }
        let mut bound_inputs = Vec::with_capacity(inputs.len());
        for wanted in &inputs {
            let name = &wanted.name;
            let sig_tensor = signature.inputs.iter().find(|t| &t.key == name).ok_or_else(|| {
                Error::invalid(format!(
                    "unable to load model '{model}', unexpected inference input '{name}': signature '{sig}' has no such \
                     input (its inputs: {})",
                    keys(&signature.inputs)
                ))
            })?;
            bound_inputs.push(bind(model, "input", wanted, sig_tensor, batching)?);
        }
        let mut bound_outputs = Vec::with_capacity(outputs.len());
        for wanted in &outputs {
            let name = &wanted.name;
            let sig_tensor = signature.outputs.iter().find(|t| &t.key == name).ok_or_else(|| {
                Error::invalid(format!(
                    "unable to load model '{model}', configuration specifies output '{name}', which signature '{sig}' \
                     does not provide (its outputs: {})",
                    keys(&signature.outputs)
                ))
            })?;
            bound_outputs.push(bind(model, "output", wanted, sig_tensor, batching)?);
        }
        Ok(IoPlan { inputs: bound_inputs, outputs: bound_outputs })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sig_tensor(key: &str, datatype: DataType, shape: &[i64]) -> SigTensor {
        SigTensor {
            key: key.into(),
            op: format!("serving_default_{key}"),
            index: 0,
            datatype: Some(datatype),
            tf_type: String::new(),
            shape: Some(shape.to_vec()),
        }
    }

    fn signature() -> Signature {
        Signature {
            name: "serving_default".into(),
            inputs: vec![sig_tensor("a", DataType::F32, &[-1, 4]), sig_tensor("b", DataType::F32, &[-1, 4])],
            outputs: vec![sig_tensor("sum", DataType::F32, &[-1, 4]), sig_tensor("text", DataType::Bytes, &[-1])],
        }
    }

    fn config(json: &str) -> ModelConfig {
        crate::config::from_json(json).expect("config parses")
    }

    #[test]
    fn config_names_are_the_signature_keys() {
        let c = config(
            r#"{"name":"m","max_batch_size":8,
                "input":[{"name":"b","data_type":"TYPE_FP32","dims":[4]},{"name":"a","data_type":"TYPE_FP32","dims":[-1]}],
                "output":[{"name":"text","data_type":"TYPE_STRING","dims":[]}]}"#,
        );
        let plan = IoPlan::new(&c, &signature()).unwrap();
        assert_eq!(plan.inputs[0].op, "serving_default_b");
        assert_eq!(plan.inputs[1].shape, Some(vec![-1, 4]));
        assert_eq!(plan.outputs[0].datatype, DataType::Bytes);
    }

    #[test]
    fn what_the_signature_lacks_or_disagrees_on_fails_the_load() {
        let e = IoPlan::new(
            &config(r#"{"name":"m","max_batch_size":8,"input":[{"name":"a","data_type":"TYPE_FP32","dims":[4]}]}"#),
            &signature(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("configuration expects 1 inputs, model provides 2"), "{e}");
        let e = IoPlan::new(
            &config(
                r#"{"name":"m","max_batch_size":8,"input":[{"name":"a","data_type":"TYPE_FP32","dims":[4]},
                    {"name":"c","data_type":"TYPE_FP32","dims":[4]}]}"#,
            ),
            &signature(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("unexpected inference input 'c'") && e.to_string().contains("its inputs: a, b"),
            "{e}"
        );
        let e = IoPlan::new(
            &config(
                r#"{"name":"m","max_batch_size":8,"input":[{"name":"a","data_type":"TYPE_FP32","dims":[4]},
                    {"name":"b","data_type":"TYPE_FP32","dims":[4]}],"output":[{"name":"nope","data_type":"TYPE_FP32","dims":[4]}]}"#,
            ),
            &signature(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("output 'nope', which signature 'serving_default' does not provide"), "{e}");
        let e = IoPlan::new(
            &config(
                r#"{"name":"m","max_batch_size":8,"input":[{"name":"a","data_type":"TYPE_INT32","dims":[4]},
                    {"name":"b","data_type":"TYPE_FP32","dims":[4]}]}"#,
            ),
            &signature(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("expects datatype TYPE_INT32 for input 'a', model provides TYPE_FP32"), "{e}");
        let e = IoPlan::new(
            &config(
                r#"{"name":"m","max_batch_size":8,"input":[{"name":"a","data_type":"TYPE_FP32","dims":[5]},
                    {"name":"b","data_type":"TYPE_FP32","dims":[4]}]}"#,
            ),
            &signature(),
        )
        .unwrap_err();
        assert!(
            e.to_string().contains("input 'a': the model provides shape [-1,4], the configuration expects dims [5]"),
            "{e}"
        );
        // Without batching the whole shape is compared, batch dimension included.
        let e = IoPlan::new(
            &config(
                r#"{"name":"m","input":[{"name":"a","data_type":"TYPE_FP32","dims":[4]},
                    {"name":"b","data_type":"TYPE_FP32","dims":[-1,4]}]}"#,
            ),
            &signature(),
        )
        .unwrap_err();
        assert!(e.to_string().contains("input 'a'"), "{e}");
    }

    #[test]
    fn batching_needs_a_variable_first_dimension() {
        let mut s = signature();
        s.inputs[0].shape = Some(vec![2, 4]);
        let c = config(
            r#"{"name":"m","max_batch_size":8,"input":[{"name":"a","data_type":"TYPE_FP32","dims":[4]},
                {"name":"b","data_type":"TYPE_FP32","dims":[4]}]}"#,
        );
        let e = IoPlan::new(&c, &s).unwrap_err();
        assert!(e.to_string().contains("batching needs the model's first dimension to be variable"), "{e}");
    }
}
