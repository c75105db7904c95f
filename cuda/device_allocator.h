// A caching allocator for device memory: freed blocks go to size-bucketed free lists.
//
// Why: cudaMalloc and cudaFree are slow (cudaFree synchronizes the whole device), and a training
// step frees and re-allocates the same activation sizes every iteration. Keeping the blocks makes
// the steady state allocation-free.
//
// Reusing a block at once is safe because the backend runs all its work on one stream: a kernel
// that still reads a freed block was queued before any kernel that writes its new owner.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "engine/backend.h"

namespace qkv::cuda {

class DeviceAllocator {
 public:
  ~DeviceAllocator();
  void* allocate(size_t bytes);
  void deallocate(void* ptr, size_t bytes);
  MemoryStats stats() const;
  void reset_peak();
  void release_cached();  // cudaFree every cached block

  // Requests are rounded up to a bucket: powers of two (at least 512 bytes) below 1 MiB,
  // multiples of 2 MiB above, so a few sizes serve a whole training run.
  static size_t bucket_size(size_t bytes);

 private:
  void release_cached_locked();

  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // bucket size -> free blocks
  MemoryStats stats_;
};

}  // namespace qkv::cuda
