// Probing for a GPU, registering the backend, and the backend's stream, cuBLAS handle and copies.
#include "cuda/cuda_backend.h"

#include <atomic>

#include "cuda/check.h"
#include "cuda/cuda_backend_impl.h"

namespace qkv::cuda {

namespace {

struct Probe {
  bool ok = false;
  std::string status;
};

// Asks the runtime for a device without ever throwing: on a machine without a driver the runtime
// reports cudaErrorInsufficientDriver (or cudaErrorNoDevice), and the binary must still run.
Probe probe_device() {
  int count = 0;
  cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess) {
    cudaGetLastError();  // clear it, so later runtime calls do not report it again
    if (err == cudaErrorNoDevice) return {false, "unavailable: no CUDA device found"};
    if (err == cudaErrorInsufficientDriver)
      return {false, "unavailable: no NVIDIA driver (or one too old for this CUDA runtime)"};
    return {false, std::string("unavailable: ") + cudaGetErrorString(err)};
  }
  if (count == 0) return {false, "unavailable: no CUDA device found"};
  cudaDeviceProp prop{};
  err = cudaGetDeviceProperties(&prop, 0);
  if (err != cudaSuccess) {
    cudaGetLastError();
    return {false, std::string("unavailable: ") + cudaGetErrorString(err)};
  }
  const size_t gib = (prop.totalGlobalMem + (size_t(1) << 29)) >> 30;  // rounded
  return {true, std::string(prop.name) + ", " + std::to_string(gib) + " GiB, compute capability " +
                    std::to_string(prop.major) + "." + std::to_string(prop.minor)};
}

Probe& probe() {
  static Probe result = probe_device();
  return result;
}

std::atomic<bool> tf32_allowed{false};
CudaBackend* registered = nullptr;

}  // namespace

bool init() {
  static const bool ok = [] {
    if (!probe().ok) return false;
    try {
      // Never destroyed: tensors held in static objects may be freed after main returns.
      registered = new CudaBackend(0);
    } catch (const Error& e) {  // a device that is listed but unusable (busy, exclusive mode)
      probe() = {false, std::string("unavailable: ") + e.what()};
      return false;
    }
    register_backend(DeviceKind::cuda, registered);
    return true;
  }();
  return ok;
}

bool available() { return probe().ok; }
std::string status() { return probe().status; }

void set_allow_tf32(bool allow) { tf32_allowed = allow; }
bool allow_tf32() { return tf32_allowed; }

void synchronize() {
  if (init()) cuda_backend().synchronize();
}

CudaBackend& cuda_backend() {
  QKV_CHECK(init(), "cuda", "the CUDA backend is not available: ", status());
  return *registered;
}

namespace {
// cudaMalloc/cudaFree behind the caching allocator (blocks of at least 512 bytes; cudaMalloc aligns
// to 256 anyway).
CachingAllocator::RawMemory device_memory() {
  return {[](size_t bytes) -> void* {
            void* ptr = nullptr;
            if (cudaMalloc(&ptr, bytes) == cudaSuccess) return ptr;
            cudaGetLastError();  // clear the error so later calls do not report it
            return nullptr;
          },
          // at process exit the driver may already be shutting down: a failed free is harmless
          [](void* ptr) { cudaFree(ptr); }};
}
}  // namespace

CudaBackend::CudaBackend(int device_index)
    : device_index_(device_index), allocator_("cuda", 512, device_memory()) {
  QKV_CUDA_CHECK(cudaSetDevice(device_index));
  QKV_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

cublasHandle_t CudaBackend::cublas() {
  std::call_once(cublas_once_, [this] {
    QKV_CUBLAS_CHECK(cublasCreate(&cublas_));
    QKV_CUBLAS_CHECK(cublasSetStream(cublas_, stream_));
  });
  return cublas_;
}

void CudaBackend::synchronize() { QKV_CUDA_CHECK(cudaStreamSynchronize(stream_)); }

// Both directions wait for the stream: the host buffer may be pageable and short-lived, and the
// caller reads (or frees) it as soon as we return.
void CudaBackend::copy_to_host(const void* src, void* dst, size_t bytes) {
  if (bytes == 0) return;
  QKV_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream_));
  QKV_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

void CudaBackend::copy_from_host(const void* src, void* dst, size_t bytes) {
  if (bytes == 0) return;
  QKV_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, stream_));
  QKV_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace qkv::cuda
