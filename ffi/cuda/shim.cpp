// Tritium's CUDA shim: the few libtorch CUDA functions that the `tch` crate does not expose
// (a stream from libtorch's pool made current on a thread, CUDA graph capture and replay, and
// event timing on a stream), behind a C ABI that ffi/src/cuda/shim.rs declares.
//
// Built as a shared library against libtorch's headers and the CUDA runtime headers, with
// libtorch_cuda's and the CUDA runtime's symbols left undefined: it is loaded only after the
// server has loaded `libtorch_cuda.so` with RTLD_GLOBAL, which resolves them. Every function
// catches C++ exceptions and turns them into a return code plus a message in `err`.
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <exception>

namespace {

void set_error(char* err, size_t len, const char* what) {
  if (err != nullptr && len > 0) {
    std::snprintf(err, len, "%s", what);
  }
}

template <typename F>
int guarded(char* err, size_t len, F&& body) {
  try {
    body();
    return 0;
  } catch (const std::exception& e) {
    set_error(err, len, e.what());
  } catch (...) {
    set_error(err, len, "unknown C++ exception");
  }
  return 1;
}

int cuda_status(cudaError_t status, char* err, size_t len) {
  if (status == cudaSuccess) {
    return 0;
  }
  set_error(err, len, cudaGetErrorString(status));
  return 1;
}

struct Timer {
  cudaEvent_t start = nullptr;
  cudaEvent_t stop = nullptr;
};

}  // namespace

extern "C" {

int tritium_cuda_device_count(char* err, size_t len, int* count) {
  return guarded(err, len, [&] { *count = static_cast<int>(c10::cuda::device_count()); });
}

int tritium_stream_new(int device, void** out, char* err, size_t len) {
  return guarded(err, len, [&] {
    auto stream = c10::cuda::getStreamFromPool(false, static_cast<c10::DeviceIndex>(device));
    *out = new c10::cuda::CUDAStream(stream);
  });
}

int tritium_stream_make_current(void* stream, char* err, size_t len) {
  return guarded(err, len, [&] { c10::cuda::setCurrentCUDAStream(*static_cast<c10::cuda::CUDAStream*>(stream)); });
}

int tritium_stream_synchronize(void* stream, char* err, size_t len) {
  return guarded(err, len, [&] { static_cast<c10::cuda::CUDAStream*>(stream)->synchronize(); });
}

void tritium_stream_free(void* stream) { delete static_cast<c10::cuda::CUDAStream*>(stream); }

int tritium_graph_new(void** out, char* err, size_t len) {
  return guarded(err, len, [&] { *out = new at::cuda::CUDAGraph(); });
}

// Captures on the thread's current stream (which must not be the default stream). Thread-local
// capture mode: other instances' threads may keep using CUDA while this one captures.
int tritium_graph_capture_begin(void* graph, char* err, size_t len) {
  return guarded(err, len, [&] {
    static_cast<at::cuda::CUDAGraph*>(graph)->capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
  });
}

int tritium_graph_capture_end(void* graph, char* err, size_t len) {
  return guarded(err, len, [&] { static_cast<at::cuda::CUDAGraph*>(graph)->capture_end(); });
}

int tritium_graph_replay(void* graph, char* err, size_t len) {
  return guarded(err, len, [&] { static_cast<at::cuda::CUDAGraph*>(graph)->replay(); });
}

void tritium_graph_free(void* graph) {
  try {
    delete static_cast<at::cuda::CUDAGraph*>(graph);
  } catch (...) {
  }
}

int tritium_timer_new(void** out, char* err, size_t len) {
  auto* timer = new Timer();
  if (cuda_status(cudaEventCreate(&timer->start), err, len) != 0 ||
      cuda_status(cudaEventCreate(&timer->stop), err, len) != 0) {
    if (timer->start != nullptr) cudaEventDestroy(timer->start);
    delete timer;
    return 1;
  }
  *out = timer;
  return 0;
}

int tritium_timer_record(void* timer, int stop, void* stream, char* err, size_t len) {
  auto* t = static_cast<Timer*>(timer);
  auto raw = static_cast<c10::cuda::CUDAStream*>(stream)->stream();
  return cuda_status(cudaEventRecord(stop ? t->stop : t->start, raw), err, len);
}

// Milliseconds between the two recorded events; waits for the second one.
int tritium_timer_elapsed_ms(void* timer, float* ms, char* err, size_t len) {
  auto* t = static_cast<Timer*>(timer);
  if (cuda_status(cudaEventSynchronize(t->stop), err, len) != 0) return 1;
  return cuda_status(cudaEventElapsedTime(ms, t->start, t->stop), err, len);
}

void tritium_timer_free(void* timer) {
  auto* t = static_cast<Timer*>(timer);
  cudaEventDestroy(t->start);
  cudaEventDestroy(t->stop);
  delete t;
}

// CUDA shared memory (Triton's cudasharedmemory extension): a client's `cudaIpcMemHandle_t`
// opened on `device`, and synchronous copies between it and host memory.
int tritium_ipc_open(const void* handle, int device, void** out, char* err, size_t len) {
  if (cuda_status(cudaSetDevice(device), err, len) != 0) return 1;
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle, sizeof(h));
  return cuda_status(cudaIpcOpenMemHandle(out, h, cudaIpcMemLazyEnablePeerAccess), err, len);
}

int tritium_ipc_close(void* ptr, char* err, size_t len) {
  return cuda_status(cudaIpcCloseMemHandle(ptr), err, len);
}

int tritium_ipc_handle_size() { return static_cast<int>(sizeof(cudaIpcMemHandle_t)); }

int tritium_copy(void* dst, const void* src, size_t bytes, int to_device, int device, char* err, size_t len) {
  if (cuda_status(cudaSetDevice(device), err, len) != 0) return 1;
  return cuda_status(cudaMemcpy(dst, src, bytes, to_device ? cudaMemcpyHostToDevice : cudaMemcpyDeviceToHost), err,
                     len);
}

}  // extern "C"
