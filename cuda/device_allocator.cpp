#include "cuda/device_allocator.h"

#include "cuda/check.h"

namespace qkv::cuda {

namespace {
constexpr size_t kMinBlock = 512;  // cudaMalloc aligns to 256 anyway
constexpr size_t kLargeStep = size_t(2) << 20;
}  // namespace

size_t DeviceAllocator::bucket_size(size_t bytes) {
  if (bytes >= (size_t(1) << 20)) return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
  size_t b = kMinBlock;
  while (b < bytes) b <<= 1;
  return b;
}

void* DeviceAllocator::allocate(size_t bytes) {
  const size_t size = bucket_size(bytes);
  std::lock_guard lock(mutex_);
  ++stats_.allocations;
  void* ptr = nullptr;
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.bytes_cached -= size;
    ++stats_.cache_hits;
  } else if (cudaMalloc(&ptr, size) != cudaSuccess) {
    // Out of memory, perhaps only because the cache holds blocks of other sizes: give them back
    // and try once more. cudaGetLastError clears the sticky-free error state of the failed call.
    cudaGetLastError();
    release_cached_locked();
    cudaError_t status = cudaMalloc(&ptr, size);
    QKV_CHECK(status == cudaSuccess, "cuda", "out of device memory allocating ", size, " bytes (",
              stats_.bytes_in_use, " bytes in use): ", cudaGetErrorString(status));
  }
  stats_.bytes_in_use += size;
  if (stats_.bytes_in_use > stats_.peak_bytes) stats_.peak_bytes = stats_.bytes_in_use;
  return ptr;
}

void DeviceAllocator::deallocate(void* ptr, size_t bytes) {
  if (!ptr) return;
  const size_t size = bucket_size(bytes);
  std::lock_guard lock(mutex_);
  stats_.bytes_in_use -= size;
  stats_.bytes_cached += size;
  free_[size].push_back(ptr);
}

MemoryStats DeviceAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void DeviceAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_bytes = stats_.bytes_in_use;
}

void DeviceAllocator::release_cached() {
  std::lock_guard lock(mutex_);
  release_cached_locked();
}

void DeviceAllocator::release_cached_locked() {
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) QKV_CUDA_CHECK(cudaFree(p));
  free_.clear();
  stats_.bytes_cached = 0;
}

DeviceAllocator::~DeviceAllocator() {
  // At process exit the driver may already be shutting down; errors here are not worth a throw.
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) cudaFree(p);
}

}  // namespace qkv::cuda
