// The sums over the middle axis of a contiguous [outer, reduced, inner] block, of any term of the
// element's flat index: reduce's sum (the term is the element) and product_sum (the term is a
// product) share them, so the two add the same values in the same order. Also the blocks the other
// middle-axis kernels (amax over channels, mean_amax, their gradients) walk, and the two walks
// mean_amax and CBAM's mean_amax_scaled share (the mean and maximum, the count of hits), so the
// scaled one reads the products exactly as the plain one reads the values.
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <vector>

#include "engine/cpu/lane_sum.h"
#include "engine/cpu/prefetch.h"
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

// A run's values as the walks below read them, row by row (run = o * reduced + r): the elements
// as stored, or each times its run's factor, rounded as mul rounds it (CBAM's passes with the
// channel weights folded in, cbam_kernels.cpp). row(run) gives the row's map, its factor loaded
// once.
template <typename T>
struct AsStored {
  auto row(int64_t) const {
    return [](T v) { return v; };
  }
};
template <typename T>
struct TimesRunFactor {
  const T* factor;  // one per run
  auto row(int64_t run) const {
    const T f = factor[run];
    return [f](T v) { return T(v * f); };
  }
};

// out [outer, 2, inner] (inner > 1) = the mean and the maximum of each run of values, from one
// read of x: the sum in double, r in order (as sum_middle_axis adds it), times 1 / reduced rounded
// to T; the maximum NaN propagating, r in order (as extreme_values finds it).
template <typename T, typename Value>
void mean_and_max_over_middle(const T* xp, int64_t outer, int64_t reduced, int64_t inner, T* out,
                              Value value) {
  const T scale = T(1.0 / double(reduced));  // mean = T(sum) * scale, as mul by a scalar rounds
  const int64_t grain = std::max<int64_t>(1, 64 / reduced);
  for_each_middle_axis_block(outer, inner, grain, [&](int64_t o, int64_t i0, int64_t n) {
    double sums[kMiddleAxisBlock];
    T best[kMiddleAxisBlock];
    const T* base = xp + o * reduced * inner + i0;
    prefetch_for_reading(base + inner, n);
    const auto first = value.row(o * reduced);
    for (int64_t i = 0; i < n; ++i) {
      const T v = first(base[i]);
      sums[i] = 0.0 + double(v), best[i] = v;
    }
    for (int64_t r = 1; r < reduced; ++r) {
      const T* row = base + r * inner;
      prefetch_for_reading(row + inner, n);
      const auto at = value.row(o * reduced + r);
      _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {
        const T v = at(row[i]);
        sums[i] += double(v);
        best[i] = (v > best[i] || v != v) ? v : best[i];
      }
    }
    T* mean = out + 2 * o * inner + i0;
    for (int64_t i = 0; i < n; ++i) mean[i] = T(sums[i]) * scale, mean[inner + i] = best[i];
  });
}

// count[i] = how many of the `reduced` rows from base, inner apart, hold m[i] at i (i < n), the
// rows' values as value.row(first_run + r) gives them: exact in T, as the composed formula's sum
// of hits is.
template <typename T, typename Value = AsStored<T>>
void count_hits(const T* base, const T* m, int64_t reduced, int64_t inner, int64_t n, T* count,
                Value value = {}, int64_t first_run = 0) {
  std::fill(count, count + n, T(0));
  for (int64_t r = 0; r < reduced; ++r) {
    const T* row = base + r * inner;
    prefetch_for_reading(row + inner, n);
    const auto at = value.row(first_run + r);
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) count[i] += T(at(row[i]) == m[i]);
  }
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
