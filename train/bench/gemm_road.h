// The road from a textbook matrix multiply to the packed GEMM, one step per function, so the
// benchmark can show what each idea is worth. Row-major C = A @ B, no transposes: these exist to
// be measured and read, engine/cpu/gemm.h is what the library uses.
#pragma once

#include <cstdint>

namespace qkv::bench {

// 1. The definition: C[i][j] = sum over p of A[i][p] * B[p][j]. The inner loop walks a column of
//    B, one cache line per multiply-add once B outgrows the cache.
void gemm_naive(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c);

// 2. Loops reordered (i, p, j): the inner loop now runs along rows of B and C, contiguous, so the
//    compiler vectorizes it; but each row of B is still fetched from memory once per row of C.
void gemm_reordered(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c);

// 3. Cache blocking on top of 2: a block of B small enough for L2 is reused by all rows of C
//    before moving on. Still no packing: C is reloaded from L1 at every step of p.
void gemm_blocked(int64_t m, int64_t n, int64_t k, const float* a, const float* b, float* c);

// Steps 4-6 are engine/cpu/gemm_packed.h with the generic, AVX2 and AVX-512 microkernels, and
// step 7 is engine/cpu/gemm.h on all cores.

}  // namespace qkv::bench
