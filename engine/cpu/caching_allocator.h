// A caching host allocator: freed blocks go to size-bucketed free lists and are handed out again.
//
// Why: on the virtual machines qkv runs on, a page fault costs microseconds, and glibc returns
// large buffers to the OS on free, so a training step that frees and re-allocates its activations
// faults on every page, every step. Keeping the blocks (and asking for transparent huge pages on
// large ones) makes the steady state fault-free.
#pragma once

#include <cstddef>
#include <map>
#include <mutex>
#include <vector>

#include "engine/backend.h"

namespace qkv::cpu {

class CachingAllocator {
 public:
  ~CachingAllocator();
  void* allocate(size_t bytes);
  void deallocate(void* ptr, size_t bytes);
  MemoryStats stats() const;
  void reset_peak();
  void release_cached();  // returns every cached block to the OS

  // Requests are rounded up to a bucket: powers of two below 1 MiB, multiples of 2 MiB above.
  static size_t bucket_size(size_t bytes);

 private:
  mutable std::mutex mutex_;
  std::map<size_t, std::vector<void*>> free_;  // bucket size -> free blocks
  MemoryStats stats_;
};

}  // namespace qkv::cpu
