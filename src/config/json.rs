//! `ModelConfig` as protobuf JSON: read for the load API's `config` override, written for
//! `GET /v2/models/{m}/config`. Triton prints proto field names, enums by name, 64-bit integers
//! as numbers and every scalar and repeated field even when it holds its default; message fields
//! and oneofs appear only when set. The descriptor drives both directions.

use prost::Message as _;
use prost_reflect::{DeserializeOptions, DynamicMessage, SerializeOptions};
use tritium_actors::{Error, Result};

use super::ModelConfig;
use crate::proto::message_descriptor;

const NAME: &str = "inference.ModelConfig";

/// Parses a config given as JSON (field names in proto or JSON spelling). Unknown fields are
/// errors, as Triton rejects them.
pub fn from_json(text: &str) -> Result<ModelConfig> {
    let mut de = serde_json::Deserializer::from_str(text);
    let options = DeserializeOptions::new().deny_unknown_fields(true);
    let message = DynamicMessage::deserialize_with_options(message_descriptor(NAME), &mut de, &options)
        .map_err(|e| Error::invalid(format!("Invalid config override: {e}")))?;
    de.end().map_err(|e| Error::invalid(format!("Invalid config override: {e}")))?;
    ModelConfig::decode(message.encode_to_vec().as_slice())
        .map_err(|e| Error::internal(format!("re-decoding the config override failed: {e}")))
}

/// The config as Triton's protobuf JSON.
pub fn to_json(config: &ModelConfig) -> serde_json::Value {
    let message = DynamicMessage::decode(message_descriptor(NAME), config.encode_to_vec().as_slice())
        .expect("a ModelConfig encodes to a valid ModelConfig");
    let options =
        SerializeOptions::new().skip_default_fields(false).use_proto_field_name(true).stringify_64_bit_integers(false);
    message
        .serialize_with_options(serde_json::value::Serializer, &options)
        .expect("serializing a message to a JSON value cannot fail")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn json_round_trip_keeps_fields_and_prints_defaults() {
        let config = from_json(
            r#"{"name":"m","backend":"onnxruntime","max_batch_size":8,
                "input":[{"name":"INPUT0","data_type":"TYPE_FP32","dims":[16]}],
                "dynamicBatching":{"maxQueueDelayMicroseconds":"100"}}"#,
        )
        .unwrap();
        assert_eq!(config.max_batch_size, 8);
        assert_eq!(config.input[0].dims, vec![16]);
        let json = to_json(&config);
        assert_eq!(json["input"][0]["dims"], serde_json::json!([16]));
        assert_eq!(json["input"][0]["data_type"], "TYPE_FP32");
        assert_eq!(json["input"][0]["optional"], false);
        assert_eq!(json["platform"], "");
        assert_eq!(json["output"], serde_json::json!([]));
        assert_eq!(json["dynamic_batching"]["max_queue_delay_microseconds"], 100);
        assert!(json.get("sequence_batching").is_none());
        assert!(json.get("response_cache").is_none());
        assert_eq!(from_json(&json.to_string()).unwrap(), config);
    }

    #[test]
    fn bad_override_json_is_an_invalid_argument() {
        for text in ["{not json", r#"{"name":"m","no_such_field":1}"#, r#"{"max_batch_size":"x"}"#, "{} 3"] {
            let err = from_json(text).unwrap_err();
            assert_eq!(err.kind, tritium_actors::ErrorKind::InvalidArgument, "{text}");
            assert!(err.message.starts_with("Invalid config override"), "{}", err.message);
        }
    }
}
