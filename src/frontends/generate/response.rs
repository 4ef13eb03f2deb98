//! Triton's generate response mapping (`FinalizeResponse`, `ExactMappingOutput`): one flat JSON
//! object per response holding `model_name`, `model_version`, `id` (when the request had one),
//! every response parameter, and every output tensor as a field: its one element as a plain
//! value, or its elements as a flat list.

use serde_json::{Map, Value};
use tritium_actors::{Error, InferResponse, ParamValue, Result};

use crate::frontends::http::tensor_json::DataJson;

/// The JSON object of one response.
pub fn encode(response: &InferResponse) -> Result<Value> {
    let mut out = Map::new();
    if !response.id.is_empty() {
        out.insert("id".into(), Value::String(response.id.clone()));
    }
    out.insert("model_name".into(), Value::String(response.model.clone()));
    out.insert("model_version".into(), Value::String(response.version.to_string()));
    for (name, value) in &response.parameters {
        let v = match value {
            ParamValue::Bool(b) => Value::Bool(*b),
            ParamValue::Int(i) => Value::from(*i),
            ParamValue::UInt(u) => Value::from(*u),
            ParamValue::Double(d) => Value::from(*d),
            ParamValue::Str(s) => Value::String(s.clone()),
        };
        out.insert(name.clone(), v);
    }
    for tensor in &response.outputs {
        let data = serde_json::to_value(DataJson::new(tensor, &response.model)?)
            .map_err(|e| Error::internal(format!("output '{}': {e}", tensor.name)))?;
        let value = match data {
            Value::Array(mut items) if items.len() == 1 => items.pop().expect("one element"),
            other => other,
        };
        out.insert(tensor.name.clone(), value);
    }
    Ok(Value::Object(out))
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;
    use serde_json::json;
    use tritium_actors::tensor::serialize_bytes;
    use tritium_actors::{DataType, Tensor};

    use super::*;

    #[test]
    fn outputs_are_flattened_and_one_element_is_a_plain_value() {
        let response = InferResponse {
            id: "42".into(),
            model: "m".into(),
            version: 3,
            outputs: vec![
                Tensor::new("TEXT", DataType::Bytes, vec![1, 1], serialize_bytes(["hello"])),
                Tensor::new(
                    "IDS",
                    DataType::I32,
                    vec![1, 2],
                    Bytes::from([1i32, 2].iter().flat_map(|v| v.to_le_bytes()).collect::<Vec<u8>>()),
                ),
                Tensor::new("NONE", DataType::Bytes, vec![1, 0], Bytes::new()),
            ],
            parameters: [("note".to_string(), ParamValue::Str("x".into()))].into_iter().collect(),
            is_final: true,
            times: None,
        };
        assert_eq!(
            encode(&response).unwrap(),
            json!({"id": "42", "model_name": "m", "model_version": "3", "note": "x", "TEXT": "hello", "IDS": [1, 2], "NONE": []})
        );
    }
}
