#include "engine/cpu/caching_allocator.h"

#include <sys/mman.h>

#include <cstdlib>
#include <new>

#include "engine/error.h"

namespace qkv::cpu {

namespace {
constexpr size_t kAlignment = 64;  // a cache line, and an AVX-512 register
constexpr size_t kHugePage = size_t(2) << 20;
}  // namespace

size_t CachingAllocator::bucket_size(size_t bytes) {
  if (bytes == 0) bytes = 1;
  if (bytes >= (size_t(1) << 20)) return (bytes + kHugePage - 1) / kHugePage * kHugePage;
  size_t b = kAlignment;
  while (b < bytes) b <<= 1;
  return b;
}

void* CachingAllocator::allocate(size_t bytes) {
  size_t size = bucket_size(bytes);
  std::lock_guard lock(mutex_);
  ++stats_.allocations;
  void* ptr = nullptr;
  auto it = free_.find(size);
  if (it != free_.end() && !it->second.empty()) {
    ptr = it->second.back();
    it->second.pop_back();
    stats_.bytes_cached -= size;
    ++stats_.cache_hits;
  } else {
    size_t align = size >= kHugePage ? kHugePage : kAlignment;
    ptr = std::aligned_alloc(align, size);
    if (!ptr) {
      // Out of memory: give the cache back to the OS and try once more.
      for (auto& [s, blocks] : free_)
        for (void* p : blocks) std::free(p);
      free_.clear();
      stats_.bytes_cached = 0;
      ptr = std::aligned_alloc(align, size);
      QKV_CHECK(ptr != nullptr, "allocate", "out of host memory allocating ", size, " bytes");
    }
    if (size >= kHugePage) madvise(ptr, size, MADV_HUGEPAGE);
  }
  stats_.bytes_in_use += size;
  if (stats_.bytes_in_use > stats_.peak_bytes) stats_.peak_bytes = stats_.bytes_in_use;
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t bytes) {
  if (!ptr) return;
  size_t size = bucket_size(bytes);
  std::lock_guard lock(mutex_);
  stats_.bytes_in_use -= size;
  stats_.bytes_cached += size;
  free_[size].push_back(ptr);
}

MemoryStats CachingAllocator::stats() const {
  std::lock_guard lock(mutex_);
  return stats_;
}

void CachingAllocator::reset_peak() {
  std::lock_guard lock(mutex_);
  stats_.peak_bytes = stats_.bytes_in_use;
}

void CachingAllocator::release_cached() {
  std::lock_guard lock(mutex_);
  for (auto& [s, blocks] : free_)
    for (void* p : blocks) std::free(p);
  free_.clear();
  stats_.bytes_cached = 0;
}

CachingAllocator::~CachingAllocator() { release_cached(); }

}  // namespace qkv::cpu
