#include "engine/cpu/host_memory.h"

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>

namespace qkv::cpu {
namespace {

// 2 MiB aligned memory of `bytes` (a multiple of 2 MiB), advised to be backed by huge pages.
void* huge_page_aligned(size_t bytes) {
  void* ptr = std::aligned_alloc(HostMemory::kChunk, bytes);
  if (ptr) madvise(ptr, bytes, MADV_HUGEPAGE);  // only advice: 4 KiB pages if it is not taken
  return ptr;
}

uintptr_t chunk_of(const void* ptr) {
  return reinterpret_cast<uintptr_t>(ptr) & ~uintptr_t(HostMemory::kChunk - 1);
}

}  // namespace

HostMemory::~HostMemory() {
  for (const auto& [address, chunk] : chunks_) std::free(reinterpret_cast<void*>(address));
}

void* HostMemory::allocate(size_t bytes) {
  if (bytes >= kChunk) return huge_page_aligned((bytes + kChunk - 1) / kChunk * kChunk);
  if (bytes < kSmallestCarved || bytes > kChunk / 2)
    return std::aligned_alloc(64, (bytes + 63) / 64 * 64);
  const size_t block = (bytes + 63) / 64 * 64;
  std::lock_guard lock(mutex_);
  std::vector<void*>& blocks = carved_not_used_[block];
  if (blocks.empty()) {
    char* chunk = static_cast<char*>(huge_page_aligned(kChunk));
    if (!chunk) return nullptr;
    chunks_[reinterpret_cast<uintptr_t>(chunk)] = Chunk{block, 0};
    // Handed out from the chunk's start: the last pushed is the first popped.
    for (size_t k = kChunk / block; k-- > 0;) blocks.push_back(chunk + k * block);
  }
  void* ptr = blocks.back();
  blocks.pop_back();
  ++chunks_.at(chunk_of(ptr)).in_use;
  return ptr;
}

void HostMemory::free(void* ptr) {
  if (!ptr) return;
  std::lock_guard lock(mutex_);
  auto it = chunks_.find(chunk_of(ptr));
  // Not carved: malloc's own block, or a huge one. Neither lies in a chunk, so the 2 MiB that
  // holds its start is never a chunk's.
  if (it == chunks_.end()) {
    std::free(ptr);
    return;
  }
  std::vector<void*>& blocks = carved_not_used_[it->second.block];
  if (--it->second.in_use > 0) {
    blocks.push_back(ptr);
    return;
  }
  // The chunk's last block: the chunk goes back, and its other blocks leave the list.
  const uintptr_t begin = it->first;
  blocks.erase(
      std::remove_if(blocks.begin(), blocks.end(), [&](void* b) { return chunk_of(b) == begin; }),
      blocks.end());
  chunks_.erase(it);
  std::free(reinterpret_cast<void*>(begin));
}

size_t HostMemory::chunks() const {
  std::lock_guard lock(mutex_);
  return chunks_.size();
}

}  // namespace qkv::cpu
