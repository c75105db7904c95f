// The CPU's raw host memory (engine/cpu/host_memory.h): which blocks are carved from 2 MiB
// chunks, that carved blocks do not overlap, and that a chunk goes back when its blocks have.
#include <boost/test/unit_test.hpp>
#include <cstdint>
#include <cstring>
#include <set>
#include <vector>

#include "engine/cpu/host_memory.h"

using qkv::cpu::HostMemory;

namespace {

uintptr_t chunk_of(const void* p) {
  return reinterpret_cast<uintptr_t>(p) & ~uintptr_t(HostMemory::kChunk - 1);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(host_memory)

BOOST_AUTO_TEST_CASE(blocks_of_one_size_fill_a_chunk_without_overlapping) {
  HostMemory memory;
  const size_t block = size_t(256) << 10, per_chunk = HostMemory::kChunk / block;
  std::vector<unsigned char*> blocks;
  for (size_t i = 0; i < per_chunk; ++i)
    blocks.push_back(static_cast<unsigned char*>(memory.allocate(block)));
  BOOST_TEST(memory.chunks() == 1u);
  std::set<uintptr_t> chunks;
  for (size_t i = 0; i < per_chunk; ++i) {
    BOOST_TEST(reinterpret_cast<uintptr_t>(blocks[i]) % 64 == 0u);
    chunks.insert(chunk_of(blocks[i]));
    std::memset(blocks[i], int(i + 1), block);  // a block written whole ...
  }
  BOOST_TEST(chunks.size() == 1u);
  for (size_t i = 0; i < per_chunk; ++i) {  // ... keeps its bytes: no two overlap
    BOOST_TEST(blocks[i][0] == i + 1);
    BOOST_TEST(blocks[i][block - 1] == i + 1);
  }
  void* next = memory.allocate(block);  // the chunk is full: a second one
  BOOST_TEST(memory.chunks() == 2u);
  BOOST_TEST(chunk_of(next) != *chunks.begin());
  memory.free(next);
  BOOST_TEST(memory.chunks() == 1u);
  memory.free(blocks[3]);  // a block that comes back is handed out again
  BOOST_TEST(memory.allocate(block) == static_cast<void*>(blocks[3]));
  for (unsigned char* b : blocks) memory.free(b);
  BOOST_TEST(memory.chunks() == 0u);  // the last block back takes the chunk with it
}

BOOST_AUTO_TEST_CASE(each_carved_size_has_chunks_of_its_own) {
  HostMemory memory;
  void* a = memory.allocate(HostMemory::kSmallestCarved);
  void* b = memory.allocate(size_t(1) << 20);  // the largest carved: two per chunk
  void* c = memory.allocate(size_t(1) << 20);
  BOOST_TEST(memory.chunks() == 2u);
  BOOST_TEST(chunk_of(a) != chunk_of(b));
  BOOST_TEST(chunk_of(b) == chunk_of(c));
  for (void* p : {a, b, c}) memory.free(p);
  BOOST_TEST(memory.chunks() == 0u);
}

BOOST_AUTO_TEST_CASE(small_and_huge_blocks_are_not_carved) {
  HostMemory memory;
  void* small = memory.allocate(HostMemory::kSmallestCarved - 64);
  void* huge = memory.allocate(3 * HostMemory::kChunk);
  BOOST_TEST(memory.chunks() == 0u);
  BOOST_TEST(reinterpret_cast<uintptr_t>(small) % 64 == 0u);
  BOOST_TEST(reinterpret_cast<uintptr_t>(huge) % HostMemory::kChunk == 0u);
  std::memset(huge, 7, 3 * HostMemory::kChunk);
  memory.free(small);
  memory.free(huge);
  memory.free(nullptr);
  BOOST_TEST(memory.chunks() == 0u);
}

BOOST_AUTO_TEST_SUITE_END()
