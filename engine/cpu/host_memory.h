// Host memory behind the CPU's caching allocator (engine/caching_allocator.h): 64-byte aligned (a
// cache line, an AVX-512 register), and backed by transparent huge pages wherever a block is
// large enough to share one.
//
// Why huge pages: a training step touches a hundred megabytes of activations and gradients, each
// a tensor of a few hundred kilobytes written by one op and read by the next ones. On 4 KiB pages
// that is tens of thousands of pages, far more than the TLB holds, so the kernels' loads and
// stores keep waiting on page walks. On 2 MiB pages it is a few dozen.
// - Blocks of 2 MiB and more are aligned to 2 MiB and advised MADV_HUGEPAGE.
// - Blocks of 64 KiB up to 1 MiB (the caching allocator's buckets there are powers of two) are
//   carved from 2 MiB chunks so advised: a chunk holds blocks of one size, and goes back to the
//   system when all its blocks have come back.
// - Smaller blocks come from malloc: a tensor that small spans a few pages at most.
// The carving keeps at most one chunk's worth of unused blocks per size, on top of what the
// caching allocator itself caches.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

namespace qkv::cpu {

class HostMemory {
 public:
  static constexpr size_t kChunk = size_t(2) << 20;            // a huge page
  static constexpr size_t kSmallestCarved = size_t(64) << 10;  // blocks below come from malloc

  HostMemory() = default;
  HostMemory(const HostMemory&) = delete;
  HostMemory& operator=(const HostMemory&) = delete;
  ~HostMemory();

  void* allocate(size_t bytes);  // nullptr when out of memory
  void free(void* ptr);          // ptr from allocate (or nullptr)

  size_t chunks() const;  // the 2 MiB chunks held for carved blocks

 private:
  struct Chunk {
    size_t block = 0;   // the size of its blocks
    size_t in_use = 0;  // blocks handed out
  };
  mutable std::mutex mutex_;
  std::unordered_map<uintptr_t, Chunk> chunks_;           // by address
  std::map<size_t, std::vector<void*>> carved_not_used_;  // block size -> blocks
};

}  // namespace qkv::cpu
