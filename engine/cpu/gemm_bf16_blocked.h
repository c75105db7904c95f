// The loop nest both bfloat16 GEMM kernels share (gemm_bf16_amx.cpp: AMX tiles;
// gemm_bf16_avx512.cpp: VDPBF16PS on zmm registers). They pack the operands alike
// (gemm_bf16_pack.h) and differ only in how they multiply one block of C of at most 32 x 32 from
// an A panel and a B panel, so the blocking, the edge cases, the few-rows path and the threading
// are written once here, around a kernel's `multiply_block`.
//
//   j0: columns in blocks of kNc       packed B block (kKc x kNc) stays in L2
//   p0: depth in blocks of kKc         C is loaded (accumulate) or zeroed once, then added to
//   i0: rows in blocks of kMc          packed A block (kMc x kKc)
//   ir: rows in steps of 32            one A panel (32 x kKc, 16 KiB) stays in L1 ...
//   jr: columns in steps of 32         ... while B panels stream past it from L2
#pragma once

#include <algorithm>

#include "engine/cpu/batch_strides.h"
#include "engine/cpu/gemm_bf16_pack.h"
#include "engine/cpu/gemm_bf16_small_m.h"
#include "engine/cpu/gemm_small_m.h"
#include "engine/cpu/gemm_threading.h"
#include "engine/cpu/scratch_buffer.h"

namespace qkv::cpu::amx {

constexpr int64_t kKc = 256, kMc = 256, kNc = 1024;  // cache blocks, in values

// The serial loop nest over all of C for one thread; m, n, k > 0. multiply_block(depth, a_panel,
// b_panel, c, ldc, load_c, rows, cols) sets the rows x cols block at c to the panels' product over
// `depth` values (div_up(depth, kStep) packed steps), plus its old value when load_c.
template <typename Source, typename MultiplyBlock>
void gemm_bf16_blocked(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Source* a,
                       int64_t lda, const Source* b, int64_t ldb, bool accumulate, float* c,
                       int64_t ldc, const MultiplyBlock& multiply_block) {
  const int64_t a_row = trans_a ? 1 : lda, a_depth = trans_a ? lda : 1;
  const int64_t b_depth = trans_b ? 1 : ldb, b_col = trans_b ? ldb : 1;
  const int64_t kc_max = div_up(std::min(kKc, k), kStep) * kStep;
  thread_local ScratchBuffer a_scratch, b_scratch;
  auto* a_packed = static_cast<uint16_t*>(
      a_scratch.get(sizeof(uint16_t) * div_up(std::min(kMc, m), kBlock) * kBlock * kc_max));
  auto* b_packed = static_cast<uint16_t*>(
      b_scratch.get(sizeof(uint16_t) * div_up(std::min(kNc, n), kBlock) * kBlock * kc_max));

  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
    const int64_t nc = std::min(kNc, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kKc) {
      const int64_t kc = std::min(kKc, k - p0), steps = div_up(kc, kStep);
      pack_b(b + p0 * b_depth + j0 * b_col, ldb, trans_b, kc, nc, b_packed);
      const bool load_c = accumulate || p0 > 0;
      for (int64_t i0 = 0; i0 < m; i0 += kMc) {
        const int64_t mc = std::min(kMc, m - i0);
        pack_a(a + i0 * a_row + p0 * a_depth, lda, trans_a, mc, kc, a_packed);
        for (int64_t ir = 0; ir < mc; ir += kBlock)
          for (int64_t jr = 0; jr < nc; jr += kBlock)
            multiply_block(kc, a_packed + ir * steps * kStep, b_packed + jr * steps * kStep,
                           c + (i0 + ir) * ldc + j0 + jr, ldc, load_c,
                           int(std::min<int64_t>(kBlock, mc - ir)),
                           int(std::min<int64_t>(kBlock, nc - jr)));
      }
    }
  }
}

// One product, gemm_bf16.h's conventions: the empty and few-rows cases, then C split into bands
// between threads (above min_parallel_macs), each band run by serial(trans_a, trans_b, m, n, k, a,
// lda, b, ldb, accumulate, c, ldc) - the loop nest above, in the kernel's setting.
template <typename Source, typename Serial>
void gemm_bf16_product(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Source* a,
                       int64_t lda, const Source* b, int64_t ldb, bool accumulate, float* c,
                       int64_t ldc, int64_t min_parallel_macs, const Serial& serial) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  if (m <= kSmallM)  // a few rows (decoding): packing all of B for them costs more than it saves
    return gemm_bf16_small_m(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc);
  const int64_t a_row = trans_a ? 1 : lda, b_col = trans_b ? ldb : 1;
  split_into_bands(
      m, n, k, kBlock, kBlock,
      [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
        serial(trans_a, trans_b, i1 - i0, j1 - j0, k, a + i0 * a_row, lda, b + j0 * b_col, ldb,
               accumulate, c + i0 * ldc + j0, ldc);
      },
      min_parallel_macs);
}

// A batch of products (gemm_bf16.h's batched form): whole products per thread (for_each_product),
// each range of them inside one RangeScope (AMX's tile configuration; NoScope for none), each
// product run by product(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc).
struct NoScope {};
template <typename RangeScope, typename Source, typename Product>
void gemm_bf16_each(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                    const Source* a, int64_t lda, BatchStrides stride_a, const Source* b,
                    int64_t ldb, BatchStrides stride_b, bool accumulate, float* c, int64_t ldc,
                    BatchStrides stride_c, int64_t min_parallel_macs, const Product& product) {
  for_each_product(
      batch, m, n, k,
      [&](int64_t i0, int64_t i1) {
        [[maybe_unused]] const RangeScope scope;
        for (int64_t i = i0; i < i1; ++i)
          product(trans_a, trans_b, m, n, k, a + stride_a.offset(i), lda, b + stride_b.offset(i),
                  ldb, accumulate, c + stride_c.offset(i), ldc);
      },
      min_parallel_macs);
}

}  // namespace qkv::cpu::amx
