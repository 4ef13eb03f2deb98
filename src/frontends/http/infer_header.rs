//! The fast way to read a KServe v2 infer request's JSON header: one typed, borrowing
//! `Deserialize` of the fields Tritium reads (names and datatypes borrowed from the body, no
//! `serde_json::Value` tree, nothing kept that the request does not use).
//!
//! It is only a fast path. Any header it does not take exactly as `infer_json::decode_infer`'s
//! `Value` reading would (malformed JSON, a field of another type, a `null`, a duplicate field, a
//! field it does not read, a string with escapes, an array where an object belongs, any error at
//! all) gives `None`, and the
//! caller reads the header again the `Value` way, which accepts it or answers Triton's error text.
//! So every error a client sees comes from one place, and a header read here gives the same
//! request as the `Value` reading (`tests` below and the `infer_body` fuzz target check both).

use std::marker::PhantomData;

use bytes::Bytes;
use serde::de::value::MapAccessDeserializer;
use serde::de::{MapAccess, Visitor};
use serde::{Deserialize, Deserializer};
use serde_json::{Map, Value};
use tritium_actors::tensor::element_count;
use tritium_actors::{DataType, InferRequest, RequestedOutput, Tensor};

use super::binary::BinaryCursor;
use super::infer_json::{decode_parameters, OutputPlan};
use super::tensor_json::data_from_json;
use crate::shm::{self, Placement};

/// A JSON object read as `T`, and nothing else: serde's derived structs also take a JSON
/// array (field by position), which the `Value` reading refuses.
struct Obj<T>(T);

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Obj<T> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct V<T>(PhantomData<T>);
        impl<'de, T: Deserialize<'de>> Visitor<'de> for V<T> {
            type Value = T;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<T, A::Error> {
                T::deserialize(MapAccessDeserializer::new(map))
            }
        }
        d.deserialize_map(V(PhantomData)).map(Obj)
    }
}

/// A field that, when present, holds a `T` (a `null` is refused, as the `Value` reading
/// refuses it, instead of serde's reading it as absent).
fn present<'de, D: Deserializer<'de>, T: Deserialize<'de>>(d: D) -> Result<Option<T>, D::Error> {
    T::deserialize(d).map(Some)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Header<'a> {
    #[serde(default, deserialize_with = "present", borrow)]
    id: Option<&'a str>,
    #[serde(default, deserialize_with = "present")]
    parameters: Option<Obj<Map<String, Value>>>,
    #[serde(borrow)]
    inputs: Vec<Obj<Input<'a>>>,
    #[serde(default, deserialize_with = "present", borrow)]
    outputs: Option<Vec<Obj<Output<'a>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Input<'a> {
    name: &'a str,
    datatype: &'a str,
    shape: Vec<u64>,
    /// Kept as a `Value`: JSON tensor data is read by `data_from_json`, as on the `Value` path.
    #[serde(default, deserialize_with = "present")]
    data: Option<Value>,
    #[serde(default, deserialize_with = "present", borrow)]
    parameters: Option<Obj<Params<'a>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Output<'a> {
    name: &'a str,
    #[serde(default, deserialize_with = "present", borrow)]
    parameters: Option<Obj<Params<'a>>>,
}

/// A tensor's parameters that Tritium reads. Any other leaves the header to the `Value` reading,
/// which ignores it.
#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct Params<'a> {
    #[serde(default, deserialize_with = "present")]
    binary_data_size: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    binary_data: Option<bool>,
    #[serde(default, deserialize_with = "present")]
    classification: Option<u64>,
    #[serde(default, deserialize_with = "present", borrow)]
    shared_memory_region: Option<&'a str>,
    #[serde(default, deserialize_with = "present")]
    shared_memory_byte_size: Option<u64>,
    #[serde(default, deserialize_with = "present")]
    shared_memory_offset: Option<u64>,
}

impl Params<'_> {
    /// Where the tensor lives in shared memory; `None` inside `Some` when it does not.
    fn placement(&self) -> Option<Option<Placement>> {
        let Some(region) = self.shared_memory_region else { return Some(None) };
        Some(Some(Placement {
            region: region.to_string(),
            offset: self.shared_memory_offset.unwrap_or(0),
            byte_size: self.shared_memory_byte_size?,
        }))
    }
}

/// The request and its output plan, or `None` where the `Value` reading must decide (see the
/// module's doc).
pub fn decode_typed(
    model: &str,
    version: Option<i64>,
    json: &[u8],
    binary: Bytes,
) -> Option<(InferRequest, OutputPlan)> {
    // Nothing is skipped unread (the structs deny unknown fields): serde_json skips a value
    // without checking it, so an unknown field holding invalid UTF-8 or a number out of range
    // would be taken here and refused by the `Value` reading (both found by the bounded fuzz
    // run). The text check stays as a second guard for the first of them.
    let text = std::str::from_utf8(json).ok()?;
    let Obj(header) = serde_json::from_str::<Obj<Header>>(text).ok()?;
    let mut request = InferRequest::new(model, Vec::with_capacity(header.inputs.len()));
    request.version = version;
    let mut plan = OutputPlan::default();
    if let Some(id) = header.id {
        request.id = id.to_string();
    }
    if let Some(Obj(params)) = &header.parameters {
        decode_parameters(params, &mut request, &mut plan).ok()?;
    }
    let mut cursor = BinaryCursor::new(binary);
    for Obj(input) in header.inputs {
        request.inputs.push(decode_input(input, model, &mut cursor)?);
    }
    cursor.finish(model).ok()?;
    if let Some(outputs) = header.outputs {
        request.outputs.reserve_exact(outputs.len());
        plan.listed.reserve_exact(outputs.len());
        for Obj(output) in outputs {
            let params = output.parameters.map(|Obj(p)| p).unwrap_or_default();
            let place = params.placement()?;
            if let Some(p) = &place {
                shm::check_output(&p.region, p.offset, p.byte_size).ok()?;
            }
            let class_count = match params.classification {
                Some(c) => u32::try_from(c).ok()?,
                None => 0,
            };
            let name = output.name.to_string();
            plan.listed.push((name.clone(), params.binary_data.unwrap_or(false)));
            if let Some(place) = place {
                plan.shm.push((name.clone(), place));
            }
            request.outputs.push(RequestedOutput { name, class_count });
        }
    }
    Some((request, plan))
}

fn decode_input(input: Input, model: &str, cursor: &mut BinaryCursor) -> Option<Tensor> {
    let params = input.parameters.map(|Obj(p)| p);
    let has_binary = params.as_ref().is_some_and(|p| p.binary_data_size.is_some());
    let has_shm = params.as_ref().is_some_and(|p| p.shared_memory_region.is_some());
    // Exactly one of them, or the `Value` reading words the error.
    if input.data.is_some() as u8 + has_binary as u8 + has_shm as u8 != 1 {
        return None;
    }
    let datatype = DataType::ALL.into_iter().find(|d| d.as_str() == input.datatype)?;
    let shape = input.shape.into_iter().map(i64::try_from).collect::<Result<Vec<_>, _>>().ok()?;
    let elements = element_count(&shape).ok()?;
    let name = input.name;
    let params = params.unwrap_or_default();
    let data = if let Some(place) = params.placement()? {
        shm::read(&place.region, place.offset, place.byte_size).ok()?
    } else if let Some(size) = params.binary_data_size {
        cursor.take(size, name, model).ok()?
    } else {
        data_from_json(name, datatype, elements, input.data.as_ref()?).ok()?
    };
    Some(Tensor::new(name, datatype, shape, data))
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::frontends::http::infer_json::decode_value;

    /// What a decoded request is made of, for comparing the two readings.
    fn parts(r: &InferRequest) -> String {
        format!(
            "{:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?} {:?}",
            r.id, r.model, r.version, r.inputs, r.outputs, r.parameters, r.sequence, r.priority, r.timeout_us
        )
    }

    /// The typed reading takes `json` and gives what the `Value` reading gives.
    fn same(json: &str, binary: &'static [u8]) {
        let typed = decode_typed("m", Some(2), json.as_bytes(), Bytes::from_static(binary));
        let (tr, tp) = typed.unwrap_or_else(|| panic!("the typed reading refused {json}"));
        let (vr, vp) = decode_value("m", Some(2), json.as_bytes(), Bytes::from_static(binary)).unwrap();
        assert_eq!(parts(&tr), parts(&vr), "{json}");
        assert_eq!(tp, vp, "{json}");
    }

    /// The typed reading leaves `json` to the `Value` reading.
    fn declines(json: &str) {
        assert!(decode_typed("m", None, json.as_bytes(), Bytes::new()).is_none(), "{json}");
    }

    #[test]
    fn reads_what_perf_analyzer_and_tritonclient_send_as_the_value_reading_does() {
        same(
            r#"{"inputs":[{"name":"INPUT0","shape":[1,16],"datatype":"FP32","parameters":{"binary_data_size":4}},
                {"name":"INPUT1","shape":[1],"datatype":"INT8","parameters":{"binary_data_size":1}}],
               "outputs":[{"name":"OUTPUT0","parameters":{"binary_data":true}},{"name":"OUTPUT1"}]}"#
                .replace("[1,16]", "[1,1]")
                .as_str(),
            b"\x00\x00\x80?\x07",
        );
        let doc = json!({
            "id": "42",
            "parameters": {"sequence_id": 7, "sequence_start": true, "priority": 2, "timeout": 100,
                           "binary_data_output": true, "custom": "x", "n": -3, "flag": false, "temp": 0.5},
            "inputs": [{"name": "IN", "shape": [1, 2], "datatype": "INT32", "data": [[1, 2]]}],
            "outputs": [{"name": "A", "parameters": {"classification": 3}},
                        {"name": "B", "parameters": {"binary_data": false}}]
        });
        same(&doc.to_string(), b"");
        same(r#"{"inputs":[]}"#, b"");
        same(r#"{"inputs":[{"name":"S","shape":[1],"datatype":"BYTES","data":["hi"]}],"outputs":[]}"#, b"");
    }

    #[test]
    fn leaves_anything_unusual_or_wrong_to_the_value_reading() {
        for doc in [
            r#"{"inputs": ["#,
            r#""x""#,
            r#"[]"#,
            r#"{}"#,
            r#"{"inputs": {}}"#,
            r#"{"id": null, "inputs": []}"#,
            r#"{"id": 5, "inputs": []}"#,
            r#"{"id": "a\"b", "inputs": []}"#,
            r#"{"inputs": [], "inputs": []}"#,
            r#"{"inputs": [], "outputs": null}"#,
            r#"{"inputs": [], "outputs": [["O"]]}"#,
            r#"{"inputs": [], "parameters": null}"#,
            r#"{"inputs": [], "parameters": {"triton_x": 1}}"#,
            r#"{"inputs": [["IN", [1], "FP32", [1.0]]]}"#,
            r#"{"inputs": [{"name": "IN", "shape": [1], "datatype": "FP32"}]}"#,
            r#"{"inputs": [{"name": "IN", "shape": [1], "datatype": "FP32", "data": [1.0], "parameters": {"binary_data_size": null}}]}"#,
            r#"{"inputs": [{"name": "IN", "shape": [1.0], "datatype": "FP32", "data": [1.0]}]}"#,
            r#"{"inputs": [{"name": "IN", "shape": [-1], "datatype": "FP32", "data": [1.0]}]}"#,
            r#"{"inputs": [{"name": "IN", "shape": [2], "datatype": "FP32", "data": [1.0]}]}"#,
            r#"{"inputs": [{"name": "IN", "shape": [1], "datatype": "FLOAT", "data": [1.0]}]}"#,
            r#"{"inputs": [{"name": "IN", "shape": [1], "datatype": "FP32", "parameters": {"binary_data_size": 4}}]}"#,
            r#"{"inputs": [], "outputs": [{"name": "O", "parameters": {"classification": -1}}]}"#,
            r#"{"inputs": [], "outputs": [{"name": "O", "parameters": {"shared_memory_region": "r"}}]}"#,
            r#"{"inputs": [], "outputs": [{"name": "O", "parameters": {"binary_data": "yes"}}]}"#,
        ] {
            declines(doc);
        }
        // Invalid UTF-8 in a field the typed reading would skip (found by the bounded fuzz run).
        let doc = b"{\"other\": \"\xfe1\", \"inputs\": []}";
        assert!(decode_typed("m", None, doc, Bytes::new()).is_none());
        assert!(decode_value("m", None, doc, Bytes::new()).is_err());
    }

    /// A field it does not read, at every level, is left to the `Value` reading: serde_json
    /// would skip it unchecked (a number out of range, found by the bounded fuzz run).
    #[test]
    fn leaves_fields_it_does_not_read_to_the_value_reading() {
        for doc in [
            r#"{"inputs": [], "other": 1}"#,
            r#"{"inputs": [{"name": "IN", "shape": [1], "datatype": "FP32", "data": [1.0], "other": 1}]}"#,
            r#"{"inputs": [{"name": "IN", "shape": [1], "datatype": "FP32", "data": [1.0], "parameters": {"other": 1}}]}"#,
            r#"{"inputs": [], "outputs": [{"name": "O", "other": 1}]}"#,
            r#"{"inputs": [], "outputs": [{"name": "O", "parameters": {"other": 1}}]}"#,
        ] {
            declines(doc);
            assert!(decode_value("m", None, doc.as_bytes(), Bytes::new()).is_ok(), "{doc}");
        }
        let doc = br#"{"inputs": [], "t>meout": 1e3081000}"#;
        assert!(decode_typed("m", None, doc, Bytes::new()).is_none());
        assert!(decode_value("m", None, doc, Bytes::new()).is_err());
    }
}
