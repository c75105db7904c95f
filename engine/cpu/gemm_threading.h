// How a GEMM's work is split between the pool's threads; shared by the float GEMM (gemm.cpp) and
// the bfloat16 ones (gemm_bf16_amx.cpp, gemm_bf16_avx512.cpp), whose serial loop nests differ
// but whose threading does not.
#pragma once

#include <cstdint>
#include <functional>

namespace qkv::cpu {

// Below about this many multiply-adds (~80^3), handing work to the pool costs more than a second
// core saves. It holds because the pool's workers spin 200 us before sleeping (spin_wait.h), so
// a parallel_for between back-to-back kernels finds them awake; with sleeping workers the
// threshold would be much higher (docs/CPU_KERNELS.md, "How the blocked GEMM is organized").
constexpr int64_t kMinParallelMacs = int64_t(1) << 19;

// A product whose depth is at least this many times its larger side is summed as two halves of the
// depth, one per thread on two (gemm.cpp, gemm_depth_halves).
constexpr int64_t kDepthSplitRatio = 4;

// Threads a product of m x n x k multiply-adds should use: 1 inside a parallel region or below
// min_parallel_macs, else the pool's size. A faster kernel needs a larger threshold: the cost of
// waking a thread stays the same while the work it saves shrinks.
int gemm_threads(int64_t m, int64_t n, int64_t k, int64_t min_parallel_macs = kMinParallelMacs);

// Calls band(i0, i1, j0, j1) on disjoint blocks of the m x n output, one per thread, in parallel
// when gemm_threads() says so. Blocks are whole register tiles (mr rows, nr columns) except at the
// edge. Splitting rows makes every thread pack all of B (extra work ~ k*n per thread), splitting
// columns makes each pack all of A (~ m*k), so the bands run across the larger dimension.
void split_into_bands(int64_t m, int64_t n, int64_t k, int mr, int nr,
                      const std::function<void(int64_t, int64_t, int64_t, int64_t)>& band,
                      int64_t min_parallel_macs = kMinParallelMacs);

// Calls products(i0, i1) on ranges that cover [0, batch) once, each to run products i0 .. i1 - 1.
// Many small products (attention's [batch*heads, T, d] matmuls) are best spread over the batch:
// each thread runs a range of whole products serially, with no synchronization inside them (and
// per-range setup, such as the AMX tile configuration, is paid once per range). A few large
// products are better threaded inside (by each product itself), where the split is even whatever
// the batch size; they come as one range on the calling thread.
void for_each_product(int64_t batch, int64_t m, int64_t n, int64_t k,
                      const std::function<void(int64_t, int64_t)>& products,
                      int64_t min_parallel_macs = kMinParallelMacs);

}  // namespace qkv::cpu
