//! CUDA at run time, for the PyTorch backend.
//!
//! The server is built and linked against a CPU libtorch (`libtorch_cpu.so`, no CUDA library).
//! On a machine whose libtorch has CUDA, [`enable`] loads the `libtorch_cuda.so` that sits
//! beside the `libtorch_cpu.so` the process runs with (or the file a flag names) with
//! `RTLD_GLOBAL`, which registers libtorch's CUDA hooks, so tch's `Device::Cuda` works; then it
//! loads the shim (`cuda/shim.cpp`, built into this crate) for what tch lacks: pool streams,
//! CUDA graphs, event timing, and CUDA IPC memory for Triton's CUDA shared memory. It runs once per process;
//! when anything is missing, CUDA stays off with a reason that a KIND_GPU model's load error repeats.

mod shim;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

pub use shim::{Graph, IpcMemory, Stream, Timer};

/// Why CUDA is off, or why a CUDA call failed.
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct CudaError(pub String);

/// CUDA as this process has it: libtorch's CUDA library loaded, the shim resolved.
pub struct Runtime {
    api: shim::Api,
    devices: usize,
    libtorch_cuda: PathBuf,
}

static RUNTIME: OnceLock<Result<Runtime, CudaError>> = OnceLock::new();

/// Enables CUDA once for the process: the first call decides (`explicit` names the
/// `libtorch_cuda.so` to load; `None` looks beside the `libtorch_cpu.so` in use), later calls
/// return the same answer.
pub fn enable(explicit: Option<&Path>) -> Result<&'static Runtime, CudaError> {
    RUNTIME.get_or_init(|| load(explicit)).as_ref().map_err(Clone::clone)
}

/// The runtime if [`enable`] succeeded, else why CUDA is off (not yet enabled counts as off).
pub fn runtime() -> Result<&'static Runtime, CudaError> {
    match RUNTIME.get() {
        Some(result) => result.as_ref().map_err(Clone::clone),
        None => Err(CudaError("CUDA was not enabled at start".to_string())),
    }
}

impl Runtime {
    /// The number of CUDA devices libtorch sees.
    pub fn devices(&self) -> usize {
        self.devices
    }

    /// The `libtorch_cuda.so` that was loaded.
    pub fn library(&self) -> &Path {
        &self.libtorch_cuda
    }

    /// A new stream from libtorch's pool on `device`.
    pub fn stream(&'static self, device: usize) -> Result<Stream, CudaError> {
        if device >= self.devices {
            return Err(CudaError(format!(
                "GPU {device} does not exist: libtorch sees {} CUDA device(s)",
                self.devices
            )));
        }
        Stream::new(&self.api, device)
    }

    /// Captures what `body` launches on the calling thread's current stream as a graph.
    pub fn capture<T, E: std::fmt::Display>(
        &'static self,
        body: impl FnOnce() -> Result<T, E>,
    ) -> Result<(Graph, T), CudaError> {
        Graph::capture(&self.api, body)
    }

    /// Opens a client's CUDA IPC handle of `byte_size` bytes on `device`.
    pub fn open_ipc(&'static self, handle: &[u8], device: usize, byte_size: usize) -> Result<IpcMemory, CudaError> {
        if device >= self.devices {
            return Err(CudaError(format!(
                "GPU {device} does not exist: libtorch sees {} CUDA device(s)",
                self.devices
            )));
        }
        IpcMemory::open(&self.api, handle, device, byte_size)
    }

    /// A new pair of timing events.
    pub fn timer(&'static self) -> Result<Timer, CudaError> {
        Timer::new(&self.api)
    }
}

/// The folder of the `libtorch_cpu.so` mapped into this process, from `/proc/self/maps`.
pub fn libtorch_dir() -> Option<PathBuf> {
    let maps = std::fs::read_to_string("/proc/self/maps").ok()?;
    maps.lines()
        .filter_map(|line| line.split_whitespace().nth(5))
        .find(|path| Path::new(path).file_name().is_some_and(|n| n == "libtorch_cpu.so"))
        .and_then(|path| Path::new(path).parent().map(Path::to_path_buf))
}

fn load(explicit: Option<&Path>) -> Result<Runtime, CudaError> {
    let libtorch_cuda = match explicit {
        Some(path) => path.to_path_buf(),
        None => {
            let dir =
                libtorch_dir().ok_or_else(|| CudaError("libtorch_cpu.so is not loaded in this process".to_string()))?;
            dir.join("libtorch_cuda.so")
        }
    };
    if !libtorch_cuda.is_file() {
        return Err(CudaError(format!(
            "{} does not exist: the libtorch this server runs with has no CUDA",
            libtorch_cuda.display()
        )));
    }
    let flags = libc::RTLD_NOW | libc::RTLD_GLOBAL;
    // SAFETY: loading libtorch_cuda runs its static initializers, which register libtorch's
    // CUDA hooks with the libtorch_cpu already loaded (the same build, found beside it or named
    // by the operator); the library is never unloaded (leaked below), so no symbol outlives it.
    let library = unsafe { libloading::os::unix::Library::open(Some(&libtorch_cuda), flags) }
        .map_err(|e| CudaError(format!("cannot load {}: {e}", libtorch_cuda.display())))?;
    std::mem::forget(library);
    // libc10_cuda (a dependency of libtorch_cuda) holds c10's CUDA stream functions that the shim
    // calls: make its symbols global too, whether or not the loader did with its dependent.
    let c10_cuda = libtorch_cuda.with_file_name("libc10_cuda.so");
    if c10_cuda.is_file() {
        // SAFETY: the library is already loaded as libtorch_cuda's dependency; this only adds it
        // to the global scope, and it is never unloaded.
        let library = unsafe { libloading::os::unix::Library::open(Some(&c10_cuda), flags) }
            .map_err(|e| CudaError(format!("cannot load {}: {e}", c10_cuda.display())))?;
        std::mem::forget(library);
    }
    let shim = load_shim()?;
    let api = shim::Api::resolve(&shim)?;
    std::mem::forget(shim);
    let devices = api.device_count()?;
    if devices == 0 {
        return Err(CudaError(format!("{} is loaded, but it sees no CUDA device", libtorch_cuda.display())));
    }
    Ok(Runtime { api, devices, libtorch_cuda })
}

#[cfg(tritium_cuda_shim)]
fn load_shim() -> Result<libloading::Library, CudaError> {
    use std::io::Write;
    use std::os::fd::{AsRawFd, FromRawFd};
    static SHIM: &[u8] = include_bytes!(env!("TRITIUM_CUDA_SHIM"));
    // SAFETY: memfd_create takes a NUL-terminated name and flags; it returns a new descriptor
    // or -1, checked before the File takes ownership of it.
    let fd = unsafe { libc::memfd_create(c"tritium-cuda-shim".as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(CudaError(format!("memfd_create for the CUDA shim: {}", std::io::Error::last_os_error())));
    }
    // SAFETY: `fd` is a fresh descriptor owned by nothing else.
    let mut file = unsafe { std::fs::File::from_raw_fd(fd) };
    file.write_all(SHIM).map_err(|e| CudaError(format!("writing the CUDA shim: {e}")))?;
    let path = format!("/proc/self/fd/{}", file.as_raw_fd());
    // SAFETY: the shim has no static initializers beyond the C++ runtime's; its undefined symbols
    // resolve against libtorch_cuda, loaded globally just before. It stays loaded for the process.
    // RTLD_NOW: a missing symbol fails here, not at the first call.
    unsafe { libloading::os::unix::Library::open(Some(&path), libc::RTLD_NOW | libc::RTLD_LOCAL) }
        .map(libloading::Library::from)
        .map_err(|e| CudaError(format!("cannot load the CUDA shim: {e}")))
}

#[cfg(not(tritium_cuda_shim))]
fn load_shim() -> Result<libloading::Library, CudaError> {
    Err(CudaError(
        "this build has no CUDA shim: it was built without libtorch's and CUDA's headers (scripts/install_libtorch.sh)"
            .to_string(),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_libtorch_cuda_leaves_cuda_off_with_the_reason() {
        let e = load(Some(Path::new("/nonexistent/libtorch_cuda.so"))).err().expect("no such file");
        assert!(e.0.contains("/nonexistent/libtorch_cuda.so does not exist"), "{e}");
        assert!(runtime().is_err(), "nothing enabled CUDA in this test process");
    }

    #[test]
    fn the_shim_is_built_in_and_loads_only_after_libtorch_cuda() {
        // On a machine without libtorch_cuda the shim's CUDA symbols cannot resolve.
        #[cfg(tritium_cuda_shim)]
        {
            let e = load_shim().expect_err("unresolved libtorch_cuda symbols");
            assert!(e.0.contains("cannot load the CUDA shim"), "{e}");
        }
    }
}
