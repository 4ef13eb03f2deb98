//! `ModelInferRequest` → the engine's `InferRequest`, as Triton's gRPC frontend reads it:
//! inputs in typed `contents`, in `raw_input_contents` or in a registered shared-memory region,
//! and the outputs it asks for. Reads untrusted bytes, so the library (`src/lib.rs`) builds it
//! for the fuzz targets too.

use std::collections::HashMap;

use bytes::{BufMut, Bytes, BytesMut};
use tritium_actors::{DataType, Error, InferRequest, ParamValue, RequestedOutput, Result, Tensor};

use crate::proto::inference::infer_parameter::ParameterChoice;
use crate::proto::inference::model_infer_request::InferInputTensor;
use crate::proto::inference::{InferParameter, InferTensorContents, ModelInferRequest};
use crate::shm::{self, Placement};

/// A decoded request and what its outputs need beyond the engine.
#[derive(Debug)]
pub struct Decoded {
    pub request: InferRequest,
    pub shm_outputs: HashMap<String, Placement>,
}

pub use crate::frontends::version::parse_version;

pub(crate) fn param_value(p: &InferParameter) -> Option<ParamValue> {
    Some(match p.parameter_choice.as_ref()? {
        ParameterChoice::BoolParam(b) => ParamValue::Bool(*b),
        ParameterChoice::Int64Param(i) => ParamValue::Int(*i),
        ParameterChoice::StringParam(s) => ParamValue::Str(s.clone()),
        ParameterChoice::DoubleParam(d) => ParamValue::Double(*d),
        ParameterChoice::Uint64Param(u) => ParamValue::UInt(*u),
    })
}
fn uint_param(params: &HashMap<String, InferParameter>, key: &str, tensor: &str) -> Result<Option<u64>> {
    match params.get(key).and_then(param_value) {
        None => Ok(None),
        Some(ParamValue::Int(i)) if i >= 0 => Ok(Some(i as u64)),
        Some(ParamValue::UInt(u)) => Ok(Some(u)),
        Some(_) => Err(Error::invalid(format!("parameter '{key}' of '{tensor}' must be a non-negative integer"))),
    }
}

/// The shared-memory placement a tensor's parameters name, if any.
fn shm_target(params: &HashMap<String, InferParameter>, tensor: &str) -> Result<Option<Placement>> {
    let region = match params.get("shared_memory_region").and_then(param_value) {
        None => return Ok(None),
        Some(ParamValue::Str(s)) => s,
        Some(_) => {
            return Err(Error::invalid(format!("parameter 'shared_memory_region' of '{tensor}' must be a string")))
        }
    };
    let byte_size = uint_param(params, "shared_memory_byte_size", tensor)?.ok_or_else(|| {
        Error::invalid(format!(
            "'shared_memory_byte_size' is missing for '{tensor}', which uses shared memory region '{region}'"
        ))
    })?;
    let offset = uint_param(params, "shared_memory_offset", tensor)?.unwrap_or(0);
    Ok(Some(Placement { region, offset, byte_size }))
}

fn le<T: Copy, const N: usize>(values: &[T], to: impl Fn(T) -> [u8; N]) -> Bytes {
    let mut out = BytesMut::with_capacity(values.len() * N);
    for v in values {
        out.put_slice(&to(*v));
    }
    out.freeze()
}

/// The bytes of typed `contents`, in the field Triton reads for the datatype.
fn typed_contents(input: &str, datatype: DataType, c: &InferTensorContents) -> Result<Bytes> {
    Ok(match datatype {
        DataType::Bool => Bytes::from(c.bool_contents.iter().map(|b| *b as u8).collect::<Vec<u8>>()),
        DataType::I8 => le(&c.int_contents, |v| (v as i8).to_le_bytes()),
        DataType::I16 => le(&c.int_contents, |v| (v as i16).to_le_bytes()),
        DataType::I32 => le(&c.int_contents, i32::to_le_bytes),
        DataType::I64 => le(&c.int64_contents, i64::to_le_bytes),
        DataType::U8 => le(&c.uint_contents, |v| (v as u8).to_le_bytes()),
        DataType::U16 => le(&c.uint_contents, |v| (v as u16).to_le_bytes()),
        DataType::U32 => le(&c.uint_contents, u32::to_le_bytes),
        DataType::U64 => le(&c.uint64_contents, u64::to_le_bytes),
        DataType::F32 => le(&c.fp32_contents, f32::to_le_bytes),
        DataType::F64 => le(&c.fp64_contents, f64::to_le_bytes),
        DataType::Bytes => tritium_actors::tensor::serialize_bytes(c.bytes_contents.iter()),
        DataType::F16 | DataType::BF16 => {
            return Err(Error::invalid(format!(
                "input '{input}': {datatype} has no typed 'contents' field; send it in raw_input_contents"
            )))
        }
    })
}

fn has_contents(c: &InferTensorContents) -> bool {
    !(c.bool_contents.is_empty()
        && c.int_contents.is_empty()
        && c.int64_contents.is_empty()
        && c.uint_contents.is_empty()
        && c.uint64_contents.is_empty()
        && c.fp32_contents.is_empty()
        && c.fp64_contents.is_empty()
        && c.bytes_contents.is_empty())
}

fn decode_input(
    model: &str,
    input: InferInputTensor,
    raw: &mut std::vec::IntoIter<Bytes>,
    uses_raw: bool,
) -> Result<Tensor> {
    let datatype = DataType::parse(&input.datatype)
        .ok_or_else(|| Error::invalid(format!("invalid datatype '{}' for input '{}'", input.datatype, input.name)))?;
    if input.shape.iter().any(|d| *d < 0) {
        return Err(Error::invalid(format!(
            "input '{}' for model '{model}' has a negative dimension in shape {:?}",
            input.name, input.shape
        )));
    }
    let contents = input.contents.as_ref().filter(|c| has_contents(c));
    let data = if let Some(target) = shm_target(&input.parameters, &input.name)? {
        if contents.is_some() {
            return Err(Error::invalid(format!(
                "input '{}' for model '{model}' names a shared memory region and also carries contents",
                input.name
            )));
        }
        shm::read(&target.region, target.offset, target.byte_size)?
    } else if uses_raw {
        if contents.is_some() {
            return Err(Error::invalid(format!(
                "contents field must not be specified when using raw_input_contents for '{}' for model '{model}'",
                input.name
            )));
        }
        raw.next().ok_or_else(|| {
            Error::invalid(format!("raw_input_contents has no entry for input '{}' of model '{model}'", input.name))
        })?
    } else {
        match contents {
            Some(c) => typed_contents(&input.name, datatype, c)?,
            // An input with no elements has nothing to carry.
            None => Bytes::new(),
        }
    };
    Ok(Tensor::new(input.name, datatype, input.shape, data))
}

/// Decodes a gRPC request. Model-level checks (names, shapes, sizes) are the engine's.
pub fn decode(req: ModelInferRequest) -> Result<Decoded> {
    let version = parse_version(&req.model_version)?;
    // The model's name is moved into the request, and read from there, not cloned.
    let mut request = InferRequest::new(req.model_name, Vec::with_capacity(req.inputs.len()));
    request.version = version;
    request.id = req.id;
    let params = req.parameters.iter().filter_map(|(k, v)| param_value(v).map(|v| (k.clone(), v)));
    crate::frontends::params::apply(&mut request, params.collect::<Vec<_>>())?;

    let raw_count = req.raw_input_contents.len();
    let uses_raw = raw_count > 0;
    let mut raw = req.raw_input_contents.into_iter();
    let mut raw_inputs = 0;
    for input in req.inputs {
        if uses_raw && !input.parameters.contains_key("shared_memory_region") {
            raw_inputs += 1;
        }
        let tensor = decode_input(&request.model, input, &mut raw, uses_raw)?;
        request.inputs.push(tensor);
    }
    if uses_raw && raw_inputs != raw_count {
        return Err(Error::invalid(format!(
            "expected {raw_inputs} raw_input_contents (one per input not in shared memory) for model '{}', got {raw_count}",
            request.model
        )));
    }

    let mut shm_outputs = HashMap::new();
    request.outputs.reserve_exact(req.outputs.len());
    for output in req.outputs {
        let class_count = match output.parameters.get("classification").and_then(param_value) {
            None => 0,
            Some(ParamValue::Int(n)) if n >= 0 => n as u32,
            Some(ParamValue::UInt(n)) => n as u32,
            Some(_) => {
                return Err(Error::invalid(format!(
                    "parameter 'classification' of output '{}' must be a non-negative integer",
                    output.name
                )))
            }
        };
        if let Some(target) = shm_target(&output.parameters, &output.name)? {
            shm::check_output(&target.region, target.offset, target.byte_size)?;
            shm_outputs.insert(output.name.clone(), target);
        }
        request.outputs.push(RequestedOutput { name: output.name, class_count });
    }
    Ok(Decoded { request, shm_outputs })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(name: &str, datatype: &str, shape: Vec<i64>, contents: Option<InferTensorContents>) -> InferInputTensor {
        InferInputTensor { name: name.into(), datatype: datatype.into(), shape, parameters: HashMap::new(), contents }
    }

    #[test]
    fn typed_contents_become_little_endian_bytes() {
        let req = ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![
                input(
                    "A",
                    "INT16",
                    vec![2],
                    Some(InferTensorContents { int_contents: vec![1, -2], ..Default::default() }),
                ),
                input(
                    "B",
                    "BYTES",
                    vec![1],
                    Some(InferTensorContents { bytes_contents: vec![Bytes::from_static(b"hi")], ..Default::default() }),
                ),
                input(
                    "C",
                    "FP32",
                    vec![1],
                    Some(InferTensorContents { fp32_contents: vec![1.0], ..Default::default() }),
                ),
            ],
            ..Default::default()
        };
        let d = decode(req).unwrap();
        assert_eq!(&d.request.inputs[0].data[..], &[1, 0, 0xfe, 0xff]);
        assert_eq!(&d.request.inputs[1].data[..], b"\x02\x00\x00\x00hi");
        assert_eq!(&d.request.inputs[2].data[..], &1.0f32.to_le_bytes());
    }

    #[test]
    fn raw_contents_are_taken_in_order_and_counted() {
        let req = ModelInferRequest {
            model_name: "m".into(),
            model_version: "3".into(),
            inputs: vec![input("A", "FP16", vec![1], None), input("B", "UINT8", vec![2], None)],
            raw_input_contents: vec![Bytes::from_static(&[0, 60]), Bytes::from_static(&[7, 8])],
            ..Default::default()
        };
        let d = decode(req).unwrap();
        assert_eq!(d.request.version, Some(3));
        assert_eq!(&d.request.inputs[1].data[..], &[7, 8]);

        let req = ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![input("A", "UINT8", vec![1], None)],
            raw_input_contents: vec![Bytes::from_static(&[1]), Bytes::from_static(&[2])],
            ..Default::default()
        };
        assert!(decode(req).unwrap_err().message.contains("expected 1 raw_input_contents"));
    }

    #[test]
    fn bad_datatype_version_and_mixed_contents_are_refused() {
        let bad = |req: ModelInferRequest| decode(req).unwrap_err().message;
        assert!(bad(ModelInferRequest { model_name: "m".into(), model_version: "x".into(), ..Default::default() })
            .contains("failed to get model version from specified version string 'x'"));
        assert!(bad(ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![input("A", "FLOAT", vec![1], None)],
            ..Default::default()
        })
        .contains("invalid datatype 'FLOAT'"));
        let mixed = ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![input(
                "A",
                "INT32",
                vec![1],
                Some(InferTensorContents { int_contents: vec![1], ..Default::default() }),
            )],
            raw_input_contents: vec![Bytes::from_static(&[0, 0, 0, 0])],
            ..Default::default()
        };
        assert!(bad(mixed).contains("contents field must not be specified"));
        let fp16 = ModelInferRequest {
            model_name: "m".into(),
            inputs: vec![input(
                "A",
                "FP16",
                vec![1],
                Some(InferTensorContents { fp32_contents: vec![1.0], ..Default::default() }),
            )],
            ..Default::default()
        };
        assert!(bad(fp16).contains("raw_input_contents"));
    }
}
