//! CUDA shared memory, as Triton's `cudasharedmemory` extension has it: a client allocates GPU
//! memory, registers its `cudaIpcMemHandle_t` (raw bytes) with a device id and byte size, then
//! names the region in inputs and outputs. The handle is opened once, at registration, through
//! the CUDA runtime that libtorch's CUDA brought into the process; an input's bytes are copied
//! to host memory when the request is decoded, and an output's bytes are copied into the region
//! when the response is made (a copy each way: the engine's tensors live in host memory).
//! Without CUDA (no `libtorch_cuda.so`, or no GPU) registering is refused with the reason.

use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use tritium_actors::{Error, Result};
use tritium_ffi::cuda::IpcMemory;

use super::table::Table;

/// A registered CUDA region.
pub struct CudaRegion {
    pub name: String,
    pub device_id: u64,
    pub byte_size: u64,
    memory: IpcMemory,
}

/// What the status endpoints report of a CUDA region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CudaRegionStatus {
    pub name: String,
    pub device_id: u64,
    pub byte_size: u64,
}

/// The registered CUDA regions, by name.
#[derive(Default)]
pub struct CudaRegistry {
    regions: Table<CudaRegion>,
}

/// The process's CUDA registry, shared by every frontend.
pub fn cuda() -> &'static CudaRegistry {
    static REGISTRY: OnceLock<CudaRegistry> = OnceLock::new();
    REGISTRY.get_or_init(CudaRegistry::default)
}

impl CudaRegion {
    pub(super) fn check_range(&self, offset: u64, byte_size: u64) -> Result<(usize, usize)> {
        super::check_range(&self.name, self.byte_size, offset, byte_size)
    }

    fn failed(&self, e: tritium_ffi::cuda::CudaError) -> Error {
        Error::internal(format!("CUDA shared memory region '{}': {e}", self.name))
    }

    pub(super) fn read(&self, offset: u64, byte_size: u64) -> Result<Bytes> {
        let (start, len) = self.check_range(offset, byte_size)?;
        let mut data = vec![0u8; len];
        self.memory.read(start, &mut data).map_err(|e| self.failed(e))?;
        Ok(Bytes::from(data))
    }

    pub(super) fn write(&self, offset: u64, byte_size: u64, data: &[u8], output: &str) -> Result<()> {
        let (start, room) = self.check_range(offset, byte_size)?;
        if data.len() > room {
            return Err(super::too_small(output, room, data.len()));
        }
        self.memory.write(start, data).map_err(|e| self.failed(e))
    }

    fn status(&self) -> CudaRegionStatus {
        CudaRegionStatus { name: self.name.clone(), device_id: self.device_id, byte_size: self.byte_size }
    }
}

impl CudaRegistry {
    /// Opens the client's IPC handle `raw_handle` for `byte_size` bytes on GPU `device_id`.
    pub fn register(&self, name: &str, raw_handle: &[u8], device_id: u64, byte_size: u64) -> Result<()> {
        if self.get(name).is_some() || super::system().contains(name) {
            return Err(super::already_registered(name));
        }
        let runtime = tritium_ffi::cuda::runtime()
            .map_err(|e| Error::unsupported(format!("CUDA shared memory is not available: {e}")))?;
        if byte_size == 0 {
            return Err(Error::invalid(format!("failed to register CUDA shared memory region '{name}': invalid args")));
        }
        let memory = runtime
            .open_ipc(raw_handle, device_id as usize, byte_size as usize)
            .map_err(|e| Error::invalid(format!("failed to register CUDA shared memory region '{name}': {e}")))?;
        self.regions.insert(name, CudaRegion { name: name.into(), device_id, byte_size, memory })
    }

    /// Unregisters one region, or every region when `name` is empty; an unknown name is not an
    /// error. The handle closes when the last request using the region is done.
    pub fn unregister(&self, name: &str) {
        self.regions.remove(name);
    }

    /// The status of one region, or of every region when `name` is empty.
    pub fn status(&self, name: &str) -> Result<Vec<CudaRegionStatus>> {
        self.regions.status(name, "cuda", CudaRegion::status)
    }

    pub(super) fn get(&self, name: &str) -> Option<Arc<CudaRegion>> {
        self.regions.get(name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_cuda_registering_says_why_and_status_is_empty() {
        let e = cuda().register("r", &[0u8; 64], 0, 16).unwrap_err();
        assert_eq!(e.kind, tritium_actors::ErrorKind::Unsupported, "{e}");
        assert!(e.message.starts_with("CUDA shared memory is not available: "), "{e}");
        assert!(cuda().status("").unwrap().is_empty());
        let e = cuda().status("r").unwrap_err();
        assert_eq!(e.message, "Unable to find cuda shared memory region: 'r'");
        cuda().unregister("r");
        cuda().unregister("");
    }
}
