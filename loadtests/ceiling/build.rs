//! Generates the KServe v2 gRPC service (Tritium's `proto/grpc_service.proto` and the
//! `model_config.proto` it imports) for the gRPC floor server (`src/bin/floor_grpc.rs`): a
//! tonic server only, with `Bytes` raw contents as Tritium decodes them.

use std::path::Path;

fn main() {
    let dir = Path::new("../../proto");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../../proto/grpc_service.proto");
    println!("cargo:rerun-if-changed=../../proto/model_config.proto");
    let mut compiler = protox::Compiler::new([dir]).expect("protox include path");
    compiler.include_imports(true);
    compiler.open_files(["grpc_service.proto"]).unwrap_or_else(|e| panic!("protox: {e:?}"));
    tonic_prost_build::configure()
        .build_server(true)
        .build_client(false)
        // Every RPC the floor does not answer says UNIMPLEMENTED.
        .generate_default_stubs(true)
        .bytes(".")
        .compile_fds(compiler.file_descriptor_set())
        .expect("generate Rust from proto/");
}
