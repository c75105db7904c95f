// The CUDA runtime on host memory, for the CPU emulator: one device, "device" memory from the
// heap, streams that are names only (kernels run at launch). Pointer misuse a GPU would reject is
// rejected here too: copying from or to "device" memory that is not a live cudaMalloc block, or
// freeing such a pointer. A call that fails returns its error; a launch that fails is reported by
// the next cudaGetLastError or synchronizing call. Either way cudaGetErrorString says why.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstring>
#include <map>
#include <mutex>
#include <new>
#include <string>

#include "tests/cuda_emulator/internal.h"

namespace qkv::cuda_emulator {
namespace {

constexpr size_t kDeviceMemory = size_t(16) << 30;  // what the emulated device reports
constexpr size_t kMaxSharedBytes = 227 * 1024;
constexpr std::align_val_t kAllocationAlignment{256};  // as cudaMalloc

struct Runtime {
  std::mutex mutex;
  std::map<const unsigned char*, size_t> blocks;  // live cudaMalloc blocks: start -> bytes
  size_t bytes_in_use = 0;
  cudaError_t pending = cudaSuccess;
  std::string detail;
  std::string message;  // cudaGetErrorString's answer, kept alive
};

Runtime& runtime() {
  static Runtime* r = new Runtime;  // never destroyed: frees may come after main returns
  return *r;
}

// Whether [p, p + bytes) lies inside one live device block.
bool is_device_range(Runtime& r, const void* p, size_t bytes) {
  const auto* q = static_cast<const unsigned char*>(p);
  auto it = r.blocks.upper_bound(q);
  if (it == r.blocks.begin()) return false;
  --it;
  return q >= it->first && q + bytes <= it->first + it->second;
}

cudaError_t fail_now(cudaError_t error, const std::string& detail) {
  set_pending_error(error, detail);
  return error;
}

cudaError_t take_pending() {
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  const cudaError_t e = r.pending;
  r.pending = cudaSuccess;
  return e;
}

}  // namespace

void set_pending_error(cudaError_t error, std::string detail) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  if (r.pending != cudaSuccess) return;  // the first error is the one reported
  r.pending = error;
  r.detail = std::move(detail);
}

}  // namespace qkv::cuda_emulator

using namespace qkv::cuda_emulator;

cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (device != 0) return cudaErrorInvalidDevice;
  *prop = cudaDeviceProp{};
  std::snprintf(prop->name, sizeof prop->name, "qkv CPU emulator of a CUDA device");
  prop->totalGlobalMem = kDeviceMemory;
  prop->sharedMemPerBlock = 48 * 1024;
  prop->sharedMemPerBlockOptin = kMaxSharedBytes;
  prop->maxThreadsPerBlock = 1024;
  prop->multiProcessorCount = 1;
  prop->major = 9;
  prop->minor = 0;
  return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  *ptr = nullptr;
  if (bytes == 0) return cudaSuccess;
  if (r.bytes_in_use + bytes > kDeviceMemory) return cudaErrorMemoryAllocation;
  auto* p = static_cast<unsigned char*>(::operator new(bytes, kAllocationAlignment, std::nothrow));
  if (!p) return cudaErrorMemoryAllocation;
  r.blocks[p] = bytes;
  r.bytes_in_use += bytes;
  *ptr = p;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  if (!ptr) return cudaSuccess;
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  auto it = r.blocks.find(static_cast<unsigned char*>(ptr));
  if (it == r.blocks.end()) {
    r.detail = "cudaFree: not a pointer cudaMalloc returned (or freed twice)";
    return cudaErrorInvalidDevicePointer;
  }
  r.bytes_in_use -= it->second;
  r.blocks.erase(it);
  ::operator delete(ptr, kAllocationAlignment);
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t) {
  if (const cudaError_t e = take_pending(); e != cudaSuccess) return e;
  if (bytes == 0) return cudaSuccess;
  {
    Runtime& r = runtime();
    std::lock_guard lock(r.mutex);
    const bool src_device = kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDeviceToDevice;
    const bool dst_device = kind == cudaMemcpyHostToDevice || kind == cudaMemcpyDeviceToDevice;
    if (kind == cudaMemcpyDefault || kind == cudaMemcpyHostToHost) {
      // no check possible or needed
    } else if (src_device && !is_device_range(r, src, bytes)) {
      r.detail = "cudaMemcpy: the source is not inside a live device allocation";
      return cudaErrorInvalidValue;
    } else if (dst_device && !is_device_range(r, dst, bytes)) {
      r.detail = "cudaMemcpy: the destination is not inside a live device allocation";
      return cudaErrorInvalidValue;
    } else if (!src_device && is_device_range(r, src, bytes)) {
      r.detail = "cudaMemcpy: the host source is device memory";
      return cudaErrorInvalidValue;
    } else if (!dst_device && is_device_range(r, dst, bytes)) {
      r.detail = "cudaMemcpy: the host destination is device memory";
      return cudaErrorInvalidValue;
    }
  }
  std::memmove(dst, src, bytes);
  return cudaSuccess;
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return cudaMemcpyAsync(dst, src, bytes, kind, nullptr);
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned) {
  static int streams = 0;  // a distinct non-null name per stream; nothing behind it
  *stream = reinterpret_cast<cudaStream_t>(static_cast<uintptr_t>(++streams));
  return cudaSuccess;
}
cudaError_t cudaStreamDestroy(cudaStream_t) { return cudaSuccess; }
cudaError_t cudaStreamSynchronize(cudaStream_t) { return take_pending(); }
cudaError_t cudaDeviceSynchronize() { return take_pending(); }

cudaError_t cudaGetLastError() { return take_pending(); }
cudaError_t cudaPeekAtLastError() {
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  return r.pending;
}

const char* cudaGetErrorName(cudaError_t error) {
  switch (error) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevicePointer:
      return "cudaErrorInvalidDevicePointer";
    case cudaErrorInsufficientDriver:
      return "cudaErrorInsufficientDriver";
    case cudaErrorNoDevice:
      return "cudaErrorNoDevice";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
  }
  return "cudaErrorUnknown";
}

// The emulator knows why a call failed: the detail follows the generic text.
const char* cudaGetErrorString(cudaError_t error) {
  Runtime& r = runtime();
  std::lock_guard lock(r.mutex);
  r.message = std::string("emulator: ") + cudaGetErrorName(error);
  if (error != cudaSuccess && !r.detail.empty()) r.message += ": " + r.detail;
  return r.message.c_str();
}

cudaError_t cudaFuncSetAttribute(const void*, cudaFuncAttribute attribute, int value) {
  if (attribute == cudaFuncAttributeMaxDynamicSharedMemorySize &&
      (value < 0 || size_t(value) > kMaxSharedBytes))
    return fail_now(cudaErrorInvalidValue, "cudaFuncSetAttribute: " + std::to_string(value) +
                                               " bytes of dynamic shared memory, at most " +
                                               std::to_string(kMaxSharedBytes));
  return cudaSuccess;
}
