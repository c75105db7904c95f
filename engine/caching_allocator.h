// A caching allocator: freed blocks go to size-bucketed free lists and are handed out again.
//
// Every backend uses one, over its own raw allocator (aligned host memory on the CPU, cudaMalloc
// on CUDA). Why it matters:
// - CPU: on the virtual machines qkv runs on a page fault costs microseconds, and glibc returns
//   large buffers to the OS on free, so a training step that frees and re-allocates its
//   activations would fault on every page, every step.
// - CUDA: cudaMalloc/cudaFree are slow (cudaFree synchronizes the device).
// A training step asks for the same sizes every iteration, so after the first step every request
// is a cache hit. Requests are rounded up to a bucket - powers of two (from `min_block`) below
// 1 MiB, multiples of 2 MiB above - so a few sizes serve a whole run.
#pragma once

#include <cstddef>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "engine/backend.h"

namespace qkv {

class CachingAllocator {
 public:
  struct RawMemory {
    std::function<void*(size_t)> allocate;  // returns nullptr when out of memory
    std::function<void(void*)> free;
  };

  CachingAllocator(std::string device_name, size_t min_block, RawMemory raw);
  ~CachingAllocator();

  void* allocate(size_t bytes);  // throws qkv::Error naming the device when out of memory
  void deallocate(void* ptr, size_t bytes);
  MemoryStats stats() const;
  void reset_peak();
  void release_cached();  // hands every cached block back to the raw allocator

  size_t bucket_size(size_t bytes) const;

 private:
  void release_cached_locked();

  const std::string device_name_;
  const size_t min_block_;
  const RawMemory raw_;
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // bucket size -> free blocks
  MemoryStats stats_;
};

}  // namespace qkv
