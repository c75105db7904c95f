// The sums over the middle axis of a contiguous [outer, reduced, inner] block, of any term of the
// element's flat index: reduce's sum (the term is the element) and product_sum (the term is a
// product) share them, so the two add the same values in the same order. Also the blocks the other
// middle-axis kernels (amax over channels, mean_amax, their gradients) walk.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine/cpu/lane_sum.h"
#include "engine/parallel.h"

namespace qkv::cpu {

// How many positions of the inner axis the max and the extremum's gradient over a middle axis
// (amax over channels) walk at a time, their per-position state in L1: as many as a 28 x 28
// plane, so that an image's [reduced, inner] values are read in memory order. Narrower blocks
// jump a plane ahead every block, a pattern the hardware prefetchers do not follow. Even in memory
// order they do not keep up with these walks: each row asks for the next one (prefetch.h).
constexpr int64_t kMiddleAxisBlock = 1024;

// Calls visit(o, i0, n) for each block of n <= kMiddleAxisBlock inner positions starting at i0,
// of each of the outer runs: the blocks go to the threads `grain` at a time.
template <typename Visit>
void for_each_middle_axis_block(int64_t outer, int64_t inner, int64_t grain, Visit visit) {
  const int64_t blocks = (inner + kMiddleAxisBlock - 1) / kMiddleAxisBlock;
  parallel_for(0, outer * blocks, grain, [&](int64_t b, int64_t e) {
    for (int64_t idx = b; idx < e; ++idx) {
      const int64_t o = idx / blocks, i0 = (idx % blocks) * kMiddleAxisBlock;
      visit(o, i0, std::min(kMiddleAxisBlock, inner - i0));
    }
  });
}

// Column sums of a tall [rows, columns] matrix (a bias's gradient over thousands of rows) are
// taken as two halves of the rows, in double, added after: on two threads each reads the rows
// that the row-split kernels before it left in its own cache, as the weight's gradient does
// (gemm.cpp, gemm_depth_halves). Splitting the columns instead has each thread read every row.
// The halves are summed the same way at any thread count, so the result has the same bits.
// Only rows of at least 16 columns (one vector) go there: narrower ones take the loops below,
// inner == 1 (a whole tensor's sum) in lane_sum's vector lanes.
inline bool sums_rows_in_halves(int64_t rows, int64_t columns) {
  return columns >= 16 && rows >= 4 * columns && rows * columns >= 32768;
}

// out[o * inner + i] = the sum over r of term((o * reduced + r) * inner + i), accumulated in double
// for floating T (a long float32 row loses no precision), in int64 otherwise.
template <typename T, typename Term>
void sum_middle_axis(int64_t outer, int64_t reduced, int64_t inner, Term term, T* out) {
  using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
  if constexpr (std::is_floating_point_v<T>) {
    if (outer == 1 && sums_rows_in_halves(reduced, inner)) {
      std::vector<double> half_sums[2];
      const int64_t half = (reduced + 1) / 2;
      parallel_for(0, 2, 1, [&](int64_t h0, int64_t h1) {
        for (int64_t h = h0; h < h1; ++h) {
          // Each half sums into its own thread's allocation: the sums are read and written once
          // per row, and a cache line shared with the other half would travel between the cores
          // as often.
          std::vector<double> acc(size_t(inner), 0.0);
          for (int64_t r = h * half; r < std::min(reduced, (h + 1) * half); ++r) {
            _Pragma("omp simd") for (int64_t i = 0; i < inner; ++i) acc[i] +=
                double(term(r * inner + i));
          }
          half_sums[h] = std::move(acc);
        }
      });
      for (int64_t i = 0; i < inner; ++i) out[i] = T(half_sums[0][i] + half_sums[1][i]);
      return;
    }
  }
  parallel_for(0, outer * inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(reduced, 1)),
               [&](int64_t b, int64_t e) {
                 if (inner == 1) {
                   for (int64_t o = b; o < e; ++o) {
                     if constexpr (std::is_floating_point_v<T>) {
                       // sixteen double lanes: a single running sum would wait on each add
                       out[o] = T(lane_sum<double>(
                           reduced, [&](int64_t r) { return double(term(o * reduced + r)); }));
                     } else {
                       Acc acc = 0;
                       for (int64_t r = 0; r < reduced; ++r) acc += term(o * reduced + r);
                       out[o] = T(acc);
                     }
                   }
                   return;
                 }
                 std::vector<Acc> acc;
                 for (int64_t idx = b; idx < e;) {
                   const int64_t o = idx / inner, i0 = idx % inner;
                   const int64_t i1 = std::min(inner, i0 + (e - idx));
                   acc.assign(size_t(i1 - i0), Acc(0));
                   for (int64_t r = 0; r < reduced; ++r) {
                     const int64_t row = (o * reduced + r) * inner;
                     for (int64_t i = i0; i < i1; ++i) acc[i - i0] += term(row + i);
                   }
                   for (int64_t i = i0; i < i1; ++i) out[o * inner + i] = T(acc[i - i0]);
                   idx += i1 - i0;
                 }
               });
}

}  // namespace qkv::cpu
