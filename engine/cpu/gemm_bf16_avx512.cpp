// The bfloat16 GEMM on AVX512-BF16 (gemm_bf16.h), for CPUs without usable AMX tiles. bf16_kernel()
// takes it only where VDPBF16PS measures clearly faster than the float32 FMA: on some cores it
// issues at half an FMA's rate, and the float32 GEMM on widened operands is then the faster
// product.
//
// VDPBF16PS multiplies the bfloat16 pairs in lanes 2L and 2L + 1 of two zmm registers and adds
// both products to float32 lane L: 32 multiply-adds per instruction, twice a float32 FMA's 16.
// The kernel is built so that those pairs are depth pairs: lane L of the B operand holds column
// L's values at depths 2q and 2q + 1, and the A operand is one row's values at the same two
// depths, one 32-bit word broadcast to all 16 lanes.
//
// Register tile: up to 12 rows x 32 columns of C, 24 zmm accumulators. Per depth pair the kernel
// loads two B vectors (columns 0-15 and 16-31), and for each row broadcasts one word of A and
// issues two VDPBF16PS: 24 independent instructions hide their latency, for 2 + 12 loads (the
// broadcasts are loads, not shuffles). 24 accumulators + 2 B vectors + 1 broadcast = 27 of the
// 32 registers, so nothing spills; 14 rows would fit too, but 12 + 12 + 8 cover a 32-row panel.
//
// Packed layouts: the AMX kernel's (gemm_bf16_pack.h), which fit this tile as they are. A B panel
// is 32 columns in two 16-column tiles whose row q holds the 16 columns' values at depths 2q and
// 2q + 1 ("VNNI" order): exactly the two B vectors of depth pair q. An A panel is 32 rows of 32
// depth values each per depth step, so the word at row i, values 2q and 2q + 1 is the broadcast
// for row i; the kernel walks a 32-row panel as sub-tiles of rows 0-11, 12-23 and 24-31. The
// packing zero-pads to whole panels and steps and rounds float32 operands to bfloat16 (to nearest
// even), so ragged edges only need masked stores of C and fewer rows. The kernel stops at the
// last depth pair that holds data: an odd depth's last pair is (value, zero padding).
//
// Subnormals: VDPBF16PS reads bfloat16 subnormal inputs as zero and flushes subnormal results to
// zero whatever MXCSR says (the instruction is specified with DAZ and FTZ semantics, like
// TDPBF16PS), so this kernel and the AMX one treat them alike. It reads a subnormal accumulator as
// zero too, so C += product also drops a subnormal already in C.
//
// The loop nest and the cache blocks are gemm_bf16_amx.cpp's, with a 32 x 32 block of C computed
// by three register sub-tiles instead of four tile products. Functions carry target(...) instead
// of relying on -march: the file is compiled into every build and runs only where
// avx512_bf16_supported().
#include <immintrin.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstring>
#include <utility>

#include "engine/cpu/bf16_vectors.h"
#include "engine/cpu/gemm_bf16_blocked.h"
#include "engine/cpu/gemm_bf16_kernels.h"
#include "engine/cpu/gemm_threading.h"

namespace qkv::cpu {
namespace {

using amx::div_up;
using amx::kBlock;
using amx::kPanelStep;
using amx::kStep;
using amx::kTileValues;

constexpr int kRows = 12;          // rows of the register tile
constexpr int kPairs = kStep / 2;  // depth pairs per packed step
constexpr int kTileRow = 32;       // values in a row of a B tile: 16 columns x 2 depths

// About twice the float32 kernel's rate, so a product must be about twice as large before a
// second thread pays (gemm_threading.h).
constexpr int64_t kMinParallelMacsBf16 = 2 * kMinParallelMacs;

QKV_BF16_INLINE __mmask16 lanes16(int count) {
  return count <= 0 ? 0 : count >= 16 ? 0xffff : __mmask16((1u << count) - 1);
}

// One depth pair: B's two vectors at b (columns 0-15, then 16-31 a tile later), A's words for R
// rows at a, a + kStep, ...
template <int R>
QKV_BF16_INLINE void multiply_pair(const uint16_t* a, const uint16_t* b, __m512 (&acc)[R][2]) {
  const __m512bh low = __m512bh(_mm512_loadu_si512(b));
  const __m512bh high = __m512bh(_mm512_loadu_si512(b + kTileValues));
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i) {
    uint32_t word;
    std::memcpy(&word, a + i * kStep, sizeof word);
    const __m512bh pair = __m512bh(_mm512_set1_epi32(int(word)));
    acc[i][0] = _mm512_dpbf16_ps(acc[i][0], pair, low);
    acc[i][1] = _mm512_dpbf16_ps(acc[i][1], pair, high);
  }
}

// R rows x `cols` (<= 32) columns of C at c = rows of an A panel (a: its first row, depth step 0)
// @ a B panel, over `pairs` depth pairs; plus C's old value when `load_c`.
template <int R>
QKV_BF16_VECTORS void multiply_rows(int64_t pairs, const uint16_t* a, const uint16_t* b, float* c,
                                    int64_t ldc, bool load_c, int cols) {
  const __mmask16 mask[2] = {lanes16(cols), lanes16(cols - 16)};
  __m512 acc[R][2];
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < 2; ++v)
      acc[i][v] =
          load_c ? _mm512_maskz_loadu_ps(mask[v], c + i * ldc + 16 * v) : _mm512_setzero_ps();
  for (; pairs >= kPairs; pairs -= kPairs, a += kPanelStep, b += kPanelStep) {
#pragma GCC unroll 16
    for (int q = 0; q < kPairs; ++q) multiply_pair<R>(a + 2 * q, b + kTileRow * q, acc);
  }
  for (int q = 0; q < pairs; ++q) multiply_pair<R>(a + 2 * q, b + kTileRow * q, acc);
#pragma GCC unroll 12
  for (int i = 0; i < R; ++i)
    for (int v = 0; v < 2; ++v) _mm512_mask_storeu_ps(c + i * ldc + 16 * v, mask[v], acc[i][v]);
}

using RowsKernel = void (*)(int64_t, const uint16_t*, const uint16_t*, float*, int64_t, bool, int);

template <int... R>
constexpr auto rows_table(std::integer_sequence<int, R...>) {
  return std::array<RowsKernel, sizeof...(R)>{&multiply_rows<R + 1>...};
}
constexpr auto kRowsKernels = rows_table(std::make_integer_sequence<int, kRows>());

// C block (rows x cols <= 32 x 32) = A panel @ B panel over `depth` values, as register sub-tiles
// of kRows rows.
void multiply_block(int64_t depth, const uint16_t* a, const uint16_t* b, float* c, int64_t ldc,
                    bool load_c, int rows, int cols) {
  const int64_t pairs = div_up(depth, 2);
  for (int r0 = 0; r0 < rows; r0 += kRows)
    kRowsKernels[size_t(std::min(kRows, rows - r0) - 1)](pairs, a + r0 * kStep, b, c + r0 * ldc,
                                                         ldc, load_c, cols);
}

// One product: gemm_bf16_blocked.h's loop nest around multiply_block.
template <typename Source>
void gemm_bf16(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Source* a,
               int64_t lda, const Source* b, int64_t ldb, bool accumulate, float* c, int64_t ldc) {
  amx::gemm_bf16_product(trans_a, trans_b, m, n, k, a, lda, b, ldb, accumulate, c, ldc,
                         kMinParallelMacsBf16,
                         [](auto... args) { amx::gemm_bf16_blocked(args..., multiply_block); });
}

// `rounds` x 24 instructions on zeros in registers, 24 accumulators as in the kernel:
// VDPBF16PS, or with `fma` the float32 FMA.
template <bool fma>
QKV_BF16_VECTORS void peak_rounds(int64_t rounds, volatile float* sink) {
  __m512 acc[24];
  for (__m512& x : acc) x = _mm512_setzero_ps();
  __m512i zero = _mm512_setzero_si512();
  asm("" : "+v"(zero));  // hides that the operands are zero: the products cannot be folded away
  for (int64_t r = 0; r < rounds; ++r) {
#pragma GCC unroll 24
    for (__m512& x : acc)
      x = fma ? _mm512_fmadd_ps(__m512(zero), __m512(zero), x)
              : _mm512_dpbf16_ps(x, __m512bh(zero), __m512bh(zero));
  }
  __m512 total = acc[0];
  for (int i = 1; i < 24; ++i) total = _mm512_add_ps(total, acc[i]);
  *sink = _mm512_cvtss_f32(total);
}

template <bool fma>
double peak_flops(double seconds) {
  using Clock = std::chrono::steady_clock;
  constexpr int64_t kRounds = 1 << 12;  // of 24 instructions, ~50 us
  int64_t rounds = 0;
  volatile float sink = 0;  // the sums, so that the loop is not dead code
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    peak_rounds<fma>(kRounds, &sink);
    rounds += kRounds;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return double(rounds) * 24 * (fma ? 2.0 * 16 : 2.0 * 32) / elapsed;
}

}  // namespace

template <typename Source>
void gemm_bf16_batched_avx512(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n,
                              int64_t k, const Source* a, int64_t lda, BatchStrides stride_a,
                              const Source* b, int64_t ldb, BatchStrides stride_b, bool accumulate,
                              float* c, int64_t ldc, BatchStrides stride_c) {
  amx::gemm_bf16_each<amx::NoScope>(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb,
                                    stride_b, accumulate, c, ldc, stride_c, kMinParallelMacsBf16,
                                    gemm_bf16<Source>);
}

template void gemm_bf16_batched_avx512<uint16_t>(int64_t, bool, bool, int64_t, int64_t, int64_t,
                                                 const uint16_t*, int64_t, BatchStrides,
                                                 const uint16_t*, int64_t, BatchStrides, bool,
                                                 float*, int64_t, BatchStrides);
template void gemm_bf16_batched_avx512<float>(int64_t, bool, bool, int64_t, int64_t, int64_t,
                                              const float*, int64_t, BatchStrides, const float*,
                                              int64_t, BatchStrides, bool, float*, int64_t,
                                              BatchStrides);

bool avx512_bf16_supported() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
#else
  return false;
#endif
}

double avx512_bf16_peak_flops(double seconds) { return peak_flops<false>(seconds); }

double avx512_fma_peak_flops(double seconds) { return peak_flops<true>(seconds); }

}  // namespace qkv::cpu
