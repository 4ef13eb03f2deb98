//! Decodes a KServe v2 infer request (the JSON header plus the binary part) into the engine's
//! `InferRequest`, and says per output whether the response carries it as JSON or binary.
//! Only wire-format checks live here; the model-level ones are the engine's `validate`.

use bytes::Bytes;
use serde_json::{Map, Value};
use tritium_actors::tensor::element_count;
use tritium_actors::{DataType, Error, InferRequest, ParamValue, RequestedOutput, Result, Tensor};

use super::binary::BinaryCursor;
use super::tensor_json::data_from_json;
use crate::shm::{self, Placement};

/// How the response sends each output.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OutputPlan {
    /// `binary_data_output`: the kind of outputs the request did not list.
    pub default_binary: bool,
    /// Outputs the request listed, with their `binary_data`, in the request's order (a few: a
    /// list costs no hashing; an output listed twice takes its last entry).
    pub listed: Vec<(String, bool)>,
    /// Outputs to write into a registered shared-memory region instead of the body.
    pub shm: Vec<(String, Placement)>,
}

impl OutputPlan {
    /// Triton's rule: a listed output is binary only if it says `binary_data: true`; the others
    /// follow `binary_data_output`.
    pub fn is_binary(&self, output: &str) -> bool {
        self.listed.iter().rev().find(|(name, _)| name == output).map_or(self.default_binary, |&(_, binary)| binary)
    }

    /// Where `output` goes in shared memory, if the request placed it there.
    pub fn shm_of(&self, output: &str) -> Option<&Placement> {
        self.shm.iter().rev().find(|(name, _)| name == output).map(|(_, place)| place)
    }
}

fn parse_error(field: &str, detail: &str) -> Error {
    Error::invalid(format!("Unable to parse '{field}': {detail}"))
}

fn as_object<'a>(v: &'a Value, what: &str) -> Result<&'a Map<String, Value>> {
    v.as_object().ok_or_else(|| Error::invalid(format!("{what} must be a JSON object")))
}

fn string_field<'a>(obj: &'a Map<String, Value>, field: &str) -> Result<&'a str> {
    match obj.get(field) {
        Some(Value::String(s)) => Ok(s),
        Some(_) => Err(parse_error(field, "expected a string")),
        None => Err(parse_error(field, "the field is missing")),
    }
}

fn bool_param(v: &Value, name: &str) -> Result<bool> {
    v.as_bool().ok_or_else(|| parse_error(name, "expected a boolean"))
}

fn uint_param(v: &Value, name: &str) -> Result<u64> {
    v.as_u64().ok_or_else(|| parse_error(name, "expected an unsigned integer"))
}

/// Decodes the request for `model` (and `version`, `None` = latest). `json` is the JSON header,
/// `binary` the rest of the body (empty without `Inference-Header-Content-Length`). The typed
/// reading (`infer_header`) takes the usual header; anything else, errors included, is read here
/// as a `Value` tree, which words Triton's errors.
pub fn decode_infer(
    model: &str,
    version: Option<i64>,
    json: &[u8],
    binary: Bytes,
) -> Result<(InferRequest, OutputPlan)> {
    if let Some(decoded) = super::infer_header::decode_typed(model, version, json, binary.clone()) {
        return Ok(decoded);
    }
    decode_value(model, version, json, binary)
}

/// `decode_infer` through a `serde_json::Value` tree.
pub fn decode_value(
    model: &str,
    version: Option<i64>,
    json: &[u8],
    binary: Bytes,
) -> Result<(InferRequest, OutputPlan)> {
    let doc: Value = serde_json::from_slice(json)
        .map_err(|e| Error::invalid(format!("failed to parse the request JSON buffer: {e}")))?;
    // Triton's words: a non-object body has no 'inputs' member to read.
    let doc = doc
        .as_object()
        .ok_or_else(|| parse_error("inputs", "the request is not a JSON object, so it has no member 'inputs'"))?;
    let mut request = InferRequest::new(model, Vec::new());
    request.version = version;
    let mut plan = OutputPlan::default();

    if let Some(id) = doc.get("id") {
        request.id = id.as_str().ok_or_else(|| parse_error("id", "expected a string"))?.to_string();
    }
    if let Some(params) = doc.get("parameters") {
        decode_parameters(as_object(params, "'parameters'")?, &mut request, &mut plan)?;
    }

    let inputs = match doc.get("inputs") {
        Some(Value::Array(inputs)) => inputs,
        Some(_) => return Err(parse_error("inputs", "attempt to access JSON non-array as array")),
        None => return Err(parse_error("inputs", "attempt to access non-existing object member 'inputs'")),
    };
    let mut cursor = BinaryCursor::new(binary);
    for input in inputs {
        let tensor = decode_input(as_object(input, "an input")?, model, &mut cursor)?;
        request.inputs.push(tensor);
    }
    cursor.finish(model)?;

    if let Some(outputs) = doc.get("outputs") {
        let outputs = outputs.as_array().ok_or_else(|| parse_error("outputs", "expected a list of outputs"))?;
        for output in outputs {
            let (requested, binary, place) = decode_output(as_object(output, "an output")?)?;
            plan.listed.push((requested.name.clone(), binary));
            if let Some(place) = place {
                plan.shm.push((requested.name.clone(), place));
            }
            request.outputs.push(requested);
        }
    }
    Ok((request, plan))
}

pub(super) fn decode_parameters(
    params: &Map<String, Value>,
    request: &mut InferRequest,
    plan: &mut OutputPlan,
) -> Result<()> {
    let mut values = Vec::with_capacity(params.len());
    for (key, value) in params {
        if key == "binary_data_output" {
            plan.default_binary = bool_param(value, key)?;
            continue;
        }
        let v = match value {
            Value::String(s) => ParamValue::Str(s.clone()),
            Value::Bool(b) => ParamValue::Bool(*b),
            Value::Number(n) if n.is_i64() => ParamValue::Int(n.as_i64().expect("is_i64")),
            Value::Number(n) if n.is_u64() => ParamValue::UInt(n.as_u64().expect("is_u64")),
            Value::Number(n) => ParamValue::Double(n.as_f64().unwrap_or(f64::NAN)),
            _ => {
                return Err(Error::invalid(format!(
                    "parameter '{key}' has invalid type. It should be either 'int', 'bool', or 'string'."
                )))
            }
        };
        values.push((key.clone(), v));
    }
    crate::frontends::params::apply(request, values)
}

/// Triton's rule: exactly one of `data`, `binary_data_size` or `shared_memory_region`.
fn check_content_kind(input: &Map<String, Value>, params: Option<&Map<String, Value>>) -> Result<()> {
    let has_data = input.contains_key("data");
    let has_binary = params.is_some_and(|p| p.contains_key("binary_data_size"));
    let has_shm = params.is_some_and(|p| p.contains_key("shared_memory_region"));
    let count = has_data as u8 + has_binary as u8 + has_shm as u8;
    if count == 1 {
        return Ok(());
    }
    let mut msg = String::from(
        "Input must set only one of the following fields: 'data', 'binary_data_size' in 'parameters', \
         'shared_memory_region' in 'parameters'. But",
    );
    if count == 0 {
        msg.push_str(" no field is set");
    } else {
        msg.push_str(" set");
        for (set, name) in
            [(has_data, " 'data'"), (has_binary, " 'binary_data_size'"), (has_shm, " 'shared_memory_region'")]
        {
            if set {
                msg.push_str(name);
            }
        }
    }
    Err(Error::invalid(msg))
}

fn decode_shape(input: &Map<String, Value>) -> Result<Vec<i64>> {
    let dims = input
        .get("shape")
        .and_then(Value::as_array)
        .ok_or_else(|| parse_error("shape", "expected a list of dimensions"))?;
    dims.iter()
        .map(|d| {
            d.as_u64()
                .and_then(|d| i64::try_from(d).ok())
                .ok_or_else(|| parse_error("shape", "attempt to access JSON non-unsigned-integer as unsigned-integer"))
        })
        .collect()
}

fn decode_input(input: &Map<String, Value>, model: &str, cursor: &mut BinaryCursor) -> Result<Tensor> {
    let params = match input.get("parameters") {
        Some(p) => Some(as_object(p, "the 'parameters' of an input")?),
        None => None,
    };
    check_content_kind(input, params)?;
    let name = string_field(input, "name")?;
    let datatype_name = string_field(input, "datatype")?;
    let datatype = DataType::ALL
        .into_iter()
        .find(|d| d.as_str() == datatype_name)
        .ok_or_else(|| Error::invalid(format!("invalid datatype '{datatype_name}' for input '{name}'")))?;
    let shape = decode_shape(input)?;
    let elements = element_count(&shape).map_err(|e| Error::invalid(format!("input '{name}': {}", e.message)))?;

    if let Some(place) = placement(params, name)? {
        // A view of the mapping: the engine reads the region without a copy.
        let data = shm::read(&place.region, place.offset, place.byte_size)?;
        return Ok(Tensor::new(name, datatype, shape, data));
    }
    let data = match params.and_then(|p| p.get("binary_data_size")) {
        Some(size) => {
            let size = size.as_u64().ok_or_else(|| parse_error("binary_data_size", "expected an unsigned integer"))?;
            cursor.take(size, name, model)?
        }
        None => data_from_json(name, datatype, elements, &input["data"])?,
    };
    Ok(Tensor::new(name, datatype, shape, data))
}

/// The shared-memory placement named by a tensor's parameters, if any.
fn placement(params: Option<&Map<String, Value>>, tensor: &str) -> Result<Option<Placement>> {
    let Some(params) = params else { return Ok(None) };
    let Some(region) = params.get("shared_memory_region") else { return Ok(None) };
    let region = region.as_str().ok_or_else(|| parse_error("shared_memory_region", "expected a string"))?.to_string();
    let byte_size = match params.get("shared_memory_byte_size") {
        Some(v) => uint_param(v, "shared_memory_byte_size")?,
        None => {
            return Err(Error::invalid(format!(
                "'shared_memory_byte_size' is missing for '{tensor}', which uses shared memory region '{region}'"
            )))
        }
    };
    let offset = match params.get("shared_memory_offset") {
        Some(v) => uint_param(v, "shared_memory_offset")?,
        None => 0,
    };
    Ok(Some(Placement { region, offset, byte_size }))
}

fn decode_output(output: &Map<String, Value>) -> Result<(RequestedOutput, bool, Option<Placement>)> {
    let name = string_field(output, "name")?.to_string();
    let mut class_count = 0u32;
    let mut binary = false;
    let mut place = None;
    if let Some(params) = output.get("parameters") {
        let params = as_object(params, "the 'parameters' of an output")?;
        if let Some(p) = placement(Some(params), &name)? {
            shm::check_output(&p.region, p.offset, p.byte_size)?;
            place = Some(p);
        }
        if let Some(b) = params.get("binary_data") {
            binary = bool_param(b, "binary_data")?;
        }
        if let Some(c) = params.get("classification") {
            class_count = c
                .as_u64()
                .and_then(|c| u32::try_from(c).ok())
                .ok_or_else(|| Error::invalid("Unable to set 'classification': expected an unsigned 32-bit integer"))?;
        }
    }
    Ok((RequestedOutput { name, class_count }, binary, place))
}

#[cfg(test)]
mod tests {
    use serde_json::json;
    use tritium_actors::{CorrelationId, ErrorKind, SequenceFlags};

    use super::*;

    fn decode(doc: Value) -> Result<(InferRequest, OutputPlan)> {
        decode_infer("m", None, doc.to_string().as_bytes(), Bytes::new())
    }

    fn err(doc: Value) -> Error {
        decode(doc).unwrap_err()
    }

    #[test]
    fn decodes_ids_parameters_inputs_and_outputs() {
        let (r, plan) = decode(json!({
            "id": "42",
            "parameters": {"sequence_id": 7, "sequence_start": true, "priority": 2, "timeout": 100,
                           "binary_data_output": true, "custom": "x", "n": -3, "flag": false, "temp": 0.5},
            "inputs": [{"name": "IN", "shape": [1, 2], "datatype": "INT32", "data": [[1, 2]]}],
            "outputs": [{"name": "A", "parameters": {"classification": 3}},
                        {"name": "B", "parameters": {"binary_data": true}}]
        }))
        .unwrap();
        assert_eq!(r.id, "42");
        assert_eq!(r.sequence, Some(SequenceFlags { id: CorrelationId::U64(7), start: true, end: false }));
        assert_eq!((r.priority, r.timeout_us), (2, 100));
        assert_eq!(r.parameters.get("custom"), Some(&ParamValue::Str("x".into())));
        assert_eq!(r.parameters.get("n"), Some(&ParamValue::Int(-3)));
        assert_eq!(r.parameters.get("flag"), Some(&ParamValue::Bool(false)));
        assert_eq!(r.parameters.get("temp"), Some(&ParamValue::Double(0.5)));
        assert_eq!(r.inputs[0].shape, vec![1, 2]);
        assert_eq!(&r.inputs[0].data[..], &[1, 0, 0, 0, 2, 0, 0, 0]);
        assert_eq!(r.outputs[0], RequestedOutput { name: "A".into(), class_count: 3 });
        assert!(!plan.is_binary("A"), "a listed output without binary_data is JSON");
        assert!(plan.is_binary("B"));
        assert!(plan.is_binary("unlisted"));
    }

    #[test]
    fn string_sequence_ids_are_kept() {
        let (r, _) = decode(json!({"parameters": {"sequence_id": "abc", "sequence_end": true}, "inputs": []})).unwrap();
        assert_eq!(r.sequence, Some(SequenceFlags { id: CorrelationId::Str("abc".into()), start: false, end: true }));
    }

    #[test]
    fn binary_inputs_take_consecutive_slices_of_the_body() {
        let body = Bytes::from_static(b"\x01\x00\x00\x00\x02\x00\x00\x00\x05\x00\x00\x00hello\x07");
        let doc = json!({"inputs": [
            {"name": "A", "shape": [2], "datatype": "INT32", "parameters": {"binary_data_size": 8}},
            {"name": "S", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 9}},
            {"name": "J", "shape": [1], "datatype": "FP32", "data": [1.5]},
            {"name": "B", "shape": [1], "datatype": "UINT8", "parameters": {"binary_data_size": 1}}
        ]});
        let (r, _) = decode_infer("m", Some(3), doc.to_string().as_bytes(), body.clone()).unwrap();
        assert_eq!(r.version, Some(3));
        assert_eq!(r.inputs[0].data.as_ptr(), body.as_ptr(), "sliced, not copied");
        assert_eq!(r.inputs[1].data.as_ptr(), body[8..].as_ptr());
        assert_eq!(r.inputs[1].bytes_elements().unwrap(), vec![Bytes::from_static(b"hello")]);
        assert_eq!(&r.inputs[3].data[..], b"\x07");
        for t in &r.inputs {
            t.check_size().unwrap();
        }
    }

    #[test]
    fn binary_sizes_must_match_the_binary_part() {
        let doc = json!({"inputs": [{"name": "A", "shape": [2], "datatype": "INT32", "parameters": {"binary_data_size": 8}}]});
        let json = doc.to_string();
        let e = decode_infer("m", None, json.as_bytes(), Bytes::from(vec![0u8; 4])).unwrap_err();
        assert!(e.message.contains("unexpected size for input 'A', expecting 4 additional bytes for model 'm'"), "{e}");
        let e = decode_infer("m", None, json.as_bytes(), Bytes::from(vec![0u8; 9])).unwrap_err();
        assert!(e.message.contains("unexpected additional input data for model 'm'"), "{e}");
        let e = decode_infer("m", None, json.as_bytes(), Bytes::new()).unwrap_err();
        assert!(e.message.contains("expecting 8 additional bytes"), "{e}");
    }

    #[test]
    fn malformed_binary_bytes_layout_is_caught_by_the_size_check() {
        let doc = json!({"inputs": [{"name": "S", "shape": [1], "datatype": "BYTES", "parameters": {"binary_data_size": 6}}]});
        let (r, _) =
            decode_infer("m", None, doc.to_string().as_bytes(), Bytes::from_static(b"\x09\x00\x00\x00hi")).unwrap();
        assert!(r.inputs[0].check_size().is_err());
    }

    #[test]
    fn refuses_malformed_json_and_wrong_top_level_types() {
        assert!(err(json!("x")).message.contains("Unable to parse 'inputs'"));
        let e = decode_infer("m", None, b"{\"inputs\": [", Bytes::new()).unwrap_err();
        assert!(e.message.contains("failed to parse the request JSON buffer"), "{e}");
        assert_eq!(e.kind, ErrorKind::InvalidArgument);
        assert!(err(json!({})).message.contains("Unable to parse 'inputs'"));
        assert!(err(json!({"inputs": {}})).message.contains("Unable to parse 'inputs'"));
        assert!(err(json!({"id": 5, "inputs": []})).message.contains("Unable to parse 'id'"));
        assert!(err(json!({"inputs": [], "outputs": "A"})).message.contains("Unable to parse 'outputs'"));
    }

    #[test]
    fn refuses_bad_input_fields() {
        let input = |extra: Value| {
            let mut base = json!({"name": "IN", "shape": [1], "datatype": "FP32", "data": [1.0]});
            for (k, v) in extra.as_object().unwrap() {
                if v.is_null() {
                    base.as_object_mut().unwrap().remove(k);
                } else {
                    base[k] = v.clone();
                }
            }
            err(json!({"inputs": [base]})).message
        };
        assert!(input(json!({"name": null})).contains("Unable to parse 'name'"));
        assert!(input(json!({"datatype": "FLOAT"})).contains("invalid datatype 'FLOAT' for input 'IN'"));
        assert!(input(json!({"datatype": 3})).contains("Unable to parse 'datatype'"));
        assert!(input(json!({"shape": [-1]})).contains("Unable to parse 'shape'"));
        assert!(input(json!({"shape": "1"})).contains("Unable to parse 'shape'"));
        assert!(input(json!({"shape": [2]})).contains("Shape does not match"));
        assert!(input(json!({"data": null})).contains("But no field is set"));
        assert!(input(json!({"parameters": {"binary_data_size": 4}})).contains("But set 'data' 'binary_data_size'"));
        assert!(input(json!({"data": ["x"]})).contains("expects numbers"));
    }

    #[test]
    fn refuses_shapes_whose_element_count_overflows() {
        let e =
            err(json!({"inputs": [{"name": "IN", "shape": [i64::MAX, i64::MAX, 4], "datatype": "FP32", "data": []}]}));
        assert!(e.message.contains("too many elements") && e.message.contains("'IN'"), "{e}");
        let e = err(json!({"inputs": [{"name": "IN", "shape": [4611686018427387904u64, 4], "datatype": "FP64",
                                      "parameters": {"binary_data_size": 0}}]}));
        assert!(e.message.contains("too many elements"), "{e}");
    }

    #[test]
    fn refuses_bad_parameters() {
        let e = err(json!({"parameters": {"sequence_id": -1}, "inputs": []}));
        assert!(e.message.contains("Unable to parse 'sequence_id'"), "{e}");
        assert!(err(json!({"parameters": {"priority": "high"}, "inputs": []})).message.contains("'priority'"));
        assert!(err(json!({"parameters": {"sequence_start": 1}, "inputs": []})).message.contains("'sequence_start'"));
        assert!(err(json!({"parameters": {"triton_x": 1}, "inputs": []})).message.contains("reserved"));
        assert!(err(json!({"parameters": {"x": [1]}, "inputs": []})).message.contains("has invalid type"));
        assert!(err(json!({"parameters": {"x": null}, "inputs": []})).message.contains("has invalid type"));
        assert!(err(json!({"parameters": [], "inputs": []})).message.contains("must be a JSON object"));
    }

    #[test]
    fn refuses_bad_output_parameters() {
        let out = |p: Value| err(json!({"inputs": [], "outputs": [{"name": "O", "parameters": p}]}));
        assert!(out(json!({"classification": -1})).message.contains("'classification'"));
        assert!(out(json!({"binary_data": "yes"})).message.contains("'binary_data'"));
        assert!(out(json!({"shared_memory_region": "r"})).message.contains("'shared_memory_byte_size' is missing"));
        let e = out(json!({"shared_memory_region": "not_registered", "shared_memory_byte_size": 4}));
        assert_eq!(e.kind, ErrorKind::NotFound);
        assert!(err(json!({"inputs": [], "outputs": [{}]})).message.contains("Unable to parse 'name'"));
    }
}
