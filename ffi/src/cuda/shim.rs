//! The C ABI of `cuda/shim.cpp` and safe handles over it: a stream from libtorch's pool, a
//! CUDA graph, and a pair of timing events. The shim's functions are looked up once, when
//! [`super::enable`] loads it, and live as long as the process.

use std::ffi::{c_char, c_int, c_void, CStr};

use super::CudaError;

type Status = c_int;
type ErrBuf = *mut c_char;

/// The shim's functions, resolved once by name.
pub(super) struct Api {
    device_count: unsafe extern "C" fn(ErrBuf, usize, *mut c_int) -> Status,
    stream_new: unsafe extern "C" fn(c_int, *mut *mut c_void, ErrBuf, usize) -> Status,
    stream_make_current: unsafe extern "C" fn(*mut c_void, ErrBuf, usize) -> Status,
    stream_synchronize: unsafe extern "C" fn(*mut c_void, ErrBuf, usize) -> Status,
    stream_free: unsafe extern "C" fn(*mut c_void),
    graph_new: unsafe extern "C" fn(*mut *mut c_void, ErrBuf, usize) -> Status,
    graph_capture_begin: unsafe extern "C" fn(*mut c_void, ErrBuf, usize) -> Status,
    graph_capture_end: unsafe extern "C" fn(*mut c_void, ErrBuf, usize) -> Status,
    graph_replay: unsafe extern "C" fn(*mut c_void, ErrBuf, usize) -> Status,
    graph_free: unsafe extern "C" fn(*mut c_void),
    timer_new: unsafe extern "C" fn(*mut *mut c_void, ErrBuf, usize) -> Status,
    timer_record: unsafe extern "C" fn(*mut c_void, c_int, *mut c_void, ErrBuf, usize) -> Status,
    timer_elapsed_ms: unsafe extern "C" fn(*mut c_void, *mut f32, ErrBuf, usize) -> Status,
    timer_free: unsafe extern "C" fn(*mut c_void),
    ipc_open: unsafe extern "C" fn(*const c_void, c_int, *mut *mut c_void, ErrBuf, usize) -> Status,
    ipc_close: unsafe extern "C" fn(*mut c_void, ErrBuf, usize) -> Status,
    ipc_handle_size: unsafe extern "C" fn() -> c_int,
    copy: unsafe extern "C" fn(*mut c_void, *const c_void, usize, c_int, c_int, ErrBuf, usize) -> Status,
}

impl Api {
    /// Resolves every function of the shim in `library`.
    pub(super) fn resolve(library: &libloading::Library) -> Result<Api, CudaError> {
        macro_rules! symbol {
            ($name:literal) => {{
                // SAFETY: the symbol is one of shim.cpp's `extern "C"` functions, and the field it is
                // stored in declares that function's exact signature.
                let f = unsafe { library.get(concat!($name, "\0").as_bytes()) }
                    .map_err(|e| CudaError(format!("the CUDA shim lacks {}: {e}", $name)))?;
                *f
            }};
        }
        Ok(Api {
            device_count: symbol!("tritium_cuda_device_count"),
            stream_new: symbol!("tritium_stream_new"),
            stream_make_current: symbol!("tritium_stream_make_current"),
            stream_synchronize: symbol!("tritium_stream_synchronize"),
            stream_free: symbol!("tritium_stream_free"),
            graph_new: symbol!("tritium_graph_new"),
            graph_capture_begin: symbol!("tritium_graph_capture_begin"),
            graph_capture_end: symbol!("tritium_graph_capture_end"),
            graph_replay: symbol!("tritium_graph_replay"),
            graph_free: symbol!("tritium_graph_free"),
            timer_new: symbol!("tritium_timer_new"),
            timer_record: symbol!("tritium_timer_record"),
            timer_elapsed_ms: symbol!("tritium_timer_elapsed_ms"),
            timer_free: symbol!("tritium_timer_free"),
            ipc_open: symbol!("tritium_ipc_open"),
            ipc_close: symbol!("tritium_ipc_close"),
            ipc_handle_size: symbol!("tritium_ipc_handle_size"),
            copy: symbol!("tritium_copy"),
        })
    }

    pub(super) fn device_count(&self) -> Result<usize, CudaError> {
        let mut count: c_int = 0;
        // SAFETY: `count` outlives the call; the shim writes an int there or a message in the buffer.
        call(|err, len| unsafe { (self.device_count)(err, len, &mut count) }, "counting CUDA devices")?;
        Ok(count.max(0) as usize)
    }
}

/// Runs one shim call with a message buffer; a non-zero status becomes an error with the
/// shim's message (a C++ exception's `what()` or the CUDA runtime's error string).
fn call(f: impl FnOnce(ErrBuf, usize) -> Status, doing: &str) -> Result<(), CudaError> {
    let mut buffer = [0 as c_char; 512];
    if f(buffer.as_mut_ptr(), buffer.len()) == 0 {
        return Ok(());
    }
    // SAFETY: the shim writes a NUL-terminated message (snprintf) into the zeroed buffer, whose
    // last byte it never overwrites, so the buffer always holds a C string.
    let message = unsafe { CStr::from_ptr(buffer.as_ptr()) }.to_string_lossy().into_owned();
    Err(CudaError(format!("{doing}: {message}")))
}

/// A CUDA stream from libtorch's pool on one device. [`Stream::make_current`] makes it the
/// stream that libtorch (and so every tch call) uses on the calling thread.
pub struct Stream {
    api: &'static Api,
    raw: *mut c_void,
    device: usize,
}

// SAFETY: the handle points to a heap `c10::cuda::CUDAStream`, a plain value (device and
// stream id) that libtorch lets any thread use; the shim never mutates it.
unsafe impl Send for Stream {}

impl Stream {
    pub(super) fn new(api: &'static Api, device: usize) -> Result<Stream, CudaError> {
        let mut raw = std::ptr::null_mut();
        let doing = format!("taking a stream from libtorch's pool on GPU {device}");
        // SAFETY: `raw` outlives the call; on success the shim stores a new stream there.
        call(|err, len| unsafe { (api.stream_new)(device as c_int, &mut raw, err, len) }, &doing)?;
        Ok(Stream { api, raw, device })
    }

    pub fn device(&self) -> usize {
        self.device
    }

    /// Makes this the current stream of libtorch on the calling thread.
    pub fn make_current(&self) -> Result<(), CudaError> {
        // SAFETY: `self.raw` is a live stream owned by `self`.
        call(|err, len| unsafe { (self.api.stream_make_current)(self.raw, err, len) }, "making a stream current")
    }

    /// Waits until everything queued on the stream is done.
    pub fn synchronize(&self) -> Result<(), CudaError> {
        // SAFETY: `self.raw` is a live stream owned by `self`.
        call(|err, len| unsafe { (self.api.stream_synchronize)(self.raw, err, len) }, "synchronizing a stream")
    }
}

impl Drop for Stream {
    fn drop(&mut self) {
        // SAFETY: `self.raw` came from `stream_new` and is freed exactly once, here.
        unsafe { (self.api.stream_free)(self.raw) }
    }
}

/// A captured CUDA graph (`at::cuda::CUDAGraph`): the kernels one call of a model launched on
/// the current stream, replayed on that stream with the same memory.
pub struct Graph {
    api: &'static Api,
    raw: *mut c_void,
}

// SAFETY: the handle points to a heap `at::cuda::CUDAGraph` that only its owner uses, one
// thread at a time (`&mut`-free methods are only ever called by the owning instance thread).
unsafe impl Send for Graph {}

impl Graph {
    /// Captures what `body` launches on the calling thread's current stream (which must be a
    /// pool stream, not the default one). Capture ends even when `body` fails.
    pub(super) fn capture<T, E: std::fmt::Display>(
        api: &'static Api,
        body: impl FnOnce() -> Result<T, E>,
    ) -> Result<(Graph, T), CudaError> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` outlives the call; on success the shim stores a new graph there.
        call(|err, len| unsafe { (api.graph_new)(&mut raw, err, len) }, "creating a CUDA graph")?;
        let graph = Graph { api, raw };
        // SAFETY: `graph.raw` is the live graph just created.
        call(|err, len| unsafe { (api.graph_capture_begin)(graph.raw, err, len) }, "beginning a graph capture")?;
        let result = body();
        // SAFETY: as above; ends the capture begun on this thread.
        let ended = call(|err, len| unsafe { (api.graph_capture_end)(graph.raw, err, len) }, "ending a graph capture");
        let value = result.map_err(|e| CudaError(format!("running the model under graph capture: {e}")))?;
        ended?;
        Ok((graph, value))
    }

    /// Launches the captured kernels again on the calling thread's current stream.
    pub fn replay(&self) -> Result<(), CudaError> {
        // SAFETY: `self.raw` is a live, captured graph owned by `self`.
        call(|err, len| unsafe { (self.api.graph_replay)(self.raw, err, len) }, "replaying a CUDA graph")
    }
}

impl Drop for Graph {
    fn drop(&mut self) {
        // SAFETY: `self.raw` came from `graph_new` and is freed exactly once, here.
        unsafe { (self.api.graph_free)(self.raw) }
    }
}

/// Two CUDA events that time work on a stream: how long the GPU was busy with it.
pub struct Timer {
    api: &'static Api,
    raw: *mut c_void,
}

// SAFETY: the handle points to two CUDA events, which the CUDA runtime lets any thread use.
unsafe impl Send for Timer {}

impl Timer {
    pub(super) fn new(api: &'static Api) -> Result<Timer, CudaError> {
        let mut raw = std::ptr::null_mut();
        // SAFETY: `raw` outlives the call; on success the shim stores two new events there.
        call(|err, len| unsafe { (api.timer_new)(&mut raw, err, len) }, "creating CUDA events")?;
        Ok(Timer { api, raw })
    }

    /// Records the start (`stop` false) or the end of the timed work on `stream`.
    pub fn record(&self, stream: &Stream, stop: bool) -> Result<(), CudaError> {
        // SAFETY: both handles are live and owned by their Rust values.
        call(
            |err, len| unsafe { (self.api.timer_record)(self.raw, c_int::from(stop), stream.raw, err, len) },
            "recording a CUDA event",
        )
    }

    /// The GPU time between the two records, waiting for the second one.
    pub fn elapsed(&self) -> Result<std::time::Duration, CudaError> {
        let mut ms = 0f32;
        // SAFETY: `ms` outlives the call; the handle is live.
        call(|err, len| unsafe { (self.api.timer_elapsed_ms)(self.raw, &mut ms, err, len) }, "timing CUDA events")?;
        Ok(std::time::Duration::from_secs_f64(f64::from(ms.max(0.0)) / 1e3))
    }
}

impl Drop for Timer {
    fn drop(&mut self) {
        // SAFETY: `self.raw` came from `timer_new` and is freed exactly once, here.
        unsafe { (self.api.timer_free)(self.raw) }
    }
}

/// A client's GPU allocation opened from its `cudaIpcMemHandle_t` (Triton's CUDA shared memory):
/// `byte_size` bytes on `device`, read and written with synchronous copies.
pub struct IpcMemory {
    api: &'static Api,
    ptr: *mut c_void,
    device: usize,
    byte_size: usize,
}

// SAFETY: the pointer is a device address, never dereferenced on the host; the CUDA runtime's
// copies and close may be called from any thread, and every copy is bounds-checked below.
unsafe impl Send for IpcMemory {}
// SAFETY: as above; shared use only issues copies, which the CUDA runtime serializes as needed.
unsafe impl Sync for IpcMemory {}

impl IpcMemory {
    pub(super) fn open(api: &'static Api, handle: &[u8], device: usize, byte_size: usize) -> Result<Self, CudaError> {
        // SAFETY: a plain function returning sizeof(cudaIpcMemHandle_t).
        let want = unsafe { (api.ipc_handle_size)() } as usize;
        if handle.len() != want {
            return Err(CudaError(format!("a CUDA IPC handle has {want} bytes, this one has {}", handle.len())));
        }
        let mut ptr = std::ptr::null_mut();
        // SAFETY: `handle` holds exactly sizeof(cudaIpcMemHandle_t) bytes, which the shim copies;
        // `ptr` outlives the call.
        call(
            |err, len| unsafe { (api.ipc_open)(handle.as_ptr().cast(), device as c_int, &mut ptr, err, len) },
            "opening the CUDA IPC handle",
        )?;
        Ok(IpcMemory { api, ptr, device, byte_size })
    }

    fn check(&self, offset: usize, len: usize) -> Result<(), CudaError> {
        match offset.checked_add(len) {
            Some(end) if end <= self.byte_size => Ok(()),
            _ => Err(CudaError(format!(
                "{len} bytes at offset {offset} do not fit in the {} bytes registered",
                self.byte_size
            ))),
        }
    }

    /// Copies `out.len()` bytes from `offset` of the device memory.
    pub fn read(&self, offset: usize, out: &mut [u8]) -> Result<(), CudaError> {
        self.check(offset, out.len())?;
        // SAFETY: `[offset, offset + out.len())` lies inside the opened allocation (checked above)
        // and `out` is a host buffer of exactly that length.
        let src = unsafe { self.ptr.cast::<u8>().add(offset) };
        call(
            |err, len| unsafe {
                (self.api.copy)(out.as_mut_ptr().cast(), src.cast(), out.len(), 0, self.device as c_int, err, len)
            },
            "copying from CUDA shared memory",
        )
    }

    /// Copies `data` to `offset` of the device memory.
    pub fn write(&self, offset: usize, data: &[u8]) -> Result<(), CudaError> {
        self.check(offset, data.len())?;
        // SAFETY: as in `read`, with `data` the host source.
        let dst = unsafe { self.ptr.cast::<u8>().add(offset) };
        call(
            |err, len| unsafe {
                (self.api.copy)(dst.cast(), data.as_ptr().cast(), data.len(), 1, self.device as c_int, err, len)
            },
            "copying to CUDA shared memory",
        )
    }
}

impl Drop for IpcMemory {
    fn drop(&mut self) {
        // SAFETY: `self.ptr` came from cudaIpcOpenMemHandle and is closed exactly once, here.
        let _ = call(|err, len| unsafe { (self.api.ipc_close)(self.ptr, err, len) }, "closing a CUDA IPC handle");
    }
}
