// Batch normalization over x [N, C, S...]: each channel's values are N contiguous runs of S (the
// spatial size), so a channel's statistics are vectorized sums over those runs, in double as the
// row kernels accumulate, and the threads take whole channels (no two write the same output).
#include <immintrin.h>

// GCC 12's _mm512_reduce_add_pd passes a self-initialized "undefined" vector as an unused operand,
// which -Wmaybe-uninitialized reports wherever it is inlined (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)  // a GCC-only warning; clang would warn about the unknown name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif

#include <algorithm>
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

enum class ChannelSums { shifted_moments, grads_and_grads_times_centered };

// A float32 channel's sums over its N runs of S values (run n at a + n * stride, likewise b), on
// AVX-512: sixteen double lanes (two vectors) kept across the runs, each run's last values read
// with a mask, totalled once at the end. The `omp simd` loops below finish a reduction per run,
// which cost more than the adds for runs of 49 values (9x a plain sum of the tensor at 7 x 7).
// shifted_moments: with d = a - mu in double, sum0 = sum of d and sum1 = sum of d^2 (one pass for
// the mean and the variance); grads_and_grads_times_centered: sum0 = sum of a (the gradient),
// sum1 = sum of a * (b - mu). The order is fixed: the same sums at any thread count.
// With masked, relu_out masks a (the gradient) to 0 where relu_out <= 0 (relu's backward); a
// template flag, so the loops without it test nothing.
template <ChannelSums kind, bool masked = false>
__attribute__((target("avx512f"))) void channel_sums_avx512(const float* a, const float* b,
                                                            const float* relu_out, int64_t stride,
                                                            int64_t batch, int64_t S, float mu,
                                                            double& sum0, double& sum1) {
  __m512d s0lo = _mm512_setzero_pd(), s0hi = s0lo, s1lo = s0lo, s1hi = s0lo;
  const __m512 m = _mm512_set1_ps(mu);
  auto add = [&](__m512 av, __m512 bv, __mmask16 lanes) {
    if constexpr (kind == ChannelSums::shifted_moments) {
      const __m512d shift = _mm512_set1_pd(double(mu));
      const __m512d lo = _mm512_maskz_sub_pd(__mmask8(lanes), low_doubles(av), shift);
      const __m512d hi = _mm512_maskz_sub_pd(__mmask8(lanes >> 8), high_doubles(av), shift);
      s0lo = _mm512_add_pd(s0lo, lo);
      s0hi = _mm512_add_pd(s0hi, hi);
      s1lo = _mm512_fmadd_pd(lo, lo, s1lo);
      s1hi = _mm512_fmadd_pd(hi, hi, s1hi);
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
  // a's lanes, zeroed where relu_out <= 0 (NaN passes: "not less or equal", unordered true)
  auto load_a = [&](const float* ar, const float* rr, __mmask16 lanes) {
    if constexpr (!masked) {
      return _mm512_maskz_loadu_ps(lanes, ar);
    } else {
      const __mmask16 pass = _mm512_mask_cmp_ps_mask(lanes, _mm512_maskz_loadu_ps(lanes, rr),
                                                     _mm512_setzero_ps(), _CMP_NLE_UQ);
      return _mm512_maskz_loadu_ps(pass, ar);
    }
  };
  for (int64_t n = 0; n < batch; ++n) {
    const float* ar = a + n * stride;
    const float* br = two ? b + n * stride : nullptr;
    const float* rr = masked ? relu_out + n * stride : nullptr;
    int64_t i = 0;
    for (; i + 16 <= S; i += 16)
      add(load_a(ar + i, rr + i, __mmask16(0xffff)), two ? _mm512_loadu_ps(br + i) : m,
          __mmask16(0xffff));
    if (i < S) {
      const __mmask16 lanes = __mmask16((1u << (S - i)) - 1);
      add(load_a(ar + i, rr + i, lanes), two ? _mm512_maskz_loadu_ps(lanes, br + i) : m, lanes);
    }
  }
  sum0 = _mm512_reduce_add_pd(_mm512_add_pd(s0lo, s0hi));
  sum1 = _mm512_reduce_add_pd(_mm512_add_pd(s1lo, s1hi));
}

// One channel's mean and variance (its first run at xc, the next stride apart) by
// channel_sums_avx512 in one pass over x; false where that does not run (not float32, or no
// AVX-512), and the caller's two passes compute them. The sums are of x - x[0] in double: shifted
// by a value of the channel, the variance sum1 / n - (sum0 / n)^2 loses only about
// (mean - x[0])^2 / var times double's rounding, far below float's however far the channel's mean
// lies from zero, where sums of x^2 would lose mean^2 / var times it.
template <typename T>
bool lane_statistics(const T* xc, int64_t stride, int64_t batch, int64_t S, T& mean, T& var) {
  if constexpr (std::is_same_v<T, float>) {
    if (!cpu_has_avx512f()) return false;
    const float shift = xc[0];
    double sum_d = 0, sum_dd = 0;
    channel_sums_avx512<ChannelSums::shifted_moments>(xc, nullptr, nullptr, stride, batch, S, shift,
                                                      sum_d, sum_dd);
    const double n = double(batch * S), mean_d = sum_d / n;
    mean = float(double(shift) + mean_d);
    var = float(std::max(sum_dd / n - mean_d * mean_d, 0.0));
    return true;
  }
  return false;
}

// sum(g) and sum(g * (x - mu)) over one channel the same way, g masked by relu_out where that is
// defined; false where that does not run.
template <typename T>
bool lane_gradient_sums(const T* gc, const T* xc, const T* relu_out, int64_t stride, int64_t batch,
                        int64_t S, T mu, double& sum_g, double& sum_gc) {
  if constexpr (std::is_same_v<T, float>) {
    if (!cpu_has_avx512f()) return false;
    constexpr ChannelSums kind = ChannelSums::grads_and_grads_times_centered;
    if (relu_out)
      channel_sums_avx512<kind, true>(gc, xc, relu_out, stride, batch, S, mu, sum_g, sum_gc);
    else
      channel_sums_avx512<kind>(gc, xc, nullptr, stride, batch, S, mu, sum_g, sum_gc);
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
                            const Tensor& rstd, const Tensor& out, bool relu) {
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
          if (relu) {  // as relu's kernel: NaN passes
            _Pragma("omp simd") for (int64_t i = 0; i < S; ++i) {
              const T v = (xr[i] - mu) * scale + shift;
              yr[i] = v < T(0) ? T(0) : v;
            }
          } else {
            _Pragma("omp simd") for (int64_t i = 0; i < S; ++i) yr[i] =
                (xr[i] - mu) * scale + shift;
          }
        }
      }
    });
  });
}

void CpuBackend::batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd, bool training,
                                     const Tensor& relu_output, const Tensor& gx,
                                     const Tensor& gweight, const Tensor& gbias) {
  const Layout l = layout_of(x);
  const int64_t S = l.spatial, C = l.channels;
  QKV_DISPATCH_FLOAT(x.dtype(), "batch_norm_backward", [&] {
    const T* g = gy.data<T>();
    const T* xp = x.data<T>();
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    const T* mp = mean.data<T>();
    const T* rp = rstd.data<T>();
    const T* ro = relu_output.defined() ? relu_output.data<T>() : nullptr;
    // the gradient reaching the norm's output: relu_backward(g, relu_output) when fused
    auto g_at = [&](const T* gr, const T* rr, int64_t i) {
      return rr && rr[i] <= T(0) ? T(0) : gr[i];
    };
    T* o = gx.defined() ? gx.data<T>() : nullptr;
    T* gw = gweight.defined() ? gweight.data<T>() : nullptr;
    T* gb = gbias.defined() ? gbias.data<T>() : nullptr;
    parallel_for(0, C, l.grain(), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const T mu = mp[c], rs = rp[c];
        // sum(g) and sum(g * (x - mean)); sum(g * xhat) is the second times rstd
        double sum_g = 0, sum_gc = 0;
        if ((gw || gb || (o && training)) &&
            !lane_gradient_sums(g + c * S, xp + c * S, ro ? ro + c * S : nullptr, C * S, l.batch, S,
                                mu, sum_g, sum_gc)) {
          for (int64_t n = 0; n < l.batch; ++n) {
            const T* gr = g + (n * C + c) * S;
            const T* xr = xp + (n * C + c) * S;
            const T* rr = ro ? ro + (n * C + c) * S : nullptr;
            _Pragma("omp simd reduction(+ : sum_g, sum_gc)") for (int64_t i = 0; i < S; ++i) {
              const T gi = g_at(gr, rr, i);
              sum_g += gi;
              sum_gc += double(gi) * double(xr[i] - mu);
            }
          }
        }
        const double sum_gxhat = sum_gc * double(rs);
        if (gw) gw[c] = T(sum_gxhat);
        if (gb) gb[c] = T(sum_g);
        if (!o) continue;
        const T scale = w ? rs * w[c] : rs;
        // training: gx = scale * (g - mean(g) - xhat * mean(g * xhat)), with xhat = (x - mu) * rs;
        // eval: gx = scale * g
        const T mean_g = T(sum_g / double(l.count()));
        const T xc_coef = T(sum_gxhat / double(l.count())) * rs;
        for (int64_t n = 0; n < l.batch; ++n) {
          const T* gr = g + (n * C + c) * S;
          const T* xr = xp + (n * C + c) * S;
          const T* rr = ro ? ro + (n * C + c) * S : nullptr;
          T* orow = o + (n * C + c) * S;
          if (!training) {  // no x term: a NaN x gives no NaN gradient (PyTorch's eval)
            _Pragma("omp simd") for (int64_t i = 0; i < S; ++i) orow[i] =
                scale * (rr && rr[i] <= T(0) ? T(0) : gr[i]);
          } else if (rr) {
            _Pragma("omp simd") for (int64_t i = 0; i < S; ++i) orow[i] =
                scale * ((rr[i] <= T(0) ? T(0) : gr[i]) - mean_g - (xr[i] - mu) * xc_coef);
          } else {
            _Pragma("omp simd") for (int64_t i = 0; i < S; ++i) orow[i] =
                scale * (gr[i] - mean_g - (xr[i] - mu) * xc_coef);
          }
        }
      }
    });
  });
}

}  // namespace qkv::cpu
