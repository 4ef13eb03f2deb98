//! The protocol types generated from `proto/` by `build.rs` (Triton's `inference` package, and
//! gRPC health when `proto/health.proto` is present), plus the descriptor set for reflection:
//! the config module parses pbtxt and prints JSON through it.

use std::sync::OnceLock;

use prost_reflect::{DescriptorPool, MessageDescriptor};

/// Triton's `inference` package: `ModelConfig` and friends, and the gRPC service when
/// `proto/grpc_service.proto` is present.
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod inference {
    tonic::include_proto!("inference");
}

/// The standard gRPC health-checking service.
#[cfg(tritium_health)]
#[allow(clippy::all, clippy::pedantic, missing_docs)]
pub mod health {
    tonic::include_proto!("grpc.health.v1");
}

/// Encoded `FileDescriptorSet` of every file in `proto/` (with imports and source info).
pub const FILE_DESCRIPTOR_SET: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/tritium_descriptor.bin"));

/// The descriptors of every message in `proto/`, decoded once.
pub fn descriptor_pool() -> &'static DescriptorPool {
    static POOL: OnceLock<DescriptorPool> = OnceLock::new();
    POOL.get_or_init(|| DescriptorPool::decode(FILE_DESCRIPTOR_SET).expect("build.rs wrote a valid descriptor set"))
}

/// The descriptor of a message by its full name (`inference.ModelConfig`).
///
/// Panics if the name is not in `proto/`: callers name messages they compiled in.
pub fn message_descriptor(full_name: &str) -> MessageDescriptor {
    descriptor_pool().get_message_by_name(full_name).unwrap_or_else(|| panic!("{full_name} is not in proto/"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn descriptor_pool_knows_model_config() {
        let desc = message_descriptor("inference.ModelConfig");
        assert_eq!(desc.get_field_by_name("max_batch_size").unwrap().number(), 4);
        assert_eq!(desc.get_field_by_name("response_cache").unwrap().number(), 24);
    }
}
