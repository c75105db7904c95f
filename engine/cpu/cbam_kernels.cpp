// CBAM's passes with the channel weights folded in (Backend::mean_amax_scaled, mul3 and their
// gradients), on x [outer, reduced, inner] with a factor per run, scale [outer, reduced], and with
// mul3 a factor per position, spatial [outer, inner].
//
// CBAM computes y = x * cw, pools y over the channels, and returns y * sw. Written as ops, y is a
// full-size tensor written once and read twice, and in the backward its gradient is written,
// read and added to again. Here the product x * cw is taken where it is needed, value by value,
// from x and one factor a run: the forward reads x twice (the pool, the output) where the ops read
// x, wrote y and read y twice; each backward reads its gradient and x from memory once (the
// pool's gradient reads an image's x twice, the second time from L2).
//
// Each gives the composed formulas' bits (the defaults in engine/reduction_gradients_default.cpp,
// which are the ops' own sequence): every product rounded to T as mul writes it, the sums over
// the channels in double and in order per position as sum_middle_axis adds them, the sums over a
// run in lane_sum's order as mul's gradient for a [N, C, 1, 1] factor adds them.
#include <algorithm>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/lane_sum.h"
#include "engine/cpu/middle_axis_sum.h"
#include "engine/cpu/prefetch.h"
#include "engine/dispatch.h"
#include "engine/parallel.h"

namespace qkv::cpu {

namespace {

constexpr int64_t kBlock = kMiddleAxisBlock;

// The kernels walk an image's channels over all of its positions at once, the per-position sums in
// L1, and take a run's sum over its whole row: a row longer than a block, or a layout whose
// composed sums take another order (a row of one value, a whole tensor's column sums in halves:
// sums_rows_in_halves), goes to the defaults.
bool kernels_take(int64_t outer, int64_t reduced, int64_t inner) {
  return inner > 1 && inner <= kBlock && !(outer == 1 && sums_rows_in_halves(reduced, inner));
}

int64_t images_per_task(int64_t reduced, int64_t inner) {
  return std::max<int64_t>(1, 16384 / std::max<int64_t>(reduced * inner, 1));
}

// gx (= or, with Accumulate, +=) gz * scale and g_scale = the sums of gz * x over each run, gz
// being mean_amax's gradient at the products (mean_amax_gradient_rows' count pass and formula).
// The forward is mean_amax's own walk over the products (middle_axis_sum.h).
template <typename T, bool Accumulate>
void scaled_mean_amax_gradient(const T* x, const T* scale, const T* out, const T* gy, T* gx,
                               T* g_scale, int64_t outer, int64_t reduced, int64_t inner) {
  const T inv = T(1.0 / double(reduced));
  parallel_for(0, outer, images_per_task(reduced, inner), [&](int64_t b, int64_t e) {
    T count[kBlock], g[kBlock], g_mean[kBlock], gz[kBlock];
    for (int64_t o = b; o < e; ++o) {
      const T* base = x + o * reduced * inner;
      const T* s = scale + o * reduced;
      const T* mean_gy = gy + 2 * o * inner;
      const T* max_gy = mean_gy + inner;
      const T* m = out + 2 * o * inner + inner;
      count_hits(base, m, reduced, inner, inner, count, TimesRunFactor<T>{s});
      _Pragma("omp simd") for (int64_t i = 0; i < inner; ++i) {
        g[i] = max_gy[i] / count[i];
        g_mean[i] = mean_gy[i] * inv;
      }
      for (int64_t r = 0; r < reduced; ++r) {
        const T* row = base + r * inner;
        T* to = gx + (o * reduced + r) * inner;
        if (r + 1 < reduced) prefetch_for_writing(to + inner, inner);  // not the next image's
        const T sr = s[r];
        _Pragma("omp simd") for (int64_t i = 0; i < inner; ++i) {
          gz[i] = g_mean[i] + T(row[i] * sr == m[i]) * g[i];
          const T v = gz[i] * sr;
          to[i] = Accumulate ? to[i] + v : v;
        }
        g_scale[o * reduced + r] =
            T(lane_sum<double>(inner, [&](int64_t i) { return double(T(gz[i] * row[i])); }));
      }
    }
  });
}

// out = (x * scale) * spatial; with kResidual relu(residual + that), the product rounded first
// (this file is built without FMA contraction) and relu's rule on the rounded sum, as add_relu has
// it.
template <typename T, bool kResidual>
void mul3_rows(const T* x, const T* scale, const T* spatial, const T* residual, T* out,
               int64_t outer, int64_t reduced, int64_t inner) {
  parallel_for(0, outer, images_per_task(reduced, inner), [&](int64_t b, int64_t e) {
    for (int64_t o = b; o < e; ++o) {
      const T* f = spatial + o * inner;
      for (int64_t r = 0; r < reduced; ++r) {
        const int64_t at = (o * reduced + r) * inner;
        const T* row = x + at;
        T* to = out + at;
        prefetch_for_reading(row + inner, inner);
        if constexpr (kResidual) prefetch_for_reading(residual + at + inner, inner);
        if (o + 1 < e || r + 1 < reduced) prefetch_for_writing(to + inner, inner);
        const T sr = scale[o * reduced + r];
        if constexpr (kResidual) {
          const T* add = residual + at;
          _Pragma("omp simd") for (int64_t i = 0; i < inner; ++i) {
            const T v = add[i] + row[i] * sr * f[i];
            to[i] = v < T(0) ? T(0) : v;
          }
        } else {
          _Pragma("omp simd") for (int64_t i = 0; i < inner; ++i) to[i] = row[i] * sr * f[i];
        }
      }
    }
  });
}

// With g1 = gy * spatial: gx = g1 * scale, g_scale = the sums of g1 * x over each run (lane_sum),
// g_spatial = the sums of gy * (x * scale) over the channels (in double, in order).
template <typename T>
void mul3_gradient(const T* gy, const T* x, const T* scale, const T* spatial, T* gx, T* g_scale,
                   T* g_spatial, int64_t outer, int64_t reduced, int64_t inner) {
  parallel_for(0, outer, images_per_task(reduced, inner), [&](int64_t b, int64_t e) {
    double sums[kBlock];
    T g1[kBlock];
    for (int64_t o = b; o < e; ++o) {
      const T* f = spatial + o * inner;
      std::fill(sums, sums + inner, 0.0);
      for (int64_t r = 0; r < reduced; ++r) {
        const int64_t at = (o * reduced + r) * inner;
        const T* g = gy + at;
        const T* row = x + at;
        T* to = gx + at;
        prefetch_for_reading(g + inner, inner);
        prefetch_for_reading(row + inner, inner);
        if (o + 1 < e || r + 1 < reduced) prefetch_for_writing(to + inner, inner);
        const T sr = scale[o * reduced + r];
        _Pragma("omp simd") for (int64_t i = 0; i < inner; ++i) {
          g1[i] = g[i] * f[i];
          to[i] = g1[i] * sr;
          const T product = row[i] * sr;
          sums[i] += double(T(g[i] * product));
        }
        g_scale[o * reduced + r] =
            T(lane_sum<double>(inner, [&](int64_t i) { return double(T(g1[i] * row[i])); }));
      }
      T* to = g_spatial + o * inner;
      for (int64_t i = 0; i < inner; ++i) to[i] = T(sums[i]);
    }
  });
}

}  // namespace

void CpuBackend::mean_amax_scaled(const Tensor& x, const Tensor& scale, const Tensor& out) {
  const int64_t outer = x.size(0), reduced = x.size(1), inner = x.size(2);
  if (!kernels_take(outer, reduced, inner)) return Backend::mean_amax_scaled(x, scale, out);
  QKV_DISPATCH_FLOAT(x.dtype(), "mean_amax_scaled", [&] {
    mean_and_max_over_middle(x.data<T>(), outer, reduced, inner, out.data<T>(),
                             TimesRunFactor<T>{scale.data<T>()});
  });
}

void CpuBackend::mean_amax_scaled_backward(const Tensor& x, const Tensor& scale, const Tensor& out,
                                           const Tensor& gy, const Tensor& gx,
                                           const Tensor& g_scale, bool accumulate) {
  const int64_t outer = x.size(0), reduced = x.size(1), inner = x.size(2);
  if (!kernels_take(outer, reduced, inner))
    return Backend::mean_amax_scaled_backward(x, scale, out, gy, gx, g_scale, accumulate);
  QKV_DISPATCH_FLOAT(x.dtype(), "mean_amax_scaled_backward", [&] {
    const auto gradient =
        accumulate ? scaled_mean_amax_gradient<T, true> : scaled_mean_amax_gradient<T, false>;
    gradient(x.data<T>(), scale.data<T>(), out.data<T>(), gy.data<T>(), gx.data<T>(),
             g_scale.data<T>(), outer, reduced, inner);
  });
}

void CpuBackend::mul3(const Tensor& x, const Tensor& scale, const Tensor& spatial,
                      const Tensor& out) {
  const int64_t outer = x.size(0), reduced = x.size(1), inner = x.size(2);
  QKV_DISPATCH_FLOAT(x.dtype(), "mul3", [&] {
    mul3_rows<T, false>(x.data<T>(), scale.data<T>(), spatial.data<T>(), nullptr, out.data<T>(),
                        outer, reduced, inner);
  });
}

void CpuBackend::mul3_add_relu(const Tensor& residual, const Tensor& x, const Tensor& scale,
                               const Tensor& spatial, const Tensor& out) {
  const int64_t outer = x.size(0), reduced = x.size(1), inner = x.size(2);
  QKV_DISPATCH_FLOAT(x.dtype(), "mul3_add_relu", [&] {
    mul3_rows<T, true>(x.data<T>(), scale.data<T>(), spatial.data<T>(), residual.data<T>(),
                       out.data<T>(), outer, reduced, inner);
  });
}

void CpuBackend::mul3_backward(const Tensor& gy, const Tensor& x, const Tensor& scale,
                               const Tensor& spatial, const Tensor& gx, const Tensor& g_scale,
                               const Tensor& g_spatial) {
  const int64_t outer = x.size(0), reduced = x.size(1), inner = x.size(2);
  if (!kernels_take(outer, reduced, inner))
    return Backend::mul3_backward(gy, x, scale, spatial, gx, g_scale, g_spatial);
  QKV_DISPATCH_FLOAT(x.dtype(), "mul3_backward", [&] {
    mul3_gradient(gy.data<T>(), x.data<T>(), scale.data<T>(), spatial.data<T>(), gx.data<T>(),
                  g_scale.data<T>(), g_spatial.data<T>(), outer, reduced, inner);
  });
}

}  // namespace qkv::cpu
