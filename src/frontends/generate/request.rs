//! Triton's generate request mapping (`HTTPAPIServer::GenerateRequestClass::
//! ConvertGenerateRequest`): each top-level JSON field whose name is a model input becomes that
//! input, shaped from the model's metadata (fixed dims take their share of the elements, the
//! innermost `-1` the rest, other `-1`s one); every other field becomes a request parameter
//! (string, number or boolean); `parameters` is a nested object mapped by the same rule.
//! `id` is the request id (and, as in Triton, also a parameter). Tritium then applies the
//! parameters Triton gives a meaning to in infer requests (`sequence_id`, `sequence_start`,
//! `sequence_end`, `priority`, `timeout`), so a generate request can drive a sequence model.

use serde_json::{Map, Value};
use tritium_actors::policy::ModelPolicy;
use tritium_actors::{DataType, Error, InferRequest, ParamValue, Result, Tensor};

use crate::frontends::http::tensor_json::{count_leaves, data_from_json};

/// The nested object whose fields are mapped like the top level.
const PARAMETERS: &str = "parameters";

/// What the fields of the body become.
struct Mapping<'a> {
    policy: &'a ModelPolicy,
    max_input_bytes: usize,
    consumed: usize,
    inputs: Vec<Tensor>,
    parameters: Vec<(String, ParamValue)>,
}

/// Decodes a generate body (empty = `{}`) into a request for `model`.
pub fn decode(
    model: &str,
    version: Option<i64>,
    policy: &ModelPolicy,
    body: &[u8],
    max_input_bytes: usize,
) -> Result<InferRequest> {
    let doc: Value = if body.iter().all(u8::is_ascii_whitespace) {
        Value::Object(Map::new())
    } else {
        serde_json::from_slice(body)
            .map_err(|e| Error::invalid(format!("failed to parse the request JSON buffer: {e}")))?
    };
    let doc = doc.as_object().ok_or_else(|| Error::invalid("the generate request must be a JSON object"))?;
    let mut request = InferRequest::new(model, Vec::new());
    request.version = version;
    if let Some(id) = doc.get("id") {
        request.id = id.as_str().ok_or_else(|| Error::invalid("Unable to parse 'id': expected a string"))?.to_string();
    }
    let mut mapping = Mapping { policy, max_input_bytes, consumed: 0, inputs: Vec::new(), parameters: Vec::new() };
    for (key, value) in doc {
        if key == PARAMETERS {
            if policy.inputs.iter().any(|i| i.name == *key) {
                return Err(Error::invalid(format!(
                    "Keyword '{key}' for nested schema also given as input tensor name"
                )));
            }
            let nested = value.as_object().ok_or_else(|| {
                Error::invalid(format!(
                    "Expected JSON object for keyword: '{key}': attempt to access JSON non-object as object"
                ))
            })?;
            for (k, v) in nested {
                mapping
                    .field(k, v)
                    .map_err(|e| Error::new(e.kind, format!("Converting keyword: '{key}': {}", e.message)))?;
            }
        } else {
            mapping.field(key, value)?;
        }
    }
    request.inputs = mapping.inputs;
    crate::frontends::params::apply(&mut request, mapping.parameters)?;
    Ok(request)
}

impl Mapping<'_> {
    /// Triton's `ExactMappingInput`: an input of the model, or a parameter.
    fn field(&mut self, name: &str, value: &Value) -> Result<()> {
        let Some(spec) = self.policy.inputs.iter().find(|i| i.name == name) else {
            self.parameters.push((name.to_string(), parameter(name, value)?));
            return Ok(());
        };
        if self.inputs.iter().any(|t| t.name == name) {
            return Err(Error::invalid(format!("input '{name}' already exists in request")));
        }
        check_leaves(spec.datatype, value)?;
        let elements = count_leaves(value);
        let bytes = match spec.datatype.element_size() {
            Some(size) => elements.checked_mul(size).ok_or_else(|| {
                Error::invalid(format!("input '{name}' has too many elements of datatype {}", spec.datatype))
            })?,
            None => bytes_size(value),
        };
        if bytes.saturating_add(self.consumed) > self.max_input_bytes {
            return Err(Error::invalid(format!(
                "request size of {} bytes with input '{name}' of size {bytes} bytes exceeds the maximum allowed input \
                 size of {}. Use --http-max-input-size to increase the limit.",
                self.consumed, self.max_input_bytes
            )));
        }
        self.consumed += bytes;
        let metadata_shape: Vec<i64> = if self.policy.batches() {
            std::iter::once(-1).chain(spec.dims.iter().copied()).collect()
        } else {
            spec.dims.clone()
        };
        let shape = shape_for(name, &metadata_shape, elements)?;
        let data = data_from_json(name, spec.datatype, elements, value)?;
        self.inputs.push(Tensor::new(name, spec.datatype, shape, data));
        Ok(())
    }
}

/// Triton's `SetTritonParameterFromJsonParameter`: strings, integers, booleans and (as Triton
/// 2.51 takes them) other numbers as doubles; a list or an object is refused with its words.
fn parameter(name: &str, value: &Value) -> Result<ParamValue> {
    match value {
        Value::String(s) => Ok(ParamValue::Str(s.clone())),
        Value::Bool(b) => Ok(ParamValue::Bool(*b)),
        Value::Number(n) if n.is_i64() => Ok(ParamValue::Int(n.as_i64().expect("is_i64"))),
        Value::Number(n) => Ok(ParamValue::Double(n.as_f64().unwrap_or(f64::NAN))),
        _ => Err(Error::invalid(format!(
            "parameter '{name}' has invalid type. It should be either 'int', 'bool', or 'string'."
        ))),
    }
}

/// Triton's words for a BYTES or BOOL input given the wrong kind of JSON value (the other
/// datatypes are checked, with the element named, as the infer endpoint checks them).
fn check_leaves(datatype: DataType, value: &Value) -> Result<()> {
    match value {
        Value::Array(items) => items.iter().try_for_each(|v| check_leaves(datatype, v)),
        Value::String(_) if datatype == DataType::Bytes => Ok(()),
        _ if datatype == DataType::Bytes => Err(Error::invalid("attempt to access JSON non-string as string")),
        Value::Bool(_) => Ok(()),
        _ if datatype == DataType::Bool => Err(Error::invalid("attempt to access JSON non-boolean as boolean")),
        _ => Ok(()),
    }
}

/// The serialized size of BYTES data: each string plus its 4-byte length.
fn bytes_size(value: &Value) -> usize {
    match value {
        Value::Array(items) => items.iter().map(bytes_size).sum(),
        Value::String(s) => s.len() + 4,
        _ => 4,
    }
}

/// Triton's two passes: the fixed dims (from the innermost) divide the element count, then the
/// innermost `-1` takes what is left and any other `-1` is 1.
fn shape_for(name: &str, metadata: &[i64], elements: usize) -> Result<Vec<i64>> {
    let refuse = || Error::invalid(format!("The schema can not convert input '{name}' to tensor with proper shape"));
    let mut left = elements as i64;
    for &d in metadata.iter().rev() {
        match d {
            d if d < 0 => {}
            0 if left == 0 => {}
            0 => return Err(refuse()),
            d if left % d != 0 => return Err(refuse()),
            d => left /= d,
        }
    }
    let mut shape = metadata.to_vec();
    for d in shape.iter_mut().rev() {
        if *d == -1 {
            *d = left;
            left = 1;
        }
    }
    if left != 1 && elements != 0 {
        return Err(refuse());
    }
    Ok(shape)
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tritium_actors::policy::IoSpec;

    use super::*;

    fn spec(name: &str, datatype: DataType, dims: Vec<i64>) -> IoSpec {
        IoSpec {
            name: name.into(),
            datatype,
            dims,
            reshape: None,
            optional: false,
            allow_ragged_batch: false,
            is_shape_tensor: false,
        }
    }

    fn policy(max_batch_size: usize, inputs: Vec<IoSpec>) -> ModelPolicy {
        ModelPolicy {
            name: "m".into(),
            version: 1,
            max_batch_size,
            inputs,
            outputs: Vec::new(),
            instances: Vec::new(),
            scheduler: tritium_actors::policy::SchedulerPolicy::Direct,
            decoupled: false,
            queue_capacity: 16,
            warmup: Vec::new(),
            response_cache: false,
        }
    }

    #[test]
    fn shapes_follow_tritons_two_passes() {
        assert_eq!(shape_for("x", &[1, 1], 1).unwrap(), vec![1, 1]);
        assert_eq!(shape_for("x", &[1, -1], 3).unwrap(), vec![1, 3]);
        assert_eq!(shape_for("x", &[-1, -1], 3).unwrap(), vec![1, 3]);
        assert_eq!(shape_for("x", &[-1, 2], 6).unwrap(), vec![3, 2]);
        assert!(shape_for("x", &[2], 3).unwrap_err().message.contains("can not convert input 'x'"));
        assert!(shape_for("x", &[1, 1], 2).is_err());
    }

    #[test]
    fn inputs_come_from_fields_and_the_rest_are_parameters() {
        let p = policy(0, vec![spec("PROMPT", DataType::Bytes, vec![1, 1]), spec("N", DataType::I32, vec![-1])]);
        let body = json!({"PROMPT": "hi", "N": [1, 2, 3], "id": "7", "extra": 5, "parameters": {"flag": true}});
        let r = decode("m", None, &p, body.to_string().as_bytes(), 1 << 20).unwrap();
        assert_eq!(r.id, "7");
        let prompt = r.input("PROMPT").unwrap();
        assert_eq!((prompt.shape.clone(), prompt.bytes_elements().unwrap()[0].as_ref()), (vec![1, 1], &b"hi"[..]));
        assert_eq!(r.input("N").unwrap().shape, vec![3]);
        assert_eq!(r.parameters["extra"], ParamValue::Int(5));
        assert_eq!(r.parameters["flag"], ParamValue::Bool(true));
        assert_eq!(r.parameters["id"], ParamValue::Str("7".into()));
    }

    #[test]
    fn a_batching_model_gets_the_batch_dimension_and_parameters_may_name_inputs() {
        let p = policy(8, vec![spec("IN", DataType::F32, vec![2])]);
        let r = decode("m", None, &p, br#"{"parameters": {"IN": [1.5, 2]}}"#, 1 << 20).unwrap();
        assert_eq!(r.input("IN").unwrap().shape, vec![1, 2]);
    }

    #[test]
    fn sequence_parameters_drive_a_sequence() {
        let p = policy(0, vec![]);
        let body = br#"{"parameters": {"sequence_id": "chat-1", "sequence_start": true}}"#;
        let r = decode("m", None, &p, body, 1 << 20).unwrap();
        let s = r.sequence.unwrap();
        assert_eq!((s.id.to_string(), s.start, s.end), ("chat-1".to_string(), true, false));
    }

    #[test]
    fn refuses_what_triton_refuses_with_its_words() {
        let p = policy(0, vec![spec("PROMPT", DataType::Bytes, vec![1]), spec("STREAM", DataType::Bool, vec![1])]);
        let err = |body: &str| decode("m", None, &p, body.as_bytes(), 64).unwrap_err().message;
        assert!(err(r#"{"PROMPT": 1}"#).contains("attempt to access JSON non-string as string"));
        assert!(err(r#"{"STREAM": "no"}"#).contains("attempt to access JSON non-boolean as boolean"));
        assert!(err(r#"{"x": [1]}"#).contains("parameter 'x' has invalid type"));
        assert!(err(r#"{"parameters": 1}"#).contains("Expected JSON object for keyword: 'parameters'"));
        assert!(err(r#"{"parameters": {"nested": {"a": 1}}}"#)
            .contains("Converting keyword: 'parameters': parameter 'nested' has invalid type."));
        assert!(err(r#"{"PROMPT": "xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}"#)
            .contains("exceeds the maximum allowed input size of 64"));
        assert!(err("[1]").contains("JSON object"));
        assert!(decode("m", None, &p, b"", 64).unwrap().inputs.is_empty(), "an empty body is an empty request");
    }
}
