// The bfloat16 GEMM on AMX tiles (gemm_bf16.h).
//
// The kernel keeps a 32 x 32 block of C in four float32 tiles (tmm0-3, a 2 x 2 grid of 16 x 16)
// and walks the depth 32 values at a time: per step it loads two 16 x 32 tiles of A (tmm4, tmm5)
// and two tiles of B (tmm6, tmm7), and issues four TDPBF16PS, each 16 x 16 x 32 multiply-adds.
// Every loaded tile feeds two products, the most eight tile registers allow.
//
// TDPBF16PS reads B in "VNNI" order: a B tile row holds 16 columns, each as the pair of values at
// depths 2r and 2r + 1, because every float32 lane of the result adds two products at once. So
// packing B interleaves pairs of its rows; packing A copies rows of 32 values. Both are zero-padded
// to whole tiles, which makes ragged edges free for the kernel (zeros add nothing).
//
// The loop nest around it is gemm_packed.cpp's (Goto / BLIS) with the loops reordered so that
// each operand is packed once per call when the output fits one column block:
//
//   j0: columns in blocks of kNc       packed B block (kKc x kNc) stays in L2
//   p0: depth in blocks of kKc         C is loaded (accumulate) or zeroed once, then added to
//   i0: rows in blocks of kMc          packed A block (kMc x kKc)
//   ir: rows in steps of 32            one A panel (32 x kKc, 16 KiB) stays in L1 ...
//   jr: columns in steps of 32         ... while B panels stream past it from L2
//
// Functions that touch tiles carry target(...) instead of relying on -march: the file is compiled
// into every build and only runs after amx_bf16_available() said yes.
#include <immintrin.h>

#include <algorithm>
#include <cstring>

#include "engine/cpu/amx.h"
#include "engine/cpu/gemm_bf16.h"
#include "engine/cpu/gemm_threading.h"
#include "engine/cpu/scratch_buffer.h"
#include "engine/error.h"

#define QKV_AMX __attribute__((target("amx-tile,amx-bf16,avx512f,avx512bw,avx512vl")))

namespace qkv::cpu {
namespace {

constexpr int kBlock = 32;                           // C rows and columns per kernel call
constexpr int kStep = 32;                            // depth per tile product (64 bytes of bf16)
constexpr int kTileValues = 16 * kStep;              // bf16 values in one A or B tile (1 KiB)
constexpr int kPanelStep = 2 * kTileValues;          // one depth step of a 32-wide panel: two tiles
constexpr int64_t kKc = 256, kMc = 256, kNc = 1024;  // cache blocks, in values

int64_t div_up(int64_t x, int64_t y) { return (x + y - 1) / y; }

// The tile shapes every call uses: all eight tiles 16 rows x 64 bytes (16 floats or 32 bf16).
// The layout of this struct is fixed by the LDTILECFG instruction.
struct TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

// Configures the tiles for this thread and releases them at the end of the scope: released tiles
// make the thread's saved context 8 KiB smaller at every context switch.
class TileScope {
 public:
  QKV_AMX TileScope() {
    TileConfig config;
    for (int t = 0; t < 8; ++t) {
      config.bytes_per_row[t] = 64;
      config.rows[t] = 16;
    }
    _tile_loadconfig(&config);
  }
  QKV_AMX ~TileScope() { _tile_release(); }
  TileScope(const TileScope&) = delete;
  TileScope& operator=(const TileScope&) = delete;
};

// Mask of the first `count` (0..32) of 32 lanes.
inline uint32_t first_lanes(int64_t count) {
  return count >= 32 ? ~0u : count <= 0 ? 0u : (1u << count) - 1;
}

// Packs rows [0, rows) x depth [0, depth) of op(A), value (i, p) at a[i * a_row + p * a_depth], as
// panels of 32 rows. Panel t holds, for each depth step s, 32 rows of 32 values: the two A tiles
// of that step one above the other, at dst + (t * steps + s) * kPanelStep.
QKV_AMX void pack_a(const uint16_t* a, int64_t a_row, int64_t a_depth, int64_t rows, int64_t depth,
                    uint16_t* dst) {
  const int64_t steps = div_up(depth, kStep);
  for (int64_t i = 0; i < div_up(rows, kBlock) * kBlock; ++i) {
    uint16_t* row = dst + (i / kBlock) * steps * kPanelStep + (i % kBlock) * kStep;
    for (int64_t s = 0; s < steps; ++s) {
      uint16_t* out = row + s * kPanelStep;
      const int64_t p0 = s * kStep, count = std::min<int64_t>(kStep, depth - p0);
      if (i >= rows) {
        _mm512_storeu_si512(out, _mm512_setzero_si512());
      } else if (a_depth == 1) {  // A as stored: the 32 values are contiguous
        _mm512_storeu_si512(out, _mm512_maskz_loadu_epi16(first_lanes(count), a + i * a_row + p0));
      } else {
        for (int64_t q = 0; q < kStep; ++q)
          out[q] = q < count ? a[i * a_row + (p0 + q) * a_depth] : 0;
      }
    }
  }
}

// Packs columns [0, cols) x depth [0, depth) of op(B), value (p, j) at b[p * b_depth + j * b_col],
// as panels of 32 columns. For each depth step, a panel holds two B tiles (columns 0-15, 16-31)
// of 16 rows; row r of a tile holds, for each of its 16 columns, the values at depths 2r and
// 2r + 1 side by side.
QKV_AMX void pack_b(const uint16_t* b, int64_t b_depth, int64_t b_col, int64_t cols, int64_t depth,
                    uint16_t* dst) {
  const int64_t steps = div_up(depth, kStep);
  for (int64_t j = 0; j < div_up(cols, kBlock) * kBlock; j += 16) {
    uint16_t* tile_column =
        dst + (j / kBlock) * steps * kPanelStep + (j % kBlock / 16) * kTileValues;
    const int64_t width = std::clamp<int64_t>(cols - j, 0, 16);
    for (int64_t s = 0; s < steps; ++s) {
      uint16_t* tile = tile_column + s * kPanelStep;
      for (int64_t r = 0; r < 16; ++r) {
        const int64_t p = s * kStep + 2 * r;
        uint16_t* out = tile + r * 32;
        if (b_col == 1 && width > 0) {
          // B as stored: rows p and p + 1 are contiguous; widen each to 32-bit lanes and put row
          // p + 1 in the high halves. (The maskz forms of the widening and the shift keep GCC 12
          // from warning about the unmasked ones' undefined pass-through operand.)
          const __mmask16 even_lanes = p < depth ? __mmask16(first_lanes(width)) : 0;
          const __mmask16 odd_lanes = p + 1 < depth ? even_lanes : 0;
          const __m512i even = _mm512_maskz_cvtepu16_epi32(
              even_lanes,
              _mm256_maskz_loadu_epi16(even_lanes, b + std::min(p, depth - 1) * b_depth + j));
          const __m512i odd = _mm512_maskz_cvtepu16_epi32(
              odd_lanes,
              _mm256_maskz_loadu_epi16(odd_lanes, b + std::min(p + 1, depth - 1) * b_depth + j));
          _mm512_storeu_si512(
              out, _mm512_or_si512(even, _mm512_maskz_slli_epi32(__mmask16(~0), odd, 16)));
        } else {
          for (int64_t c = 0; c < 16; ++c)
            for (int64_t e = 0; e < 2; ++e)
              out[2 * c + e] =
                  c < width && p + e < depth ? b[(p + e) * b_depth + (j + c) * b_col] : 0;
        }
      }
    }
  }
}

// C block (rows x cols <= 32 x 32, at c with row stride ldc) = A panel @ B panel over `steps`
// depth steps, plus C's old value when `load_c`.
QKV_AMX void multiply_block(int64_t steps, const uint16_t* a, const uint16_t* b, float* c,
                            int64_t ldc, bool load_c, int rows, int cols) {
  alignas(64) float edge[kBlock * kBlock];
  const bool full = rows == kBlock && cols == kBlock;
  float* block = full ? c : edge;
  const int64_t stride = full ? ldc : kBlock;
  if (!full && load_c) {
    std::memset(edge, 0, sizeof edge);
    for (int i = 0; i < rows; ++i)
      std::memcpy(edge + i * kBlock, c + i * ldc, cols * sizeof(float));
  }
  const int64_t bytes = stride * int64_t(sizeof(float));
  if (load_c) {
    _tile_loadd(0, block, bytes);
    _tile_loadd(1, block + 16, bytes);
    _tile_loadd(2, block + 16 * stride, bytes);
    _tile_loadd(3, block + 16 * stride + 16, bytes);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  for (int64_t s = 0; s < steps; ++s, a += kPanelStep, b += kPanelStep) {
    _tile_loadd(4, a, 64);
    _tile_loadd(5, a + kTileValues, 64);
    _tile_loadd(6, b, 64);
    _tile_loadd(7, b + kTileValues, 64);
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, block, bytes);
  _tile_stored(1, block + 16, bytes);
  _tile_stored(2, block + 16 * stride, bytes);
  _tile_stored(3, block + 16 * stride + 16, bytes);
  if (!full)
    for (int i = 0; i < rows; ++i)
      std::memcpy(c + i * ldc, edge + i * kBlock, cols * sizeof(float));
}

// The serial loop nest (see the top of the file) over all of C for one thread. m, n, k > 0.
void gemm_bf16_serial(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                      const uint16_t* a, int64_t lda, const uint16_t* b, int64_t ldb,
                      bool accumulate, float* c, int64_t ldc) {
  // Strides of op(A) along (row, depth) and of op(B) along (depth, column).
  const int64_t a_row = trans_a ? 1 : lda, a_depth = trans_a ? lda : 1;
  const int64_t b_depth = trans_b ? 1 : ldb, b_col = trans_b ? ldb : 1;
  const int64_t kc_max = div_up(std::min(kKc, k), kStep) * kStep;
  thread_local ScratchBuffer a_scratch, b_scratch;
  auto* a_packed = static_cast<uint16_t*>(
      a_scratch.get(sizeof(uint16_t) * div_up(std::min(kMc, m), kBlock) * kBlock * kc_max));
  auto* b_packed = static_cast<uint16_t*>(
      b_scratch.get(sizeof(uint16_t) * div_up(std::min(kNc, n), kBlock) * kBlock * kc_max));

  TileScope tiles;
  for (int64_t j0 = 0; j0 < n; j0 += kNc) {
    const int64_t nc = std::min(kNc, n - j0);
    for (int64_t p0 = 0; p0 < k; p0 += kKc) {
      const int64_t kc = std::min(kKc, k - p0), steps = div_up(kc, kStep);
      pack_b(b + p0 * b_depth + j0 * b_col, b_depth, b_col, nc, kc, b_packed);
      const bool load_c = accumulate || p0 > 0;
      for (int64_t i0 = 0; i0 < m; i0 += kMc) {
        const int64_t mc = std::min(kMc, m - i0);
        pack_a(a + i0 * a_row + p0 * a_depth, a_row, a_depth, mc, kc, a_packed);
        for (int64_t ir = 0; ir < mc; ir += kBlock)
          for (int64_t jr = 0; jr < nc; jr += kBlock)
            multiply_block(steps, a_packed + ir * steps * kStep, b_packed + jr * steps * kStep,
                           c + (i0 + ir) * ldc + j0 + jr, ldc, load_c,
                           int(std::min<int64_t>(kBlock, mc - ir)),
                           int(std::min<int64_t>(kBlock, nc - jr)));
      }
    }
  }
}

void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const uint16_t* a,
               int64_t lda, const uint16_t* b, int64_t ldb, bool accumulate, float* c,
               int64_t ldc) {
  if (m <= 0 || n <= 0) return;
  if (k <= 0) {
    if (!accumulate)
      for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.0f);
    return;
  }
  const int64_t a_row = trans_a ? 1 : lda, b_col = trans_b ? ldb : 1;
  split_into_bands(m, n, k, kBlock, kBlock, [&](int64_t i0, int64_t i1, int64_t j0, int64_t j1) {
    gemm_bf16_serial(trans_a, trans_b, i1 - i0, j1 - j0, k, a + i0 * a_row, lda, b + j0 * b_col,
                     ldb, accumulate, c + i0 * ldc + j0, ldc);
  });
}

}  // namespace

void gemm_bf16_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       const bf16_t* a, int64_t lda, int64_t stride_a, const bf16_t* b, int64_t ldb,
                       int64_t stride_b, bool accumulate, float* c, int64_t ldc, int64_t stride_c) {
  static_assert(sizeof(bf16_t) == sizeof(uint16_t));
  // Without the permission amx_bf16_available() asks for, the first tile instruction is SIGILL.
  QKV_CHECK(amx_bf16_available(), "gemm_bf16", "AMX bf16 tiles are not available on this machine");
  const auto* a_bits = reinterpret_cast<const uint16_t*>(a);
  const auto* b_bits = reinterpret_cast<const uint16_t*>(b);
  for_each_product(batch, m, n, k, [&](int64_t i) {
    gemm_bf16(trans_a, trans_b, m, n, k, a_bits + i * stride_a, lda, b_bits + i * stride_b, ldb,
              accumulate, c + i * stride_c, ldc);
  });
}

}  // namespace qkv::cpu
