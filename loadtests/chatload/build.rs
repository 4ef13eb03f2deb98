//! The gRPC client (chatload) and server (chatecho: `ModelStreamInfer` only, every other call
//! answers UNIMPLEMENTED) from the server's own `proto/grpc_service.proto` (protox: no `protoc`).

fn main() {
    let dir = "../../proto";
    println!("cargo:rerun-if-changed={dir}");
    let mut compiler = protox::Compiler::new([dir]).expect("protox include path");
    compiler.include_imports(true);
    compiler.open_files(["grpc_service.proto"]).unwrap_or_else(|e| panic!("protox: {e:?}"));
    tonic_prost_build::configure()
        .build_server(true)
        .generate_default_stubs(true)
        .build_client(true)
        .bytes(".")
        .compile_fds(compiler.file_descriptor_set())
        .expect("generate Rust from proto/");
}
