//! The engine's `InferResponse` → `ModelInferResponse`, as Triton's gRPC frontend does it:
//! outputs in `raw_output_contents` (or written to the region the request named). Requests are
//! read in `decode`.

use std::collections::HashMap;

use bytes::Bytes;
use tritium_actors::{InferResponse, ParamValue, Parameters, RequestedOutput, Result};

pub use super::decode::{decode, parse_version, Decoded};
use crate::proto::inference::infer_parameter::ParameterChoice;
use crate::proto::inference::model_infer_response::InferOutputTensor;
use crate::proto::inference::{InferParameter, ModelInferResponse};
use crate::server::LoadedModel;
use crate::shm::{self, Placement};

pub fn infer_parameter(v: &ParamValue) -> InferParameter {
    let choice = match v {
        ParamValue::Bool(b) => ParameterChoice::BoolParam(*b),
        ParamValue::Int(i) => ParameterChoice::Int64Param(*i),
        ParamValue::UInt(u) => ParameterChoice::Uint64Param(*u),
        ParamValue::Double(d) => ParameterChoice::DoubleParam(*d),
        ParamValue::Str(s) => ParameterChoice::StringParam(s.clone()),
    };
    InferParameter { parameter_choice: Some(choice) }
}
fn parameters(p: &Parameters) -> HashMap<String, InferParameter> {
    p.iter().map(|(k, v)| (k.clone(), infer_parameter(v))).collect()
}

/// Encodes one response; outputs go in `raw_output_contents` (an empty entry for one written
/// to shared memory, so indices still line up with `outputs`).
pub fn encode(
    response: InferResponse,
    requested: &[RequestedOutput],
    shm_outputs: &HashMap<String, Placement>,
    model: &LoadedModel,
    extra: Option<(&str, ParamValue)>,
) -> Result<ModelInferResponse> {
    let tensors = crate::frontends::classification::final_outputs_owned(
        response.outputs,
        requested,
        model.handle.policy.batches(),
        &model.labels,
    )?;
    let mut outputs = Vec::with_capacity(tensors.len());
    let mut raw = Vec::with_capacity(tensors.len());
    for t in tensors {
        let mut params = HashMap::new();
        if let Some(target) = shm_outputs.get(&t.name) {
            shm::write(&target.region, target.offset, target.byte_size, &t.data, &t.name)?;
            params.insert("shared_memory_region".into(), infer_parameter(&ParamValue::Str(target.region.clone())));
            params.insert("shared_memory_byte_size".into(), infer_parameter(&ParamValue::UInt(t.data.len() as u64)));
            if target.offset != 0 {
                params.insert("shared_memory_offset".into(), infer_parameter(&ParamValue::UInt(target.offset)));
            }
            raw.push(Bytes::new());
        } else {
            raw.push(t.data.clone());
        }
        outputs.push(InferOutputTensor {
            name: t.name,
            datatype: t.datatype.as_str().to_string(),
            shape: t.shape,
            parameters: params,
            contents: None,
        });
    }
    let mut params = parameters(&response.parameters);
    if let Some((k, v)) = extra {
        params.insert(k.to_string(), infer_parameter(&v));
    }
    Ok(ModelInferResponse {
        model_name: response.model,
        model_version: response.version.to_string(),
        id: response.id,
        parameters: params,
        outputs,
        raw_output_contents: raw,
    })
}
