//! Generates the protocol types from every `.proto` file in `proto/`, gives the binary libtorch's run
//! path, and exports the backend API host's functions from the binary.
//!
//! `protox` parses the files (no `protoc` needed), the descriptor set is written to
//! `$OUT_DIR/tritium_descriptor.bin` for runtime reflection (pbtxt and JSON of `ModelConfig`),
//! and `tonic-prost-build` writes one Rust file per package with messages, a tonic server and
//! a client (the client serves the integration tests). Dropping another `.proto` into `proto/`
//! is enough to have it compiled; `proto/health.proto` also turns on `cfg(tritium_health)`.

use std::path::{Path, PathBuf};

const PROTO_DIR: &str = "proto";

fn proto_files(dir: &Path) -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("cannot read {}: {e}", dir.display()))
        .map(|entry| entry.expect("proto dir entry").path())
        .filter(|p| p.extension().is_some_and(|ext| ext == "proto"))
        .collect();
    files.sort();
    files
}

fn main() {
    let dir = Path::new(PROTO_DIR);
    println!("cargo:rerun-if-changed=build.rs");
    // A folder makes cargo watch every file in it, so added and removed files count too.
    println!("cargo:rerun-if-changed={PROTO_DIR}");
    println!("cargo::rustc-check-cfg=cfg(tritium_health)");
    // The PyTorch backend links libtorch (torch-sys finds it through LIBTORCH, which
    // .cargo/config.toml points at the .libtorch that scripts/setup.sh installs): the binary
    // keeps that folder as a run path, so it starts without LD_LIBRARY_PATH.
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Ok(libtorch) = std::env::var("LIBTORCH") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{libtorch}/lib");
    }

    // Triton backend libraries (tritium-ffi's backend API host) resolve their TRITONSERVER_* and
    // TRITONBACKEND_* symbols against the binary's own exports.
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=TRITONSERVER_*");
    println!("cargo:rustc-link-arg-bins=-Wl,--export-dynamic-symbol=TRITONBACKEND_*");

    let files = proto_files(dir);
    for file in &files {
        println!("cargo:rerun-if-changed={}", file.display());
    }
    let names: Vec<PathBuf> = files.iter().map(|f| PathBuf::from(f.file_name().unwrap())).collect();
    if names.iter().any(|n| n == Path::new("health.proto")) {
        println!("cargo:rustc-cfg=tritium_health");
    }

    let mut compiler = protox::Compiler::new([dir]).expect("protox include path");
    compiler.include_imports(true).include_source_info(true);
    compiler.open_files(&names).unwrap_or_else(|e| panic!("protox: {e:?}"));

    let out_dir = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR"));
    std::fs::write(out_dir.join("tritium_descriptor.bin"), compiler.encode_file_descriptor_set())
        .expect("write descriptor set");

    tonic_prost_build::configure()
        .build_server(true)
        .build_client(true)
        // Raw tensor contents stay `Bytes` slices of the request buffer: no copy on decode.
        .bytes(".")
        .compile_fds(compiler.file_descriptor_set())
        .expect("generate Rust from proto/");
}
