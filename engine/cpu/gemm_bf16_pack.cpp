// Packing for the AMX bfloat16 GEMM; the layouts are described in gemm_bf16_pack.h.
//
// Every load is masked: lanes past the operand's edge read as zero and never touch memory, so
// ragged blocks need no separate path.
#include "engine/cpu/gemm_bf16_pack.h"

#include <algorithm>

#include "engine/cpu/bf16_vectors.h"

namespace qkv::cpu::amx {
namespace {

// Transposes a 16 x 16 matrix of 32-bit words, row i in r[i]. Two rounds of unpacks transpose
// the 4 x 4 blocks inside each 128-bit lane; two rounds of lane shuffles then move the blocks.
QKV_BF16_INLINE void transpose_16x16(__m512i r[16]) {
  __m512i t[16];
  for (int i = 0; i < 16; i += 2) {
    t[i] = _mm512_unpacklo_epi32(r[i], r[i + 1]);
    t[i + 1] = _mm512_unpackhi_epi32(r[i], r[i + 1]);
  }
  // u[4m + c], lane L: column 4L + c of rows 4m .. 4m + 3.
  __m512i u[16];
  for (int i = 0; i < 16; i += 4) {
    u[i] = _mm512_unpacklo_epi64(t[i], t[i + 2]);
    u[i + 1] = _mm512_unpackhi_epi64(t[i], t[i + 2]);
    u[i + 2] = _mm512_unpacklo_epi64(t[i + 1], t[i + 3]);
    u[i + 3] = _mm512_unpackhi_epi64(t[i + 1], t[i + 3]);
  }
  // Row 4L + c of the result is lane L of u[c], u[4 + c], u[8 + c], u[12 + c].
  for (int c = 0; c < 4; ++c) {
    const __m512i ab01 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0x44);  // a0 a1 b0 b1
    const __m512i ab23 = _mm512_shuffle_i32x4(u[c], u[4 + c], 0xee);  // a2 a3 b2 b3
    const __m512i cd01 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0x44);
    const __m512i cd23 = _mm512_shuffle_i32x4(u[8 + c], u[12 + c], 0xee);
    r[c] = _mm512_shuffle_i32x4(ab01, cd01, 0x88);       // a0 b0 c0 d0
    r[4 + c] = _mm512_shuffle_i32x4(ab01, cd01, 0xdd);   // a1 b1 c1 d1
    r[8 + c] = _mm512_shuffle_i32x4(ab23, cd23, 0x88);   // a2 b2 c2 d2
    r[12 + c] = _mm512_shuffle_i32x4(ab23, cd23, 0xdd);  // a3 b3 c3 d3
  }
}

// One depth step of an A panel from A as stored: 32 rows (rows < 32 real), `count` values each.
template <typename Source>
QKV_BF16_INLINE void copy_a_rows(const Source* a, int64_t lda, int64_t rows, int64_t count,
                                 uint16_t* out) {
  for (int64_t i = 0; i < kBlock; ++i)
    _mm512_storeu_si512(out + i * kStep,
                        load32(a + std::min(i, rows - 1) * lda, i < rows ? first_lanes(count) : 0));
}

// The same from A transposed: `count` lines of depth, each with the 32 rows side by side. Lines
// 2q and 2q + 1 interleave into words (row i, depth pair q), and transposing those words gives
// rows of depth values.
template <typename Source>
QKV_BF16_INLINE void transpose_a_rows(const Source* a, int64_t lda, int64_t rows, int64_t count,
                                      uint16_t* out) {
  __m512i top[16], bottom[16];  // rows 0-15 and 16-31, one register per depth pair
  for (int64_t q = 0; q < 16; ++q) {
    const int64_t p = 2 * q;
    const __m512i even =
        load32(a + std::min(p, count - 1) * lda, p < count ? first_lanes(rows) : 0);
    const __m512i odd =
        load32(a + std::min(p + 1, count - 1) * lda, p + 1 < count ? first_lanes(rows) : 0);
    top[q] = interleave(_mm512_cvtepu16_epi32(_mm512_castsi512_si256(even)),
                        _mm512_cvtepu16_epi32(_mm512_castsi512_si256(odd)));
    bottom[q] = interleave(_mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(even, 1)),
                           _mm512_cvtepu16_epi32(_mm512_extracti64x4_epi64(odd, 1)));
  }
  transpose_16x16(top);
  transpose_16x16(bottom);
  for (int i = 0; i < 16; ++i) {
    _mm512_storeu_si512(out + i * kStep, top[i]);
    _mm512_storeu_si512(out + (16 + i) * kStep, bottom[i]);
  }
}

// One B tile (16 columns, width < 16 real; one depth step, count values) from B as stored: rows
// 2r and 2r + 1 of B interleave into row r of the tile.
template <typename Source>
QKV_BF16_INLINE void interleave_b_rows(const Source* b, int64_t ldb, int64_t width, int64_t count,
                                       uint16_t* out) {
  const __mmask16 lanes = __mmask16(first_lanes(width));
  for (int64_t r = 0; r < 16; ++r) {
    const int64_t p = 2 * r;
    const __m512i even = load16_widened(b + std::min(p, count - 1) * ldb, p < count ? lanes : 0);
    const __m512i odd =
        load16_widened(b + std::min(p + 1, count - 1) * ldb, p + 1 < count ? lanes : 0);
    _mm512_storeu_si512(out + r * 32, interleave(even, odd));
  }
}

// The same from B transposed: each column's depth values are contiguous, so a column's 32 values
// already are its 16 depth pairs; transposing (column, pair) words gives the tile's rows.
template <typename Source>
QKV_BF16_INLINE void transpose_b_columns(const Source* b, int64_t ldb, int64_t width, int64_t count,
                                         uint16_t* out) {
  __m512i columns[16];
  for (int64_t c = 0; c < 16; ++c)
    columns[c] =
        load32(b + std::clamp<int64_t>(c, 0, width - 1) * ldb, c < width ? first_lanes(count) : 0);
  transpose_16x16(columns);
  for (int r = 0; r < 16; ++r) _mm512_storeu_si512(out + r * 32, columns[r]);
}

// pack_a and pack_b's bodies. (They are separate because GCC ignores target(...) on the
// definition of a function first declared without it, as the header declares those two.)
template <typename Source>
QKV_BF16_VECTORS void pack_a_blocks(const Source* a, int64_t lda, bool transposed, int64_t rows,
                                    int64_t depth, uint16_t* dst) {
  const int64_t steps = div_up(depth, kStep);
  for (int64_t t = 0; t < div_up(rows, kBlock); ++t) {
    const int64_t i0 = t * kBlock, panel_rows = std::min<int64_t>(kBlock, rows - i0);
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t p0 = s * kStep, count = std::min<int64_t>(kStep, depth - p0);
      uint16_t* out = dst + (t * steps + s) * kPanelStep;
      if (transposed)
        transpose_a_rows(a + i0 + p0 * lda, lda, panel_rows, count, out);
      else
        copy_a_rows(a + i0 * lda + p0, lda, panel_rows, count, out);
    }
  }
}

template <typename Source>
QKV_BF16_VECTORS void pack_b_tiles(const Source* b, int64_t ldb, bool transposed, int64_t depth,
                                   int64_t cols, uint16_t* dst) {
  const int64_t steps = div_up(depth, kStep);
  for (int64_t j0 = 0; j0 < div_up(cols, kBlock) * kBlock; j0 += 16) {
    const int64_t width = std::clamp<int64_t>(cols - j0, 0, 16);
    for (int64_t s = 0; s < steps; ++s) {
      const int64_t p0 = s * kStep, count = std::min<int64_t>(kStep, depth - p0);
      uint16_t* out =
          dst + (j0 / kBlock * steps + s) * kPanelStep + (j0 % kBlock / 16) * kTileValues;
      if (transposed)
        transpose_b_columns(b + std::min(j0, cols - 1) * ldb + p0, ldb, width, count, out);
      else
        interleave_b_rows(b + p0 * ldb + std::min(j0, cols - 1), ldb, width, count, out);
    }
  }
}

}  // namespace

template <typename Source>
void pack_a(const Source* a, int64_t lda, bool transposed, int64_t rows, int64_t depth,
            uint16_t* dst) {
  pack_a_blocks(a, lda, transposed, rows, depth, dst);
}

template <typename Source>
void pack_b(const Source* b, int64_t ldb, bool transposed, int64_t depth, int64_t cols,
            uint16_t* dst) {
  pack_b_tiles(b, ldb, transposed, depth, cols, dst);
}

template void pack_a<uint16_t>(const uint16_t*, int64_t, bool, int64_t, int64_t, uint16_t*);
template void pack_a<float>(const float*, int64_t, bool, int64_t, int64_t, uint16_t*);
template void pack_b<uint16_t>(const uint16_t*, int64_t, bool, int64_t, int64_t, uint16_t*);
template void pack_b<float>(const float*, int64_t, bool, int64_t, int64_t, uint16_t*);

}  // namespace qkv::cpu::amx
