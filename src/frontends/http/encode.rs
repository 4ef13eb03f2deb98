//! Encodes an `InferResponse` as Triton's infer response: the JSON
//! `{"id"?, "model_name", "model_version", "parameters"?, "outputs": [...]}` with each output's
//! `data` inline or, for binary outputs, `parameters.binary_data_size` and the raw bytes after
//! the JSON; an output written to shared memory has only its name, datatype and shape, as in
//! Triton 2.51. Outputs asked for with `classification` are turned into top-N classes first.

use std::collections::HashMap;

use actix_web::http::header;
use actix_web::HttpResponse;
use bytes::Bytes;
use serde::Serialize;
use serde_json::{Map, Value};
use tritium_actors::{InferResponse, ParamValue, Parameters, RequestedOutput, Result};

use super::binary::{body_with_binary, HEADER_LENGTH};
use super::infer_json::OutputPlan;
use super::tensor_json::DataJson;

/// The encoded response: the JSON header and the binary outputs in order.
#[derive(Debug)]
pub struct Encoded {
    pub json: Vec<u8>,
    pub binary: Vec<Bytes>,
}

#[derive(Serialize)]
struct OutputParams {
    binary_data_size: usize,
}

#[derive(Serialize)]
struct OutputJson<'a> {
    name: &'a str,
    datatype: &'static str,
    shape: &'a [i64],
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<OutputParams>,
    #[serde(skip_serializing_if = "Option::is_none")]
    data: Option<DataJson<'a>>,
}

#[derive(Serialize)]
struct ResponseJson<'a> {
    #[serde(skip_serializing_if = "str::is_empty")]
    id: &'a str,
    model_name: &'a str,
    model_version: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    parameters: Option<Map<String, Value>>,
    outputs: Vec<OutputJson<'a>>,
}

/// Response parameters as JSON values.
pub fn parameters_json(params: &Parameters) -> Map<String, Value> {
    params
        .iter()
        .map(|(k, v)| {
            let v = match v {
                ParamValue::Bool(b) => Value::Bool(*b),
                ParamValue::Int(i) => Value::from(*i),
                ParamValue::UInt(u) => Value::from(*u),
                ParamValue::Double(d) => Value::from(*d),
                ParamValue::Str(s) => Value::String(s.clone()),
            };
            (k.clone(), v)
        })
        .collect()
}

/// Encodes `response`. Output bytes that go binary are handed on as they are, never copied.
pub fn encode_response(
    response: &InferResponse,
    requested: &[RequestedOutput],
    plan: &OutputPlan,
    batched: bool,
    labels: &HashMap<String, Vec<String>>,
) -> Result<Encoded> {
    let outputs = crate::frontends::classification::final_outputs(response, requested, batched, labels)?;
    let mut binary = Vec::new();
    let mut json_outputs = Vec::with_capacity(outputs.len());
    for t in &outputs {
        let (parameters, data) = if let Some(place) = plan.shm_of(&t.name) {
            crate::shm::write(&place.region, place.offset, place.byte_size, &t.data, &t.name)?;
            (None, None)
        } else if plan.is_binary(&t.name) {
            if !t.data.is_empty() {
                binary.push(t.data.clone());
            }
            (Some(OutputParams { binary_data_size: t.data.len() }), None)
        } else {
            (None, Some(DataJson::new(t, &response.model)?))
        };
        json_outputs.push(OutputJson {
            name: &t.name,
            datatype: t.datatype.as_str(),
            shape: &t.shape,
            parameters,
            data,
        });
    }
    let doc = ResponseJson {
        id: &response.id,
        model_name: &response.model,
        model_version: response.version.to_string(),
        parameters: (!response.parameters.is_empty()).then(|| parameters_json(&response.parameters)),
        outputs: json_outputs,
    };
    let json = serde_json::to_vec(&doc)
        .map_err(|e| tritium_actors::Error::internal(format!("failed to write the response JSON: {e}")))?;
    Ok(Encoded { json, binary })
}

/// The HTTP response: plain JSON, or with binary outputs `application/octet-stream` and
/// `Inference-Header-Content-Length` giving the JSON's length.
pub fn into_http(encoded: Encoded) -> HttpResponse {
    if encoded.binary.is_empty() {
        return HttpResponse::Ok().insert_header((header::CONTENT_TYPE, "application/json")).body(encoded.json);
    }
    let header_len = encoded.json.len();
    HttpResponse::Ok()
        .insert_header((header::CONTENT_TYPE, "application/octet-stream"))
        .insert_header((HEADER_LENGTH, header_len.to_string()))
        .body(body_with_binary(encoded.json, encoded.binary))
}

#[cfg(test)]
mod tests {
    use actix_web::body::MessageBody;
    use serde_json::json;
    use tritium_actors::tensor::serialize_bytes;
    use tritium_actors::{DataType, Tensor};

    use super::*;

    fn response(outputs: Vec<Tensor>) -> InferResponse {
        InferResponse {
            id: String::new(),
            model: "m".into(),
            version: 2,
            outputs,
            parameters: Parameters::new(),
            is_final: true,
            times: None,
        }
    }

    fn f32s(name: &str, shape: Vec<i64>, v: &[f32]) -> Tensor {
        Tensor::new(
            name,
            DataType::F32,
            shape,
            Bytes::from(v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()),
        )
    }

    fn json_of(e: &Encoded) -> Value {
        serde_json::from_slice(&e.json).unwrap()
    }

    #[test]
    fn json_response_has_tritons_fields() {
        let mut r = response(vec![
            f32s("OUT", vec![1, 2], &[1.5, -2.0]),
            Tensor::new("S", DataType::Bytes, vec![1], serialize_bytes(["hi"])),
        ]);
        r.id = "7".into();
        r.parameters.insert("sequence_end".into(), ParamValue::Bool(true));
        let e = encode_response(&r, &[], &OutputPlan::default(), true, &HashMap::new()).unwrap();
        assert!(e.binary.is_empty());
        assert_eq!(
            json_of(&e),
            json!({"id": "7", "model_name": "m", "model_version": "2", "parameters": {"sequence_end": true},
                   "outputs": [{"name": "OUT", "datatype": "FP32", "shape": [1, 2], "data": [1.5, -2.0]},
                               {"name": "S", "datatype": "BYTES", "shape": [1], "data": ["hi"]}]})
        );
        assert!(std::str::from_utf8(&e.json).unwrap().starts_with("{\"id\":\"7\",\"model_name\""));
    }

    #[test]
    fn id_and_parameters_are_left_out_when_empty() {
        let e = encode_response(&response(vec![]), &[], &OutputPlan::default(), false, &HashMap::new()).unwrap();
        assert_eq!(json_of(&e), json!({"model_name": "m", "model_version": "2", "outputs": []}));
    }

    #[test]
    fn binary_outputs_go_after_the_json_without_copying() {
        let out = f32s("OUT", vec![2], &[1.0, 2.0]);
        let other = f32s("J", vec![1], &[3.0]);
        let plan = OutputPlan {
            default_binary: false,
            listed: vec![("OUT".to_string(), true), ("J".to_string(), false)],
            ..Default::default()
        };
        let e = encode_response(&response(vec![out.clone(), other]), &[], &plan, false, &HashMap::new()).unwrap();
        assert_eq!(e.binary.len(), 1);
        assert_eq!(e.binary[0].as_ptr(), out.data.as_ptr());
        let v = json_of(&e);
        assert_eq!(
            v["outputs"][0],
            json!({"name": "OUT", "datatype": "FP32", "shape": [2], "parameters": {"binary_data_size": 8}})
        );
        assert_eq!(v["outputs"][1]["data"], json!([3.0]));
    }

    #[test]
    fn empty_binary_output_has_size_zero_and_no_chunk() {
        let plan = OutputPlan { default_binary: true, listed: Vec::new(), ..Default::default() };
        let e =
            encode_response(&response(vec![f32s("OUT", vec![0], &[])]), &[], &plan, false, &HashMap::new()).unwrap();
        assert!(e.binary.is_empty());
        assert_eq!(json_of(&e)["outputs"][0]["parameters"], json!({"binary_data_size": 0}));
    }

    #[test]
    fn classification_replaces_the_output_with_labelled_classes() {
        let r = response(vec![f32s("PROB", vec![1, 3], &[0.2, 0.5, 0.3])]);
        let requested = vec![RequestedOutput { name: "PROB".into(), class_count: 2 }];
        let labels: HashMap<String, Vec<String>> =
            [("PROB".to_string(), vec!["a".into(), "b".into(), "c".into()])].into();
        let e = encode_response(&r, &requested, &OutputPlan::default(), true, &labels).unwrap();
        assert_eq!(
            json_of(&e)["outputs"][0],
            json!({"name": "PROB", "datatype": "BYTES", "shape": [1, 2], "data": ["0.500000:1:b", "0.300000:2:c"]})
        );
    }

    #[actix_rt::test]
    async fn http_response_headers_for_json_and_binary() {
        let json_only = into_http(Encoded { json: b"{}".to_vec(), binary: vec![] });
        assert_eq!(json_only.headers().get(header::CONTENT_TYPE).unwrap(), "application/json");
        assert!(json_only.headers().get(HEADER_LENGTH).is_none());
        let bin = into_http(Encoded { json: b"{\"a\":1}".to_vec(), binary: vec![Bytes::from_static(b"xyz")] });
        assert_eq!(bin.headers().get(header::CONTENT_TYPE).unwrap(), "application/octet-stream");
        assert_eq!(bin.headers().get(HEADER_LENGTH).unwrap(), "7");
        let body = actix_web::body::to_bytes(bin.into_body()).await.ok().unwrap();
        assert_eq!(&body[..], b"{\"a\":1}xyz");
        let _ = MessageBody::size(&json_only.into_body());
    }
}
