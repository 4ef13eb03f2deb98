//! A gRPC `ModelInferRequest` message, as `tritium::fuzzing::grpc_infer` decodes it.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    tritium::fuzzing::grpc_infer(data);
});
