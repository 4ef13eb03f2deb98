//! Builds the CUDA shim (`cuda/shim.cpp`) as a shared library when libtorch's headers and the
//! CUDA runtime headers are at hand (scripts/install_libtorch.sh puts both under `$LIBTORCH`:
//! `include/` from the torch wheel, `cuda/include/` from the nvidia-cuda-runtime and
//! nvidia-cuda-crt wheels). Nothing CUDA is linked: the shim's libtorch_cuda and CUDA runtime
//! symbols resolve when the server loads it after `libtorch_cuda.so`. Without the headers the
//! crate builds without the shim (`cfg(tritium_cuda_shim)` off) and CUDA reports why it is off.

use std::path::PathBuf;
use std::process::Command;

fn main() {
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
