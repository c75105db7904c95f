// Batch normalization over x [N, C, S...]: each channel's values are N contiguous runs of S (the
// spatial size), so a channel's statistics are vectorized sums over those runs, in double as the
// row kernels accumulate, and the threads take whole channels (no two write the same output).
#include <immintrin.h>

// GCC 12's _mm512_reduce_add_pd passes a self-initialized "undefined" vector as an unused operand,
// which -Wmaybe-uninitialized reports wherever it is inlined (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)  // a GCC-only warning; clang would warn about the unknown name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <cmath>
#include <type_traits>

#include "engine/cpu/cpu_backend.h"
#include "engine/dispatch.h"
#include "engine/parallel.h"

namespace qkv::cpu {

namespace {

struct Layout {
  int64_t batch, channels, spatial;
  int64_t count() const { return batch * spatial; }  // values per channel
  // channels per chunk: about 16K values each, so small channels are not split one per thread
  int64_t grain() const { return std::max<int64_t>(1, 16384 / std::max<int64_t>(count(), 1)); }
};

bool cpu_has_avx512f() {
  static const bool has = __builtin_cpu_supports("avx512f");
  return has;
}

// The low and high eight floats of v as doubles.
__attribute__((target("avx512f"), always_inline)) inline __m512d low_doubles(__m512 v) {
  return _mm512_cvtps_pd(_mm512_castps512_ps256(v));
}
__attribute__((target("avx512f"), always_inline)) inline __m512d high_doubles(__m512 v) {
  return _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
}

enum class ChannelSums { values, centered_squares, grads_and_grads_times_centered };

// A float32 channel's sums over its N runs of S values (run n at a + n * stride, likewise b), on
// AVX-512: sixteen double lanes (two vectors) kept across the runs, each run's last values read
// with a mask, totalled once at the end. The `omp simd` loops below finish a reduction per run,
// which cost more than the adds for runs of 49 values (9x a plain sum of the tensor at 7 x 7).
// values: sum0 = sum of a; centered_squares: sum0 = sum of (a - mu)^2, the difference rounded to
// float as the loop below does; grads_and_grads_times_centered: sum0 = sum of a (the gradient),
// sum1 = sum of a * (b - mu). The order is fixed: the same sums at any thread count.
template <ChannelSums kind>
__attribute__((target("avx512f"))) void channel_sums_avx512(const float* a, const float* b,
                                                            int64_t stride, int64_t batch,
                                                            int64_t S, float mu, double& sum0,
                                                            double& sum1) {
  __m512d s0lo = _mm512_setzero_pd(), s0hi = s0lo, s1lo = s0lo, s1hi = s0lo;
  const __m512 m = _mm512_set1_ps(mu);
  auto add = [&](__m512 av, __m512 bv, __mmask16 lanes) {
    if constexpr (kind == ChannelSums::values) {
      s0lo = _mm512_add_pd(s0lo, low_doubles(av));
      s0hi = _mm512_add_pd(s0hi, high_doubles(av));
    } else if constexpr (kind == ChannelSums::centered_squares) {
      const __m512 d = _mm512_maskz_sub_ps(lanes, av, m);
      const __m512d lo = low_doubles(d), hi = high_doubles(d);
      s0lo = _mm512_fmadd_pd(lo, lo, s0lo);
      s0hi = _mm512_fmadd_pd(hi, hi, s0hi);
    } else {
      const __m512 d = _mm512_maskz_sub_ps(lanes, bv, m);
      const __m512d glo = low_doubles(av), ghi = high_doubles(av);
      s0lo = _mm512_add_pd(s0lo, glo);
      s0hi = _mm512_add_pd(s0hi, ghi);
      s1lo = _mm512_fmadd_pd(glo, low_doubles(d), s1lo);
      s1hi = _mm512_fmadd_pd(ghi, high_doubles(d), s1hi);
    }
  };
  constexpr bool two = kind == ChannelSums::grads_and_grads_times_centered;
  for (int64_t n = 0; n < batch; ++n) {
    const float* ar = a + n * stride;
    const float* br = two ? b + n * stride : nullptr;
    int64_t i = 0;
    for (; i + 16 <= S; i += 16)
      add(_mm512_loadu_ps(ar + i), two ? _mm512_loadu_ps(br + i) : m, __mmask16(0xffff));
    if (i < S) {
      const __mmask16 lanes = __mmask16((1u << (S - i)) - 1);
      add(_mm512_maskz_loadu_ps(lanes, ar + i), two ? _mm512_maskz_loadu_ps(lanes, br + i) : m,
          lanes);
    }
  }
  sum0 = _mm512_reduce_add_pd(_mm512_add_pd(s0lo, s0hi));
  sum1 = _mm512_reduce_add_pd(_mm512_add_pd(s1lo, s1hi));
}

// One channel's mean and variance (its first run at xc, the next stride apart) by
// channel_sums_avx512; false where that does not run (not float32, or no AVX-512), and the
// caller's loops compute them.
template <typename T>
bool lane_statistics(const T* xc, int64_t stride, int64_t batch, int64_t S, T& mean, T& var) {
  if constexpr (std::is_same_v<T, float>) {
    if (!cpu_has_avx512f()) return false;
    double s = 0, v = 0, unused = 0;
    channel_sums_avx512<ChannelSums::values>(xc, nullptr, stride, batch, S, 0.f, s, unused);
    mean = float(s / double(batch * S));
    channel_sums_avx512<ChannelSums::centered_squares>(xc, nullptr, stride, batch, S, mean, v,
                                                       unused);
    var = float(v / double(batch * S));
    return true;
  }
  return false;
}

// sum(g) and sum(g * (x - mu)) over one channel the same way; false where that does not run.
template <typename T>
bool lane_gradient_sums(const T* gc, const T* xc, int64_t stride, int64_t batch, int64_t S, T mu,
                        double& sum_g, double& sum_gc) {
  if constexpr (std::is_same_v<T, float>) {
    if (!cpu_has_avx512f()) return false;
    channel_sums_avx512<ChannelSums::grads_and_grads_times_centered>(gc, xc, stride, batch, S, mu,
                                                                     sum_g, sum_gc);
    return true;
  }
  return false;
}

Layout layout_of(const Tensor& x) {
  int64_t s = 1;
  for (int d = 2; d < x.dim(); ++d) s *= x.size(d);
  return {x.size(0), x.size(1), s};
}

}  // namespace

void CpuBackend::batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                            bool training, const Tensor& mean, const Tensor& var,
                            const Tensor& rstd, const Tensor& out) {
  const Layout l = layout_of(x);
  const int64_t S = l.spatial, C = l.channels;
  QKV_DISPATCH_FLOAT(x.dtype(), "batch_norm", [&] {
    const T* xp = x.data<T>();
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    const T* bb = bias.defined() ? bias.data<T>() : nullptr;
    T* mp = mean.data<T>();
    T* vp = var.data<T>();
    T* rp = rstd.data<T>();
    T* yp = out.data<T>();
    parallel_for(0, C, l.grain(), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        if (training && !lane_statistics(xp + c * S, C * S, l.batch, S, mp[c], vp[c])) {
          // two passes (mean, then centered variance): stable where E[x^2]-E[x]^2 is not
          double s = 0;
          for (int64_t n = 0; n < l.batch; ++n) {
            const T* xr = xp + (n * C + c) * S;
            _Pragma("omp simd reduction(+ : s)") for (int64_t i = 0; i < S; ++i) s += xr[i];
          }
          const T mu = T(s / double(l.count()));
          double v = 0;
          for (int64_t n = 0; n < l.batch; ++n) {
            const T* xr = xp + (n * C + c) * S;
            _Pragma("omp simd reduction(+ : v)") for (int64_t i = 0; i < S; ++i) v +=
                double(xr[i] - mu) * double(xr[i] - mu);
          }
          mp[c] = mu;
          vp[c] = T(v / double(l.count()));
        }
        const T mu = mp[c], rs = T(1.0 / std::sqrt(double(vp[c]) + eps));
        rp[c] = rs;
        const T scale = w ? rs * w[c] : rs, shift = bb ? bb[c] : T(0);
        for (int64_t n = 0; n < l.batch; ++n) {
          const T* xr = xp + (n * C + c) * S;
          T* yr = yp + (n * C + c) * S;
          _Pragma("omp simd") for (int64_t i = 0; i < S; ++i) yr[i] = (xr[i] - mu) * scale + shift;
        }
      }
    });
  });
}

void CpuBackend::batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd, bool training,
                                     const Tensor& gx, const Tensor& gweight, const Tensor& gbias) {
  const Layout l = layout_of(x);
  const int64_t S = l.spatial, C = l.channels;
  QKV_DISPATCH_FLOAT(x.dtype(), "batch_norm_backward", [&] {
    const T* g = gy.data<T>();
    const T* xp = x.data<T>();
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    const T* mp = mean.data<T>();
    const T* rp = rstd.data<T>();
    T* o = gx.defined() ? gx.data<T>() : nullptr;
    T* gw = gweight.defined() ? gweight.data<T>() : nullptr;
    T* gb = gbias.defined() ? gbias.data<T>() : nullptr;
    parallel_for(0, C, l.grain(), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const T mu = mp[c], rs = rp[c];
        // sum(g) and sum(g * (x - mean)); sum(g * xhat) is the second times rstd
        double sum_g = 0, sum_gc = 0;
        if ((gw || gb || (o && training)) &&
            !lane_gradient_sums(g + c * S, xp + c * S, C * S, l.batch, S, mu, sum_g, sum_gc)) {
          for (int64_t n = 0; n < l.batch; ++n) {
            const T* gr = g + (n * C + c) * S;
            const T* xr = xp + (n * C + c) * S;
            _Pragma("omp simd reduction(+ : sum_g, sum_gc)") for (int64_t i = 0; i < S; ++i) {
              sum_g += gr[i];
              sum_gc += double(gr[i]) * double(xr[i] - mu);
            }
          }
        }
        const double sum_gxhat = sum_gc * double(rs);
        if (gw) gw[c] = T(sum_gxhat);
        if (gb) gb[c] = T(sum_g);
        if (!o) continue;
        const T scale = w ? rs * w[c] : rs;
        // training: gx = scale * (g - mean(g) - xhat * mean(g * xhat)), with xhat = (x - mu) * rs
        const T mean_g = training ? T(sum_g / double(l.count())) : T(0);
        const T xc_coef = training ? T(sum_gxhat / double(l.count())) * rs : T(0);
        for (int64_t n = 0; n < l.batch; ++n) {
          const T* gr = g + (n * C + c) * S;
          const T* xr = xp + (n * C + c) * S;
          T* orow = o + (n * C + c) * S;
          _Pragma("omp simd") for (int64_t i = 0; i < S; ++i) orow[i] =
              scale * (gr[i] - mean_g - (xr[i] - mu) * xc_coef);
        }
      }
    });
  });
}

}  // namespace qkv::cpu
