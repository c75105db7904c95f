// Reductions over the middle axis of a contiguous [outer, reduced, inner] tensor, and the mean and
// maximum together (mean_amax) from one read.
#include <algorithm>
#include <limits>
#include <utility>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/middle_axis_sum.h"
#include "engine/cpu/prefetch.h"
#include "engine/dispatch.h"
#include "engine/parallel.h"

namespace qkv::cpu {

namespace {

// v where v > best or v is NaN: one rule for lanes (vector values) and for single values. v > best
// is false against a NaN best, so once NaN a maximum stays NaN.
constexpr auto take_larger = [](auto best, auto v) { return (v > best) | (v != v) ? v : best; };

// The largest of sign * row[r] for r < n, NaN if any is NaN, kept in sixteen lanes as lane_sum
// keeps its sums (an `omp simd` max reduction is not vectorized by GCC inside the dispatch
// macro's lambda: CBAM's amax over H * W ran at a fifth of sum's speed), each by take_larger, and
// the lanes combined by it too.
template <typename T>
T signed_row_max(const T* row, int64_t n, T sign) {
  constexpr int kLanes = 16;
  // one vector value of sixteen lanes (GCC's and clang's vector extension); as an array the lanes
  // went through memory at every step, slower than the scalar loop
  typedef T Lanes __attribute__((vector_size(kLanes * sizeof(T))));
  constexpr auto take = take_larger;
  auto load = [&](int64_t at) {
    Lanes v;
    __builtin_memcpy(&v, row + at, sizeof v);
    return v * sign;
  };
  // four independent vectors of lanes, then one: with a single one every step would wait on the
  // step before it
  const Lanes lowest = Lanes{} - std::numeric_limits<T>::infinity();
  Lanes l0 = lowest, l1 = lowest, l2 = lowest, l3 = lowest;
  int64_t r = 0;
  for (; r + 4 * kLanes <= n; r += 4 * kLanes) {
    l0 = take(l0, load(r));
    l1 = take(l1, load(r + kLanes));
    l2 = take(l2, load(r + 2 * kLanes));
    l3 = take(l3, load(r + 3 * kLanes));
  }
  Lanes lanes = take(take(l0, l1), take(l2, l3));
  for (; r + kLanes <= n; r += kLanes) lanes = take(lanes, load(r));
  // the lanes combined pairwise (lane_sum's order), by the same rule: four vector steps where
  // fifteen dependent scalar ones cost more than the row's loads at 7 x 7
  T best = combine_lanes_pairwise<T>(lanes, take);
  for (; r < n; ++r) best = take(best, sign * row[r]);
  return best;
}

// lane_sum<double> of a row and its signed_row_max (sign 1) from one read: each vector of the row
// goes to both, which keep their own orders (the sums lane by lane, block after block, the tail
// into lane 0, then pairwise; the maxima in four vectors, then one, pairwise, then the tail), so
// both are the same bits, down to which of -0 and +0 a row's maximum is.
template <typename T>
std::pair<double, T> row_sum_and_max(const T* row, int64_t n) {
  constexpr int kLanes = 16;
  typedef T Lanes __attribute__((vector_size(kLanes * sizeof(T))));
  // The sums' sixteen lanes as two vectors of eight, lanes 0-7 and 8-15: as one vector value of
  // sixteen doubles GCC kept them on the stack, stored in halves and loaded whole, which the store
  // buffer cannot forward (a 7 x 7 plane's rows took three times their sum and maximum apart).
  typedef double Sums __attribute__((vector_size(kLanes / 2 * sizeof(double))));
  constexpr auto take = take_larger;
  auto load = [&](int64_t at) {
    Lanes v;
    __builtin_memcpy(&v, row + at, sizeof v);
    return v;
  };
  Sums low = {}, high = {};
  auto add = [&](Lanes v) {
    low += __builtin_convertvector(__builtin_shufflevector(v, v, 0, 1, 2, 3, 4, 5, 6, 7), Sums);
    high +=
        __builtin_convertvector(__builtin_shufflevector(v, v, 8, 9, 10, 11, 12, 13, 14, 15), Sums);
  };
  const Lanes lowest = Lanes{} - std::numeric_limits<T>::infinity();
  Lanes l0 = lowest, l1 = lowest, l2 = lowest, l3 = lowest;
  int64_t r = 0;
  for (; r + 4 * kLanes <= n; r += 4 * kLanes) {
    const Lanes v0 = load(r), v1 = load(r + kLanes), v2 = load(r + 2 * kLanes),
                v3 = load(r + 3 * kLanes);
    add(v0), add(v1), add(v2), add(v3);
    l0 = take(l0, v0), l1 = take(l1, v1), l2 = take(l2, v2), l3 = take(l3, v3);
  }
  Lanes lanes = take(take(l0, l1), take(l2, l3));
  for (; r + kLanes <= n; r += kLanes) {
    const Lanes v = load(r);
    add(v);
    lanes = take(lanes, v);
  }
  for (int64_t c = r; c < n; ++c) low[0] += double(row[c]);
  // combine_lanes_pairwise's order, whose first step adds lane l + 8 to lane l
  const double sum =
      combine_halves_pairwise<double>(low + high, [](auto a, auto b) { return a + b; });
  T best = combine_lanes_pairwise<T>(lanes, take);
  for (; r < n; ++r) best = take(best, row[r]);
  return {sum, best};
}

// max or min over the middle axis, NaN propagating (any NaN makes the result NaN), vectorized:
// with inner == 1 (amax over trailing dims) along each contiguous row (signed_row_max);
// otherwise across a block of the contiguous inner axis (amax over channels), comparing row after
// row, with the same NaN rule.
template <typename T>
void extreme_values(const T* xp, int64_t outer, int64_t reduced, int64_t inner, bool is_max,
                    T* out) {
  const T sign = is_max ? T(1) : T(-1);  // min(x) = -max(-x): one loop for both
  if (inner == 1) {
    parallel_for(0, outer, std::max<int64_t>(1, 16384 / std::max<int64_t>(reduced, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t o = b; o < e; ++o)
                     out[o] = sign * signed_row_max(xp + o * reduced, reduced, sign);
                 });
    return;
  }
  const int64_t grain = std::max<int64_t>(1, 64 / std::max<int64_t>(reduced, 1));
  for_each_middle_axis_block(outer, inner, grain, [&](int64_t o, int64_t i0, int64_t n) {
    T best[kMiddleAxisBlock];
    const T* base = xp + o * reduced * inner + i0;
    prefetch_for_reading(base + inner, n);
    for (int64_t i = 0; i < n; ++i) best[i] = sign * base[i];
    for (int64_t r = 1; r < reduced; ++r) {
      const T* row = base + r * inner;
      prefetch_for_reading(row + inner, n);
      _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {
        const T v = sign * row[i];
        best[i] = (v > best[i] || v != v) ? v : best[i];
      }
    }
    T* dst = out + o * inner + i0;
    for (int64_t i = 0; i < n; ++i) dst[i] = sign * best[i];
  });
}

// out [outer, 2, inner] = the mean and the maximum of each run, from one read of x: the sum as
// sum_middle_axis adds it (in double, r in order), the maximum as extreme_values finds it.
template <typename T>
void mean_and_max(const T* xp, int64_t outer, int64_t reduced, int64_t inner, T* out) {
  const T scale = T(1.0 / double(reduced));  // mean = T(sum) * scale, as mul by a scalar rounds
  if (inner == 1) {                          // the run is a row
    parallel_for(0, outer, std::max<int64_t>(1, 16384 / reduced), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        prefetch_for_reading(xp + (o + 1) * reduced, reduced);  // the next row's lines
        const auto [sum, max] = row_sum_and_max(xp + o * reduced, reduced);
        out[2 * o] = T(sum) * scale;
        out[2 * o + 1] = max;
      }
    });
    return;
  }
  mean_and_max_over_middle(xp, outer, reduced, inner, out, AsStored<T>());
}

}  // namespace

void CpuBackend::mean_amax(const Tensor& x, const Tensor& out) {
  const int64_t outer = x.size(0), reduced = x.size(1), inner = x.size(2);
  // a whole tensor's column sums go in halves (sums_rows_in_halves), an order of their own
  if (outer == 1 && sums_rows_in_halves(reduced, inner)) return Backend::mean_amax(x, out);
  QKV_DISPATCH_FLOAT(x.dtype(), "mean_amax",
                     [&] { mean_and_max(x.data<T>(), outer, reduced, inner, out.data<T>()); });
}

void CpuBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  const int64_t outer = x.size(0), reduced = x.size(1), inner = x.size(2);
  QKV_DISPATCH_ALL(x.dtype(), "reduce", [&] {
    const T* xp = x.data<T>();
    if (op == ReduceOp::sum)
      return sum_middle_axis(
          outer, reduced, inner, [xp](int64_t at) { return xp[at]; }, out.data<T>());
    const bool is_max = op == ReduceOp::max || op == ReduceOp::argmax;
    const bool want_index = op == ReduceOp::argmax || op == ReduceOp::argmin;
    if constexpr (std::is_floating_point_v<T>) {
      if (!want_index) {
        extreme_values(xp, outer, reduced, inner, is_max, out.data<T>());
        return;
      }
    }
    parallel_for(0, outer * inner, std::max<int64_t>(1, 16384 / std::max<int64_t>(reduced, 1)),
                 [&](int64_t b, int64_t e) {
                   for (int64_t idx = b; idx < e; ++idx) {
                     int64_t o = idx / inner, i = idx % inner;
                     const T* p = xp + o * reduced * inner + i;
                     T best = p[0];
                     int64_t best_r = 0;
                     for (int64_t r = 1; r < reduced; ++r) {
                       T v = p[r * inner];
                       // NaN propagates: once best is NaN it stays; a NaN v replaces best.
                       bool better = is_max ? (v > best) : (v < best);
                       if (better || (v != v && best == best)) best = v, best_r = r;
                     }
                     if (want_index)
                       out.data<int64_t>()[idx] = best_r;
                     else
                       out.data<T>()[idx] = best;
                   }
                 });
  });
}

}  // namespace qkv::cpu
