//! The binaries keep libtorch's folder as a run path (LIBTORCH, from the workspace's
//! .cargo/config.toml), as the server does, so torch_ceiling starts without LD_LIBRARY_PATH.
//! It also generates the KServe v2 gRPC service (Tritium's `proto/grpc_service.proto` and the
//! `model_config.proto` it imports) for the gRPC floor server (`src/bin/floor_grpc.rs`): a
//! tonic server only, with `Bytes` raw contents as Tritium decodes them.

use std::path::Path;

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Ok(libtorch) = std::env::var("LIBTORCH") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{libtorch}/lib");
    }

    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-changed=../../proto/grpc_service.proto");
    println!("cargo:rerun-if-changed=../../proto/model_config.proto");
    let mut compiler = protox::Compiler::new([Path::new("../../proto")]).expect("protox include path");
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
