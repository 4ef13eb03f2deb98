//! The binaries keep libtorch's folder as a run path (LIBTORCH, from the workspace's
//! .cargo/config.toml), as the server does, so torch_ceiling starts without LD_LIBRARY_PATH.

fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH");
    if let Ok(libtorch) = std::env::var("LIBTORCH") {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{libtorch}/lib");
    }
}
