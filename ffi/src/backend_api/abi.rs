//! The backend API's plain C values, as `tritonserver.h` and `tritonbackend.h` define them:
//! enums are integers with constants (never transmuted into Rust enums), and the API version
//! Tritium reports lives here once.

/// The `TRITONBACKEND` API version Tritium implements (Triton 2.51 backends check major ==
/// 1 and minor >= the one they were built with).
pub const BACKEND_API_VERSION: (u32, u32) = (1, 19);

/// The `TRITONSERVER` API version Tritium implements (Triton 2.51's `tritonserver.h`).
pub const SERVER_API_VERSION: (u32, u32) = (1, 34);

/// `TRITONSERVER_Error_Code`.
pub type ErrorCode = u32;
pub const ERROR_UNKNOWN: ErrorCode = 0;
pub const ERROR_INTERNAL: ErrorCode = 1;
pub const ERROR_NOT_FOUND: ErrorCode = 2;
pub const ERROR_INVALID_ARG: ErrorCode = 3;
pub const ERROR_UNAVAILABLE: ErrorCode = 4;
pub const ERROR_UNSUPPORTED: ErrorCode = 5;
pub const ERROR_ALREADY_EXISTS: ErrorCode = 6;
pub const ERROR_CANCELLED: ErrorCode = 7;

/// `TRITONSERVER_DataType`.
pub type DataType = u32;
pub const TYPE_INVALID: DataType = 0;
pub const TYPE_BYTES: DataType = 13;

/// Protocol names by `TRITONSERVER_DataType` value, with element sizes (0 = variable).
const DATA_TYPES: [(&str, u32); 15] = [
    ("INVALID", 0),
    ("BOOL", 1),
    ("UINT8", 1),
    ("UINT16", 2),
    ("UINT32", 4),
    ("UINT64", 8),
    ("INT8", 1),
    ("INT16", 2),
    ("INT32", 4),
    ("INT64", 8),
    ("FP16", 2),
    ("FP32", 4),
    ("FP64", 8),
    ("BYTES", 0),
    ("BF16", 2),
];

/// The protocol name of a datatype (`FP32`), `INVALID` for an unknown value.
pub fn data_type_name(datatype: DataType) -> &'static str {
    DATA_TYPES.get(datatype as usize).map_or("INVALID", |(name, _)| name)
}

/// Bytes per element; 0 for BYTES and unknown values.
pub fn data_type_size(datatype: DataType) -> u32 {
    DATA_TYPES.get(datatype as usize).map_or(0, |(_, size)| *size)
}

/// The datatype of a protocol name, `TYPE_INVALID` when it is none.
pub fn data_type_of(name: &str) -> DataType {
    DATA_TYPES.iter().position(|(n, _)| *n == name && *n != "INVALID").map_or(TYPE_INVALID, |i| i as DataType)
}

/// `TRITONSERVER_MemoryType`.
pub type MemoryType = u32;
pub const MEMORY_CPU: MemoryType = 0;
pub const MEMORY_CPU_PINNED: MemoryType = 1;
pub const MEMORY_GPU: MemoryType = 2;

/// `TRITONSERVER_ParameterType`.
pub type ParameterType = u32;
pub const PARAMETER_STRING: ParameterType = 0;
pub const PARAMETER_INT: ParameterType = 1;
pub const PARAMETER_BOOL: ParameterType = 2;
pub const PARAMETER_DOUBLE: ParameterType = 3;
pub const PARAMETER_BYTES: ParameterType = 4;

/// `TRITONSERVER_InstanceGroupKind`.
pub type InstanceGroupKind = u32;
pub const INSTANCEGROUPKIND_AUTO: InstanceGroupKind = 0;
pub const INSTANCEGROUPKIND_CPU: InstanceGroupKind = 1;
pub const INSTANCEGROUPKIND_GPU: InstanceGroupKind = 2;
pub const INSTANCEGROUPKIND_MODEL: InstanceGroupKind = 3;

/// `TRITONSERVER_LogLevel`.
pub type LogLevel = u32;
pub const LOG_INFO: LogLevel = 0;
pub const LOG_WARN: LogLevel = 1;
pub const LOG_ERROR: LogLevel = 2;
pub const LOG_VERBOSE: LogLevel = 3;

/// `TRITONBACKEND_ArtifactType`: the only kind is a filesystem path.
pub type ArtifactType = u32;
pub const ARTIFACT_FILESYSTEM: ArtifactType = 0;

/// `TRITONBACKEND_ExecutionPolicy`.
pub const EXECUTION_BLOCKING: u32 = 0;
pub const EXECUTION_DEVICE_BLOCKING: u32 = 1;

/// `TRITONSERVER_RequestFlag`.
pub const REQUEST_FLAG_SEQUENCE_START: u32 = 1;
pub const REQUEST_FLAG_SEQUENCE_END: u32 = 2;
/// `TRITONSERVER_RequestReleaseFlag`.
pub const REQUEST_RELEASE_ALL: u32 = 1;
pub const REQUEST_RELEASE_RESCHEDULE: u32 = 2;
/// `TRITONSERVER_ResponseCompleteFlag`.
pub const RESPONSE_COMPLETE_FINAL: u32 = 1;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn datatypes_follow_the_header_order() {
        assert_eq!(data_type_of("FP32"), 11);
        assert_eq!(data_type_of("BYTES"), TYPE_BYTES);
        assert_eq!(data_type_of("BF16"), 14);
        assert_eq!(data_type_of("INVALID"), TYPE_INVALID);
        assert_eq!(data_type_of("TYPE_FP32"), TYPE_INVALID);
        assert_eq!(data_type_name(9), "INT64");
        assert_eq!(data_type_name(99), "INVALID");
        assert_eq!(data_type_size(10), 2);
        assert_eq!(data_type_size(TYPE_BYTES), 0);
    }

    #[test]
    fn api_version_is_the_one_triton_2_51_backends_accept() {
        assert_eq!(BACKEND_API_VERSION, (1, 19));
        assert_eq!(SERVER_API_VERSION, (1, 34));
    }
}
