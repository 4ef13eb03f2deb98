//! Model configuration: Triton's `ModelConfig` message read from `config.pbtxt` (protobuf text
//! format) or JSON, printed as the JSON Triton serves, normalized and validated as Triton does,
//! and turned into the engine's `ModelPolicy`. The message itself is generated from
//! `proto/model_config.proto`; text and JSON go through its descriptor (prost-reflect), so the
//! three forms can never disagree on a field name.

mod json;
mod normalize;
mod policy;
mod sequence;
mod text;
mod validate;
mod warmup;

pub use json::{from_json, to_json};
pub use normalize::normalize;
pub use policy::{pin_instances, to_policy};
pub use text::parse_pbtxt;
use tritium_actors::DataType;
pub use validate::validate;

pub use crate::proto::inference::{
    model_config, model_instance_group, model_queue_policy, model_version_policy, DataType as ProtoDataType,
    ModelConfig, ModelDynamicBatching, ModelInput, ModelInstanceGroup, ModelOutput, ModelQueuePolicy,
    ModelTensorReshape, ModelVersionPolicy,
};

/// True for a model that is an ensemble (`platform: "ensemble"` or `ensemble_scheduling`).
pub fn is_ensemble(config: &ModelConfig) -> bool {
    config.platform == "ensemble"
        || matches!(config.scheduling_choice, Some(model_config::SchedulingChoice::EnsembleScheduling(_)))
}

/// A `parameters` entry that must be a non-negative integer (Tritium's own knobs: delays,
/// bounds, thread counts); None when the config does not set it.
pub fn uint_parameter(
    model: &str,
    parameters: &std::collections::HashMap<String, crate::proto::inference::ModelParameter>,
    key: &str,
) -> tritium_actors::Result<Option<u64>> {
    let Some(p) = parameters.get(key) else { return Ok(None) };
    p.string_value.trim().parse::<u64>().map(Some).map_err(|_| {
        tritium_actors::Error::invalid(format!(
            "model '{model}': parameter '{key}' must be a non-negative integer, got '{}'",
            p.string_value
        ))
    })
}

/// The config enum for an engine datatype.
pub fn proto_data_type(dt: DataType) -> ProtoDataType {
    match dt {
        DataType::Bool => ProtoDataType::TypeBool,
        DataType::U8 => ProtoDataType::TypeUint8,
        DataType::U16 => ProtoDataType::TypeUint16,
        DataType::U32 => ProtoDataType::TypeUint32,
        DataType::U64 => ProtoDataType::TypeUint64,
        DataType::I8 => ProtoDataType::TypeInt8,
        DataType::I16 => ProtoDataType::TypeInt16,
        DataType::I32 => ProtoDataType::TypeInt32,
        DataType::I64 => ProtoDataType::TypeInt64,
        DataType::F16 => ProtoDataType::TypeFp16,
        DataType::BF16 => ProtoDataType::TypeBf16,
        DataType::F32 => ProtoDataType::TypeFp32,
        DataType::F64 => ProtoDataType::TypeFp64,
        DataType::Bytes => ProtoDataType::TypeString,
    }
}

/// The engine datatype of a config `data_type` field; `None` for `TYPE_INVALID` and numbers
/// outside the enum.
pub fn engine_data_type(data_type: i32) -> Option<DataType> {
    let proto = ProtoDataType::try_from(data_type).ok()?;
    DataType::parse(proto.as_str_name())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatype_names_round_trip_through_the_config_enum() {
        for dt in DataType::ALL {
            let proto = proto_data_type(dt);
            assert_eq!(engine_data_type(proto as i32), Some(dt));
        }
        assert_eq!(proto_data_type(DataType::F32).as_str_name(), "TYPE_FP32");
        assert_eq!(proto_data_type(DataType::Bytes).as_str_name(), "TYPE_STRING");
        assert_eq!(engine_data_type(0), None);
        assert_eq!(engine_data_type(99), None);
    }
}
