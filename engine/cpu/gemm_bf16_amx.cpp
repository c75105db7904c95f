// The bfloat16 GEMM on AMX tiles (gemm_bf16.h).
//
// The kernel keeps a 32 x 32 block of C in four float32 tiles (tmm0-3, a 2 x 2 grid of 16 x 16)
// and walks the depth 32 values at a time: per step it loads two 16 x 32 tiles of A (tmm4, tmm5)
// and two tiles of B (tmm6, tmm7), and issues four TDPBF16PS, each 16 x 16 x 32 multiply-adds.
// Every loaded tile feeds two products, the most eight tile registers allow.
//
// Both operands are packed first (gemm_bf16_pack.h): into the order tile loads read, zero-padded to
// whole tiles, which makes ragged edges free for the kernel (zeros add nothing), and rounded to
// bfloat16 on the way when they are float32.
//
// The loop nest around it is gemm_packed.cpp's (Goto / BLIS) with the loops reordered so that
// each operand is packed once per call when the output fits one column block; the VDPBF16PS
// kernel runs the same one (gemm_bf16_blocked.h).
//
// Functions that touch tiles carry target(...) instead of relying on -march: the file is compiled
// into every build and only runs after amx_bf16_available() said yes.
#include <immintrin.h>

#include <algorithm>

#include "engine/cpu/amx.h"
#include "engine/cpu/avx512_target.h"
#include "engine/cpu/gemm_bf16_blocked.h"
#include "engine/cpu/gemm_bf16_kernels.h"
#include "engine/cpu/gemm_threading.h"
#include "engine/error.h"

#define QKV_AMX __attribute__((target("amx-tile,amx-bf16,avx512f")))

namespace qkv::cpu {
namespace {

using amx::div_up;
using amx::kBlock;
using amx::kPanelStep;
using amx::kStep;
using amx::kTileValues;

// AMX multiplies several times faster than the float32 kernel, so a product must be that much
// larger than there (gemm_threading.h) before a second thread pays (docs/CPU_KERNELS.md, "bfloat16
// on AMX tiles").
constexpr int64_t kAmxMinParallelMacs = int64_t(1) << 22;

// Copies `rows` rows of `cols` <= 32 floats, each row as two masked vectors: the edge blocks of
// small products (attention's 20 x 20 scores) are many, and a memcpy call per row cost more than
// the tile products themselves. With `zero_rest`, the rest of each 32-wide destination row and
// the destination rows up to 32 are zeroed too (dst is then the 32 x 32 edge buffer).
QKV_AVX512_INLINE void copy_rows(const float* src, int64_t src_stride, float* dst,
                                 int64_t dst_stride, int rows, int cols, bool zero_rest) {
  const __mmask16 low = __mmask16((1u << std::min(cols, 16)) - 1);
  const __mmask16 high = __mmask16((1u << std::max(cols - 16, 0)) - 1);
  const __mmask16 store_low = zero_rest ? 0xFFFF : low, store_high = zero_rest ? 0xFFFF : high;
  for (int i = 0; i < rows; ++i) {
    _mm512_mask_storeu_ps(dst + i * dst_stride, store_low,
                          _mm512_maskz_loadu_ps(low, src + i * src_stride));
    _mm512_mask_storeu_ps(dst + i * dst_stride + 16, store_high,
                          _mm512_maskz_loadu_ps(high, src + i * src_stride + 16));
  }
  if (zero_rest)
    for (int i = rows; i < kBlock; ++i) {
      _mm512_storeu_ps(dst + i * dst_stride, _mm512_setzero_ps());
      _mm512_storeu_ps(dst + i * dst_stride + 16, _mm512_setzero_ps());
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
  if (!full && load_c) copy_rows(c, ldc, edge, kBlock, rows, cols, /*zero_rest=*/true);
  const int64_t bytes = stride * int64_t(sizeof(float));
  // GCC 12's _tile_loadd is an asm statement that does not tell the compiler it reads memory, so
  // nothing would stop the stores to `edge` above from moving past the loads below; this barrier
  // does. (_tile_stored declares its write, so the copies back need none.)
  asm volatile("" : : : "memory");
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
  if (!full) copy_rows(edge, kBlock, c, ldc, rows, cols, /*zero_rest=*/false);
}

// multiply_block over `depth` values, as gemm_bf16_blocked.h calls it.
void multiply_depth(int64_t depth, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc,
                    bool load_c, int rows, int cols) {
  multiply_block(div_up(depth, kStep), a, b, c, ldc, load_c, rows, cols);
}

// One product: gemm_bf16_blocked.h's loop nest around multiply_block, in a tile configuration of
// its own (nested inside the batch's, which makes it free).
template <typename Source>
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Source* a,
               int64_t lda, const Source* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  amx::gemm_bf16_product(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc,
                         kAmxMinParallelMacs, [](auto... args) {
                           AmxTileScope tiles;
                           amx::gemm_bf16_blocked(args..., multiply_depth);
                         });
}

}  // namespace

template <typename Source>
void gemm_bf16_batched_amx(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n,
                           int64_t k, const Source* a, int64_t lda, BatchStrides stride_a,
                           const Source* b, int64_t ldb, BatchStrides stride_b, bool accumulate,
                           float* c, int64_t ldc, BatchStrides stride_c) {
  // Without the permission amx_bf16_available() asks for, the first tile instruction is SIGILL.
  QKV_CHECK(amx_bf16_available(), "gemm_bf16", "AMX bf16 tiles are not available on this machine");
  // One tile configuration per range of products: each product's own scope nests inside it, so a
  // batch of small products does not configure and release the tiles once per product.
  amx::gemm_bf16_each<AmxTileScope>(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb,
                                    stride_b, accumulate, c, ldc, stride_c, kAmxMinParallelMacs,
                                    gemm_bf16<Source>);
}

template void gemm_bf16_batched_amx<uint16_t>(int64_t, bool, bool, int64_t, int64_t, int64_t,
                                              const uint16_t*, int64_t, BatchStrides,
                                              const uint16_t*, int64_t, BatchStrides, bool, float*,
                                              int64_t, BatchStrides);
template void gemm_bf16_batched_amx<float>(int64_t, bool, bool, int64_t, int64_t, int64_t,
                                           const float*, int64_t, BatchStrides, const float*,
                                           int64_t, BatchStrides, bool, float*, int64_t,
                                           BatchStrides);

}  // namespace qkv::cpu
