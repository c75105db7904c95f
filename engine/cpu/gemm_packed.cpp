// Loop order (outermost first), mirroring BLIS for row-major C, where the kernel's vector loads
// run along rows of C (B's side) and its broadcasts come from A:
//
//   i0: rows of C in blocks of mc      packed A block (mc x kc) stays in L3
//   p0: depth in blocks of kc          one pass over k per block: C gets beta once, then += 1
//   j0: columns in blocks of nc        packed B block (kc x nc) stays in L2
//   ir: rows in steps of mr            one A micro-panel (mr x kc) stays in L1 ...
//   jr: columns in steps of nr         ... while B micro-panels stream past it from L2
//
// Every packed value is therefore read from a cache close to the core many times: an A value
// nc / nr times per B block, a B value mc / mr times per A block.
#include "engine/cpu/gemm_packed.h"

#include <algorithm>

#include "engine/cpu/gemm_pack.h"
#include "engine/cpu/scratch_buffer.h"

namespace qkv::cpu {
namespace {

// A B this small (bytes) stays in cache by itself, so for B as stored (not transposed) the kernel
// reads its full-width panels in place: packing would cost more than it saves.
constexpr int64_t kInPlaceBBytes = 128 * 1024;
// Likewise a small A as stored is read in place by kernels that can (run_a_in_place): it saves
// the transpose that packing A is in that case.
constexpr int64_t kInPlaceABytes = 256 * 1024;
// Packing pays for itself by the reuse of each packed value: an A value is read once per column
// tile (n / nr times), a B value once per row tile (m / mr times). With few tiles on the other
// side, reading the operand in place costs less than copying it first: the mr rows of A (or the kc
// rows of a B panel) a kernel call reads stay in L1/L2 for the few calls that read them. This is
// the case of a Linear layer's products: [rows, 128] @ [128, 128] forward and dx, and
// dW = dy^T x with m = 128, whose A = dy^T needs no copy at all: stored A^T is already laid out
// depth-major like a packed panel, its rows lda apart instead of mr. (A B panel is wider and
// deeper than an A panel, so it takes more reuse, more row tiles, before packing it pays.)
constexpr int64_t kInPlaceAMaxColumnTiles = 8;
constexpr int64_t kInPlaceBMaxRowTiles = 16;

int64_t round_up(int64_t x, int64_t step) { return (x + step - 1) / step * step; }

}  // namespace

template <typename T>
void gemm_packed(const GemmMicrokernel<T>& kernel, bool trans_a, bool trans_b, int64_t m, int64_t n,
                 int64_t k, T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta, T* c,
                 int64_t ldc, GemmEpilogue<T> epilogue) {
  const int mr = kernel.mr, nr = kernel.nr;
  // Strides of op(A) along (row, depth) and of op(B) along (column, depth).
  const int64_t a_row = trans_a ? 1 : lda, a_depth = trans_a ? lda : 1;
  const int64_t b_col = trans_b ? ldb : 1, b_depth = trans_b ? 1 : ldb;

  const bool b_in_place =
      !trans_b && (int64_t(sizeof(T)) * k * n <= kInPlaceBBytes || m <= kInPlaceBMaxRowTiles * mr);
  const bool few_column_tiles = n <= kInPlaceAMaxColumnTiles * nr;
  const bool a_in_place = kernel.run_a_in_place && !trans_a && lda > 0 &&
                          (int64_t(sizeof(T)) * m * lda <= kInPlaceABytes || few_column_tiles);
  const bool a_transposed_in_place =
      kernel.run_a_transposed_in_place && trans_a && few_column_tiles;

  // The epilogue in the kernel's stores when it can, and the whole depth is one block: else a
  // pass over each stored tile (finish_tile), reading back what the kernel has just written.
  const bool finish_in_kernel =
      k <= kernel.kc && (epilogue.bias || epilogue.relu) &&
      (a_in_place ? kernel.run_a_in_place_finishing != nullptr
                  : !a_transposed_in_place && kernel.run_finishing != nullptr);

  thread_local ScratchBuffer a_scratch, b_scratch;
  const int64_t kc_max = std::min(kernel.kc, k);
  T* a_packed =
      static_cast<T*>(a_scratch.get(sizeof(T) * round_up(std::min(kernel.mc, m), mr) * kc_max));
  T* b_packed =
      static_cast<T*>(b_scratch.get(sizeof(T) * round_up(std::min(kernel.nc, n), nr) * kc_max));

  for (int64_t i0 = 0; i0 < m; i0 += kernel.mc) {
    const int64_t mc = std::min(kernel.mc, m - i0);
    for (int64_t p0 = 0; p0 < k; p0 += kernel.kc) {
      const int64_t kc = std::min(kernel.kc, k - p0);
      const T beta_block = p0 == 0 ? beta : T(1);
      if (!a_in_place && !a_transposed_in_place)
        pack_panels(a + i0 * a_row + p0 * a_depth, a_row, a_depth, mc, kc, mr, a_packed,
                    kernel.pack_transposed);
      for (int64_t j0 = 0; j0 < n; j0 += kernel.nc) {
        const int64_t nc = std::min(kernel.nc, n - j0);
        // In place, only a ragged last panel (which the kernel would read past) is packed.
        const int64_t packed_from = b_in_place ? nc / nr * nr : 0;
        if (packed_from < nc)
          pack_panels(b + (j0 + packed_from) * b_col + p0 * b_depth, b_col, b_depth,
                      nc - packed_from, kc, nr, b_packed, kernel.pack_transposed);
        for (int64_t ir = 0; ir < mc; ir += mr) {
          const T* a_panel = a_packed + ir * kc;
          const int64_t rows = std::min<int64_t>(mr, mc - ir);
          for (int64_t jr = 0; jr < nc; jr += nr) {
            const bool in_place = jr < packed_from;
            const T* b_panel =
                in_place ? b + p0 * ldb + j0 + jr : b_packed + (jr - packed_from) * kc;
            const int64_t cols = std::min<int64_t>(nr, nc - jr);
            T* c_tile = c + (i0 + ir) * ldc + j0 + jr;
            if (finish_in_kernel) {
              const T* bias = epilogue.bias ? epilogue.bias + j0 + jr : nullptr;
              if (a_in_place)
                kernel.run_a_in_place_finishing(kc, a + (i0 + ir) * lda + p0, lda, b_panel,
                                                in_place ? ldb : nr, c_tile, ldc, alpha, beta_block,
                                                int(rows), int(cols), bias, epilogue.relu);
              else
                kernel.run_finishing(kc, a_panel, b_panel, in_place ? ldb : nr, c_tile, ldc, alpha,
                                     beta_block, int(rows), int(cols), bias, epilogue.relu);
              continue;
            }
            if (a_in_place)
              kernel.run_a_in_place(kc, a + (i0 + ir) * lda + p0, lda, b_panel, in_place ? ldb : nr,
                                    c_tile, ldc, alpha, beta_block, int(rows), int(cols));
            else if (a_transposed_in_place)
              // the first row tile over a B read in place brings it in from memory
              (in_place && ir == 0 && kernel.run_a_transposed_in_place_prefetching_b
                   ? kernel.run_a_transposed_in_place_prefetching_b
                   : kernel.run_a_transposed_in_place)(kc, a + p0 * lda + i0 + ir, lda, b_panel,
                                                       in_place ? ldb : nr, c_tile, ldc, alpha,
                                                       beta_block, int(rows), int(cols));
            else
              kernel.run(kc, a_panel, b_panel, in_place ? ldb : nr, c_tile, ldc, alpha, beta_block,
                         int(rows), int(cols));
            // while the tile just stored is in L1
            finish_tile(epilogue, j0 + jr, p0 == 0, p0 + kc >= k, rows, cols, c_tile, ldc);
          }
        }
      }
    }
  }
}

template void gemm_packed<float>(const GemmMicrokernel<float>&, bool, bool, int64_t, int64_t,
                                 int64_t, float, const float*, int64_t, const float*, int64_t,
                                 float, float*, int64_t, GemmEpilogue<float>);
template void gemm_packed<double>(const GemmMicrokernel<double>&, bool, bool, int64_t, int64_t,
                                  int64_t, double, const double*, int64_t, const double*, int64_t,
                                  double, double*, int64_t, GemmEpilogue<double>);

}  // namespace qkv::cpu
