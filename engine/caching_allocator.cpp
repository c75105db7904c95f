#include "engine/caching_allocator.h"

#include "engine/error.h"

#if defined(__SANITIZE_ADDRESS__)
#define QKV_ALLOCATOR_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define QKV_ALLOCATOR_ASAN 1
#endif
#endif
#ifdef QKV_ALLOCATOR_ASAN
#include <sanitizer/asan_interface.h>
#endif

namespace qkv {

namespace {
constexpr size_t kLargeStep = size_t(2) << 20;

// Under AddressSanitizer (make sanitize) a cached block is poisoned while it waits in a free list,
// and the bucket's slack past the bytes asked for stays poisoned while it is in use: reading past
// a tensor's end, or using a tensor's storage after it went back to the cache, is reported as it
// would be with malloc. Elsewhere these do nothing.
void mark_in_use(void* block, size_t bytes, size_t size) {
#ifdef QKV_ALLOCATOR_ASAN
  ASAN_UNPOISON_MEMORY_REGION(block, bytes);
  ASAN_POISON_MEMORY_REGION(static_cast<char*>(block) + bytes, size - bytes);
#else
  (void)block, (void)bytes, (void)size;
#endif
}
void mark_cached(void* block, size_t size) {
#ifdef QKV_ALLOCATOR_ASAN
  ASAN_POISON_MEMORY_REGION(block, size);
#else
  (void)block, (void)size;
#endif
}
void mark_released(void* block, size_t size) {
#ifdef QKV_ALLOCATOR_ASAN
  ASAN_UNPOISON_MEMORY_REGION(block, size);
#else
  (void)block, (void)size;
#endif
}
}  // namespace

CachingAllocator::CachingAllocator(std::string device_name, size_t min_block, RawMemory raw)
    : device_name_(std::move(device_name)), min_block_(min_block), raw_(std::move(raw)) {}

CachingAllocator::~CachingAllocator() { release_cached(); }

size_t CachingAllocator::bucket_size(size_t bytes) const {
  if (bytes >= (size_t(1) << 20)) return (bytes + kLargeStep - 1) / kLargeStep * kLargeStep;
  size_t b = min_block_;
  while (b < bytes) b <<= 1;
  return b;
}

void* CachingAllocator::allocate(size_t bytes) {
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
  } else if (!(ptr = raw_.allocate(size))) {
    // Out of memory, perhaps only because the cache holds blocks of other sizes: give them back
    // and try once more.
    release_cached_locked();
    ptr = raw_.allocate(size);
    QKV_CHECK(ptr != nullptr, "allocate", "out of ", device_name_, " memory allocating ", size,
              " bytes (", stats_.bytes_in_use, " bytes in use)");
  }
  stats_.bytes_in_use += size;
  if (stats_.bytes_in_use > stats_.peak_bytes) stats_.peak_bytes = stats_.bytes_in_use;
  mark_in_use(ptr, bytes, size);
  return ptr;
}

void CachingAllocator::deallocate(void* ptr, size_t bytes) {
  if (!ptr) return;
  const size_t size = bucket_size(bytes);
  std::lock_guard lock(mutex_);
  stats_.bytes_in_use -= size;
  stats_.bytes_cached += size;
  free_[size].push_back(ptr);
  mark_cached(ptr, size);
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
  release_cached_locked();
}

void CachingAllocator::release_cached_locked() {
  for (auto& [size, blocks] : free_)
    for (void* p : blocks) {
      mark_released(p, size);
      raw_.free(p);
    }
  free_.clear();
  stats_.bytes_cached = 0;
}

}  // namespace qkv
