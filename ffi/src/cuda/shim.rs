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
