// The few-rows bfloat16 product (gemm_bf16_small_m.h).
//
// op(A) is at most kSmallM rows: it is copied once per call, rounded and zero-padded to a whole
// number of 32-value chunks, into a small buffer, so only B is read where it lies. VDPBF16PS adds,
// to each float32 lane L, the products of the bfloat16 pairs in lanes 2L and 2L + 1 of its
// operands; the two layouts of B pair the values differently:
//
//   B^T stored ([n, k], a Linear's weight): a row of B^T and a row of A are both contiguous along
//   the depth, so each output is a dot product; 32 depths at a time, 4 columns x m rows of
//   accumulators, summed across lanes at the end.
//   B stored ([k, n]): rows p and p + 1 of B interleave into (B[p][j], B[p+1][j]) pairs, and the
//   matching pair of A's row is broadcast to every lane; 16 columns per vector, 4 vectors x m rows
//   of accumulators.
#include "engine/cpu/gemm_bf16_small_m.h"

#include <algorithm>
#include <type_traits>

#include "engine/cpu/bf16_vectors.h"
#include "engine/cpu/gemm_small_m.h"
#include "engine/cpu/gemm_threading.h"
#include "engine/cpu/scratch_buffer.h"
#include "engine/dtype.h"

namespace qkv::cpu {
namespace {

using amx::first_lanes;
using amx::interleave;
using amx::load16_widened;
using amx::load32;

#define QKV_SMALL_M QKV_BF16_VECTORS

// Rows of op(A) rounded to bfloat16 and zero-padded to `padded` (a multiple of 32) values, into
// rows[m * padded].
template <typename Source>
void round_rows(bool trans_a, int64_t m, int64_t k, const Source* a, int64_t lda, int64_t padded,
                uint16_t* rows) {
  std::fill(rows, rows + m * padded, uint16_t(0));
  for (int64_t i = 0; i < m; ++i)
    for (int64_t p = 0; p < k; ++p) {
      const Source v = a[trans_a ? i + p * lda : i * lda + p];
      if constexpr (std::is_same_v<Source, float>)
        rows[i * padded + p] = float_to_bf16(v).bits;
      else
        rows[i * padded + p] = v;
    }
}

// C[i][j] (i < m, j in [j0, j1)) from B^T stored: dot products over the depth.
template <typename Source>
QKV_SMALL_M void dot_products(int64_t m, int64_t j0, int64_t j1, int64_t k, const uint16_t* a_rows,
                              int64_t padded, const Source* b, int64_t ldb, bool accumulate,
                              float* c, int64_t ldc) {
  for (int64_t j = j0; j < j1; j += 4) {
    const int64_t width = std::min<int64_t>(4, j1 - j);
    __m512 sums[kSmallM][4];
    for (auto& row : sums)
      for (__m512& s : row) s = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p += 32) {
      const uint32_t depth = first_lanes(k - p);
      __m512bh columns[4];
      for (int64_t q = 0; q < 4; ++q)
        columns[q] =
            __m512bh(load32(b + (j + std::min(q, width - 1)) * ldb + p, q < width ? depth : 0));
      for (int64_t i = 0; i < m; ++i) {
        const __m512bh row = __m512bh(_mm512_loadu_si512(a_rows + i * padded + p));
        for (int64_t q = 0; q < 4; ++q) sums[i][q] = _mm512_dpbf16_ps(sums[i][q], row, columns[q]);
      }
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t q = 0; q < width; ++q) {
        const float total = _mm512_reduce_add_ps(sums[i][q]);
        float& out = c[i * ldc + j + q];
        out = accumulate ? out + total : total;
      }
  }
}

// C[i][j] (i < m, j in [j0, j1)) from B stored: pairs of B's rows against broadcast pairs of A.
template <typename Source>
QKV_SMALL_M void pair_products(int64_t m, int64_t j0, int64_t j1, int64_t k, const uint16_t* a_rows,
                               int64_t padded, const Source* b, int64_t ldb, bool accumulate,
                               float* c, int64_t ldc) {
  for (int64_t j = j0; j < j1; j += 64) {
    __mmask16 lanes[4];
    for (int64_t v = 0; v < 4; ++v) lanes[v] = __mmask16(first_lanes(j1 - j - 16 * v));
    __m512 sums[kSmallM][4];
    for (auto& row : sums)
      for (__m512& s : row) s = _mm512_setzero_ps();
    for (int64_t p = 0; p < k; p += 2) {
      const Source* even = b + p * ldb + j;
      const Source* odd = b + std::min(p + 1, k - 1) * ldb + j;
      __m512bh pairs[4];
      for (int64_t v = 0; v < 4; ++v)
        pairs[v] = __m512bh(interleave(load16_widened(even + 16 * v, lanes[v]),
                                       load16_widened(odd + 16 * v, p + 1 < k ? lanes[v] : 0)));
      for (int64_t i = 0; i < m; ++i) {
        uint32_t pair;  // A's values at depths p and p + 1 (the padding makes p + 1 safe)
        __builtin_memcpy(&pair, a_rows + i * padded + p, sizeof pair);
        const __m512bh broadcast = __m512bh(_mm512_set1_epi32(int(pair)));
        for (int64_t v = 0; v < 4; ++v)
          sums[i][v] = _mm512_dpbf16_ps(sums[i][v], broadcast, pairs[v]);
      }
    }
    for (int64_t i = 0; i < m; ++i)
      for (int64_t v = 0; v < 4; ++v) {
        float* out = c + i * ldc + j + 16 * v;
        const __m512 total = accumulate
                                 ? _mm512_add_ps(sums[i][v], _mm512_maskz_loadu_ps(lanes[v], out))
                                 : sums[i][v];
        _mm512_mask_storeu_ps(out, lanes[v], total);
      }
  }
}

}  // namespace

template <typename Source>
void gemm_bf16_small_m(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Source* a,
                       int64_t lda, const Source* b, int64_t ldb, bool accumulate, float* c,
                       int64_t ldc) {
  // A is rounded once, here, and shared by the threads; only B is split between them, in blocks
  // of 64 columns (the pair path's width). The loops are memory-bound like float32's
  // gemm_small_m, so they thread at its threshold.
  const int64_t padded = (k + 31) / 32 * 32;
  thread_local ScratchBuffer scratch;
  auto* a_rows = static_cast<uint16_t*>(scratch.get(sizeof(uint16_t) * m * padded));
  round_rows(trans_a, m, k, a, lda, padded, a_rows);
  split_into_bands(m, n, k, 64, 64, [&](int64_t, int64_t, int64_t j0, int64_t j1) {
    if (trans_b)
      dot_products(m, j0, j1, k, a_rows, padded, b, ldb, accumulate, c, ldc);
    else
      pair_products(m, j0, j1, k, a_rows, padded, b, ldb, accumulate, c, ldc);
  });
}

template void gemm_bf16_small_m<uint16_t>(bool, bool, int64_t, int64_t, int64_t, const uint16_t*,
                                          int64_t, const uint16_t*, int64_t, bool, float*, int64_t);
template void gemm_bf16_small_m<float>(bool, bool, int64_t, int64_t, int64_t, const float*, int64_t,
                                       const float*, int64_t, bool, float*, int64_t);

}  // namespace qkv::cpu
