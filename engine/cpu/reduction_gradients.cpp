// Gradient kernels of reductions over the middle axis of a contiguous [outer, reduced, inner]
// block, each one pass where the composed formula (engine/reduction_gradients_default.cpp) takes
// four or five full-size ones:
//
//   extreme_backward   gx = hit * (gy / count): a count pass over the run, then a write pass
//   product_sum        out = sum over the run of a * b, without the product written out
//   mul_gradients      mul's gradients for a broadcast factor: gy * factor and product_sum's sum
//
// Each gives the composed formula's values bit for bit: the same float operations on the same
// values (the count exact, gy / count once per run; each product rounded to T, then summed by
// reduce's own loops, sum_middle_axis).
#include <algorithm>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/middle_axis_sum.h"
#include "engine/cpu/prefetch.h"
#include "engine/dispatch.h"
#include "engine/parallel.h"

namespace qkv::cpu {

namespace {

// Runs of `reduced` values a block of kMiddleAxisBlock positions wide: the counts and the
// gradients stay in L1, the block's rows in L2 for the write pass (64 KB at 16 channels). The
// grain: a few thousand values a task.
constexpr int64_t kBlock = kMiddleAxisBlock;

int64_t grain_for(int64_t values_per_item) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(values_per_item, 1));
}

template <typename T>
void extreme_gradient_rows(const T* x, const T* kept, const T* gy, T* gx, int64_t outer,
                           int64_t reduced, int64_t inner) {
  if (inner == 1) {  // amax over trailing dims: each run is one contiguous row
    parallel_for(0, outer, grain_for(reduced), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* row = x + o * reduced;
        T* out = gx + o * reduced;
        const T m = kept[o];
        int64_t count = 0;
        _Pragma("omp simd reduction(+ : count)") for (int64_t r = 0; r < reduced; ++r) count +=
            row[r] == m;
        // T(0) * inf is NaN: a run whose extreme is NaN (count 0) gets NaN, as the formula's
        const T g = gy[o] / T(count);
        _Pragma("omp simd") for (int64_t r = 0; r < reduced; ++r) out[r] = T(row[r] == m) * g;
      }
    });
    return;
  }
  // amax over channels: each run strides by inner; a block of positions goes row by row
  auto block = [&](int64_t o, int64_t i0, int64_t n) {
    T count[kBlock], g[kBlock];
    const T* m = kept + o * inner + i0;
    const T* base = x + o * reduced * inner + i0;
    T* out = gx + o * reduced * inner + i0;
    count_hits(base, m, reduced, inner, n, count);
    const T* gyo = gy + o * inner + i0;
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) g[i] = gyo[i] / count[i];
    for (int64_t r = 0; r < reduced; ++r) {
      const T* row = base + r * inner;
      T* dst = out + r * inner;
      _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) dst[i] = T(row[i] == m[i]) * g[i];
    }
  };
  for_each_middle_axis_block(outer, inner, grain_for(reduced * kBlock), block);
}

// mean_amax's gradient: mean's share, gy_mean * (1 / reduced), plus extreme_gradient_rows' hit *
// (gy_max / count), written once, or with Accumulate added to gx (gx + gradient, as the backward
// sweep adds a sum). gy and out are [outer, 2, inner]: the means' row, then the maxima's.
template <typename T, bool Accumulate>
void mean_amax_gradient_rows(const T* x, const T* out, const T* gy, T* gx, int64_t outer,
                             int64_t reduced, int64_t inner) {
  const T scale = T(1.0 / double(reduced));  // as mul(gy, 1.0 / reduced) rounds it
  if (inner == 1) {  // over trailing dims (CBAM's channel pooling): one contiguous row a run
    parallel_for(0, outer, grain_for(reduced), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* row = x + o * reduced;
        T* dst = gx + o * reduced;
        const T m = out[2 * o + 1];
        // the next row's lines (to write, only the task's own, as in mul_gradient_rows)
        prefetch_for_reading(row + reduced, reduced);
        if (o + 1 < e) prefetch_for_writing(dst + reduced, reduced);
        int64_t count = 0;
        _Pragma("omp simd reduction(+ : count)") for (int64_t r = 0; r < reduced; ++r) count +=
            row[r] == m;
        const T g = gy[2 * o + 1] / T(count), g_mean = gy[2 * o] * scale;
        _Pragma("omp simd") for (int64_t r = 0; r < reduced; ++r) {
          const T v = g_mean + T(row[r] == m) * g;
          dst[r] = Accumulate ? dst[r] + v : v;
        }
      }
    });
    return;
  }
  // over channels (CBAM's spatial pooling): a block of positions row by row
  auto block = [&](int64_t o, int64_t i0, int64_t n) {
    T count[kBlock], g[kBlock], g_mean[kBlock];
    const T* mean_gy = gy + 2 * o * inner + i0;
    const T* max_gy = mean_gy + inner;
    const T* m = out + 2 * o * inner + inner + i0;
    const T* base = x + o * reduced * inner + i0;
    T* dst = gx + o * reduced * inner + i0;
    count_hits(base, m, reduced, inner, n, count);
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {
      g[i] = max_gy[i] / count[i];
      g_mean[i] = mean_gy[i] * scale;
    }
    for (int64_t r = 0; r < reduced; ++r) {
      const T* row = base + r * inner;
      T* to = dst + r * inner;
      // not past the block's last row: the next image's may be the other thread's to write
      if (r + 1 < reduced) prefetch_for_writing(to + inner, n);
      _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {
        const T v = g_mean[i] + T(row[i] == m[i]) * g[i];
        to[i] = Accumulate ? to[i] + v : v;
      }
    }
  };
  for_each_middle_axis_block(outer, inner, grain_for(reduced * kBlock), block);
}

// mul's two gradients for a factor broadcast along the middle axis, from one read of gy: g_full =
// gy * factor, and g_factor = the sum over the run of T(gy * full), added as sum_middle_axis adds
// product_sum's terms (lane_sum along a contiguous run with inner 1, else r in order per
// position from 0.0).
template <typename T>
void mul_gradient_rows(const T* gy, const T* full, const T* factor, T* g_full, T* g_factor,
                       int64_t outer, int64_t reduced, int64_t inner) {
  if (inner == 1) {  // a [B, C, 1, 1] factor: a run is a row of H * W, read again from L1
    parallel_for(0, outer, grain_for(reduced), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) {
        const T* g = gy + o * reduced;
        const T* x = full + o * reduced;
        T* dst = g_full + o * reduced;
        const T f = factor[o];
        // the next row's lines, as the middle-axis walks below ask for theirs (to write, only
        // the task's own: past them the rows may be another thread's to write)
        prefetch_for_reading(g + reduced, reduced);
        prefetch_for_reading(x + reduced, reduced);
        if (o + 1 < e) prefetch_for_writing(dst + reduced, reduced);
        _Pragma("omp simd") for (int64_t r = 0; r < reduced; ++r) dst[r] = g[r] * f;
        g_factor[o] =
            T(lane_sum<double>(reduced, [g, x](int64_t r) { return double(T(g[r] * x[r])); }));
      }
    });
    return;
  }
  // a [B, 1, H, W] factor: a block of positions row by row, the sums in L1
  auto block = [&](int64_t o, int64_t i0, int64_t n) {
    double sums[kBlock];
    std::fill(sums, sums + n, 0.0);
    const T* f = factor + o * inner + i0;
    for (int64_t r = 0; r < reduced; ++r) {
      const int64_t at = (o * reduced + r) * inner + i0;
      const T* g = gy + at;
      const T* x = full + at;
      T* dst = g_full + at;
      prefetch_for_reading(g + inner, n);
      prefetch_for_reading(x + inner, n);
      if (r + 1 < reduced) prefetch_for_writing(dst + inner, n);  // not the next image's
      _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {
        dst[i] = g[i] * f[i];
        sums[i] += double(T(g[i] * x[i]));
      }
    }
    T* out = g_factor + o * inner + i0;
    for (int64_t i = 0; i < n; ++i) out[i] = T(sums[i]);
  };
  for_each_middle_axis_block(outer, inner, grain_for(reduced * kBlock), block);
}

}  // namespace

void CpuBackend::mul_gradients(const Tensor& gy, const Tensor& full, const Tensor& factor,
                               const Tensor& g_full, const Tensor& g_factor) {
  const int64_t outer = gy.size(0), reduced = gy.size(1), inner = gy.size(2);
  // a whole tensor's column sums go in halves (sums_rows_in_halves), an order of their own
  if (outer == 1 && sums_rows_in_halves(reduced, inner))
    return Backend::mul_gradients(gy, full, factor, g_full, g_factor);
  QKV_DISPATCH_FLOAT(gy.dtype(), "mul_gradients", [&] {
    mul_gradient_rows(gy.data<T>(), full.data<T>(), factor.data<T>(), g_full.data<T>(),
                      g_factor.data<T>(), outer, reduced, inner);
  });
}

void CpuBackend::mean_amax_backward(const Tensor& x, const Tensor& out, const Tensor& gy,
                                    const Tensor& gx, bool accumulate) {
  QKV_DISPATCH_FLOAT(x.dtype(), "mean_amax_backward", [&] {
    const auto rows =
        accumulate ? mean_amax_gradient_rows<T, true> : mean_amax_gradient_rows<T, false>;
    rows(x.data<T>(), out.data<T>(), gy.data<T>(), gx.data<T>(), x.size(0), x.size(1), x.size(2));
  });
}

void CpuBackend::extreme_backward(const Tensor& x, const Tensor& kept, const Tensor& gy,
                                  const Tensor& gx) {
  QKV_DISPATCH_FLOAT(x.dtype(), "extreme_backward", [&] {
    extreme_gradient_rows(x.data<T>(), kept.data<T>(), gy.data<T>(), gx.data<T>(), x.size(0),
                          x.size(1), x.size(2));
  });
}

void CpuBackend::product_sum(const Tensor& a, const Tensor& b, const Tensor& out) {
  QKV_DISPATCH_FLOAT(a.dtype(), "product_sum", [&] {
    const T* ap = a.data<T>();
    const T* bp = b.data<T>();
    // each product rounded to T, as mul writes it, then summed as reduce sums
    sum_middle_axis(
        a.size(0), a.size(1), a.size(2), [ap, bp](int64_t at) { return T(ap[at] * bp[at]); },
        out.data<T>());
  });
}

}  // namespace qkv::cpu
