//! Builds the CUDA shim (`cuda/shim.cpp`) as a shared library when libtorch's headers and the
//! CUDA runtime headers are at hand (scripts/install_libtorch.sh puts both under `$LIBTORCH`:
//! `include/` from the torch wheel, `cuda/include/` from the nvidia-cuda-runtime and
//! nvidia-cuda-crt wheels). Nothing CUDA is linked: the shim's libtorch_cuda and CUDA runtime
//! symbols resolve when the server loads it after `libtorch_cuda.so`. Without the headers the
//! crate builds without the shim (`cfg(tritium_cuda_shim)` off) and CUDA reports why it is off.
//!
//! It also builds the alias template of the backend API host: an empty shared library whose SONAME is a
//! long placeholder, patched at run time into the name a backend NEEDs for Triton's core (e.g.
//! `libtritonserver.so`), so that the backend links against Tritium's exported functions.

use std::path::PathBuf;
use std::process::Command;

/// The alias template's SONAME; handed to the crate as `TRITIUM_ALIAS_PLACEHOLDER`, which
/// `src/backend_api/library.rs` looks for in the template to patch it.
const PLACEHOLDER: &str =
    "libtritonserver-tritium-alias-placeholder-0000000000000000000000000000000000000000000000000000000000000000.so";

fn main() {
    backend_api_alias();
    cuda_shim();
}

/// The backend API host's alias template.
fn backend_api_alias() {
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=CC");
    println!("cargo:rustc-env=TRITIUM_ALIAS_PLACEHOLDER={PLACEHOLDER}");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let source = out.join("alias.c");
    std::fs::write(&source, "/* Tritium's alias for Triton's core library: no code, only a SONAME. */\n")
        .expect("write alias.c");
    let cc = std::env::var("CC").unwrap_or_else(|_| "cc".to_string());
    let status = Command::new(&cc)
        .args(["-shared", "-nostdlib", "-fPIC", "-o"])
        .arg(out.join("alias.so"))
        .arg(format!("-Wl,-soname,{PLACEHOLDER}"))
        .arg(&source)
        .status()
        .unwrap_or_else(|e| panic!("running the C compiler '{cc}' for the backend API alias: {e}"));
    assert!(status.success(), "'{cc}' failed to build the backend API alias library");
}

/// The CUDA shim, when the headers are at hand.
fn cuda_shim() {
    println!("cargo::rustc-check-cfg=cfg(tritium_cuda_shim)");
    println!("cargo:rerun-if-changed=cuda/shim.cpp");
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    println!("cargo:rerun-if-env-changed=CXX");
    let Some(libtorch) = std::env::var_os("LIBTORCH").map(PathBuf::from) else {
        println!("cargo:warning=LIBTORCH is not set: building without the CUDA shim");
        return;
    };
    let includes =
        [libtorch.join("include"), libtorch.join("include/torch/csrc/api/include"), libtorch.join("cuda/include")];
    let wanted = [includes[0].join("ATen/cuda/CUDAGraph.h"), includes[2].join("cuda_runtime_api.h")];
    for file in &wanted {
        // A path that does not exist yet reruns this script on every build until it does.
        println!("cargo:rerun-if-changed={}", file.display());
    }
    if let Some(missing) = wanted.iter().find(|f| !f.is_file()) {
        println!(
            "cargo:warning=no {}: building without the CUDA shim (scripts/install_libtorch.sh installs the headers)",
            missing.display()
        );
        return;
    }
    let out = PathBuf::from(std::env::var("OUT_DIR").expect("OUT_DIR")).join("libtritium_cuda_shim.so");
    let cxx = std::env::var("CXX").unwrap_or_else(|_| "c++".to_string());
    let mut command = Command::new(&cxx);
    command.args(["-std=c++17", "-O2", "-fPIC", "-shared", "-D_GLIBCXX_USE_CXX11_ABI=1"]);
    for dir in &includes {
        command.arg("-I").arg(dir);
    }
    command.arg("cuda/shim.cpp").arg("-o").arg(&out);
    let status = command.status().unwrap_or_else(|e| panic!("cannot run {cxx} to build the CUDA shim: {e}"));
    assert!(status.success(), "{cxx} failed to build the CUDA shim (cuda/shim.cpp)");
    println!("cargo:rustc-cfg=tritium_cuda_shim");
    println!("cargo:rustc-env=TRITIUM_CUDA_SHIM={}", out.display());
}
