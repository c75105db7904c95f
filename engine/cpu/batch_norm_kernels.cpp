// Batch normalization over x [N, C, S...]: each channel's values are N contiguous runs of S (the
// spatial size), so a channel's statistics are vectorized sums over those runs, in double as the
// row kernels accumulate, and the threads take whole channels (no two write the same output).
#include <immintrin.h>

// GCC 12's _mm512_reduce_add_pd passes a self-initialized "undefined" vector as an unused operand,
// which -Wmaybe-uninitialized (or, where the sums are inlined into a caller, -Wuninitialized)
// reports wherever it is inlined (GCC bug 105593, fixed in GCC 13).
#if !defined(__clang__)  // GCC-only warnings; clang would warn about the unknown name
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
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

// y = (x - mu) * scale + shift as the float32 forward stores it (before its ReLU): one rounding
// for the subtraction, one for the fused multiply-add. The backward of batch_norm_relu recomputes
// it from x with the same two instructions, so the sign it finds is the stored output's, bit for
// bit, and the output need not be read again to know where the ReLU clipped.
__attribute__((target("avx512f"), always_inline)) inline __m512 normalized(__m512 x, __m512 mu,
                                                                           __m512 scale,
                                                                           __m512 shift) {
  return _mm512_fmadd_ps(_mm512_sub_ps(x, mu), scale, shift);
}

// The lanes where a fused ReLU passes the gradient: y not <= 0 (relu_backward's rule; a NaN y
// passes), within lanes.
__attribute__((target("avx512f"), always_inline)) inline __mmask16 relu_passes(__mmask16 lanes,
                                                                               __m512 y) {
  return _mm512_mask_cmp_ps_mask(lanes, y, _mm512_setzero_ps(), _CMP_NLE_UQ);
}

// A channel's normalization: mean, scale = rstd * weight, shift = bias.
struct ChannelAffine {
  float mu, scale, shift;
};

enum class ChannelSums { shifted_moments, grads_and_grads_times_centered };

// A channel's runs are short (3 KB at 28 x 28, 196 bytes at 7 x 7) and C * S floats apart, too
// short for the hardware's stream prefetchers to get ahead of the loads before each run ends: the
// first pass over a channel (its sums) asks for the run about kBytesAhead further on, line by
// line as it reads its own. (The second pass reads the runs the first left in L2.) Past the last
// run it asks for the current one.
constexpr int64_t kBytesAhead = 6144;
inline int64_t runs_ahead(int64_t n, int64_t batch, int64_t S) {
  const int64_t runs = std::max<int64_t>(1, (kBytesAhead + 4 * S - 1) / (4 * S));
  return n + runs < batch ? runs : 0;
}
__attribute__((always_inline)) inline void prefetch_line(const float* p) {
  __builtin_prefetch(p, 0, 3);
}

// A float32 channel's sums over its N runs of S values (run n at a + n * stride, likewise b), on
// AVX-512: sixteen double lanes (two vectors) kept across the runs, each run's last values read
// with a mask, totalled once at the end. The `omp simd` loops below finish a reduction per run,
// which cost more than the adds for runs of 49 values (9x a plain sum of the tensor at 7 x 7).
// shifted_moments: with d = a - center in double, sum0 = sum of d and sum1 = sum of d^2 (one pass
// for the mean and the variance); grads_and_grads_times_centered: sum0 = sum of a (the gradient),
// sum1 = sum of a * (b - center), center the mean. The order is fixed: the same sums at any thread
// count. With relu, a (the gradient) counts only where the forward's output normalized(b) by f
// passes (a template flag, so the loops without it test nothing; f is not read otherwise).
template <ChannelSums kind, bool relu = false>
__attribute__((target("avx512f"))) void channel_sums_avx512(const float* a, const float* b,
                                                            int64_t stride, int64_t batch,
                                                            int64_t S, float center,
                                                            ChannelAffine f, double& sum0,
                                                            double& sum1) {
  __m512d s0lo = _mm512_setzero_pd(), s0hi = s0lo, s1lo = s0lo, s1hi = s0lo;
  const __m512 c = _mm512_set1_ps(center), m = _mm512_set1_ps(f.mu),
               scale = _mm512_set1_ps(f.scale), shift = _mm512_set1_ps(f.shift);
  auto add = [&](__m512 av, __m512 bv, __mmask16 lanes) {
    if constexpr (kind == ChannelSums::shifted_moments) {
      const __m512d center_d = _mm512_set1_pd(double(center));
      const __m512d lo = _mm512_maskz_sub_pd(__mmask8(lanes), low_doubles(av), center_d);
      const __m512d hi = _mm512_maskz_sub_pd(__mmask8(lanes >> 8), high_doubles(av), center_d);
      s0lo = _mm512_add_pd(s0lo, lo);
      s0hi = _mm512_add_pd(s0hi, hi);
      s1lo = _mm512_fmadd_pd(lo, lo, s1lo);
      s1hi = _mm512_fmadd_pd(hi, hi, s1hi);
    } else {
      if constexpr (relu)
        av = _mm512_maskz_mov_ps(relu_passes(lanes, normalized(bv, m, scale, shift)), av);
      const __m512 d = _mm512_maskz_sub_ps(lanes, bv, c);
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
    const int64_t ahead = runs_ahead(n, batch, S) * stride;
    int64_t i = 0;
    for (; i + 16 <= S; i += 16) {
      prefetch_line(ar + ahead + i);
      if constexpr (two) prefetch_line(br + ahead + i);
      add(_mm512_loadu_ps(ar + i), two ? _mm512_loadu_ps(br + i) : c, __mmask16(0xffff));
    }
    if (i < S) {
      const __mmask16 lanes = __mmask16((1u << (S - i)) - 1);
      add(_mm512_maskz_loadu_ps(lanes, ar + i), two ? _mm512_maskz_loadu_ps(lanes, br + i) : c,
          lanes);
    }
  }
  sum0 = _mm512_reduce_add_pd(_mm512_add_pd(s0lo, s0hi));
  sum1 = _mm512_reduce_add_pd(_mm512_add_pd(s1lo, s1hi));
}

// A run's vector of sixteen floats at p: the full ones by plain loads and stores, the last of a run
// (partial: `lanes` set) by masked ones.
struct Lanes {
  __mmask16 mask;
  bool partial;
};
__attribute__((target("avx512f"), always_inline)) inline __m512 load(const float* p, Lanes l) {
  return l.partial ? _mm512_maskz_loadu_ps(l.mask, p) : _mm512_loadu_ps(p);
}
__attribute__((target("avx512f"), always_inline)) inline void store(float* p, __m512 v, Lanes l) {
  if (l.partial)
    _mm512_mask_storeu_ps(p, l.mask, v);
  else
    _mm512_storeu_ps(p, v);
}

// Runs f(offset, lanes) over a channel's N runs of S values (run n at offset n * stride), sixteen
// at a time, the last of each run with a mask; inlined, so `partial` is a constant in each call.
template <typename F>
__attribute__((always_inline)) inline void for_each_vector(int64_t stride, int64_t batch, int64_t S,
                                                           F f) {
  for (int64_t n = 0; n < batch; ++n) {
    int64_t i = 0;
    for (; i + 16 <= S; i += 16) f(n * stride + i, Lanes{__mmask16(0xffff), false});
    if (i < S) f(n * stride + i, Lanes{__mmask16((1u << (S - i)) - 1), true});
  }
}

// The forward's output rows of one float32 channel: normalized(x), clipped at 0 with relu as
// relu's kernel clips (y < 0 becomes 0; NaN and -0 pass).
template <bool relu>
__attribute__((target("avx512f"))) void normalize_avx512(const float* x, float* y, int64_t stride,
                                                         int64_t batch, int64_t S,
                                                         ChannelAffine f) {
  const __m512 m = _mm512_set1_ps(f.mu), scale = _mm512_set1_ps(f.scale),
               shift = _mm512_set1_ps(f.shift), zero = _mm512_setzero_ps();
  for_each_vector(stride, batch, S, [&](int64_t at, Lanes lanes) {
    __m512 v = normalized(load(x + at, lanes), m, scale, shift);
    if constexpr (relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
    store(y + at, v, lanes);
  });
}

// The input gradient rows of one float32 channel: with g' = g (masked where the forward's ReLU
// clipped), training writes f.scale * (g' - mean_g - (x - mu) * xc_coef), eval f.scale * g' (no x
// term, so a NaN x leaves its gradient finite).
template <bool relu, bool training>
__attribute__((target("avx512f"))) void input_gradient_avx512(const float* g, const float* x,
                                                              float* o, int64_t stride,
                                                              int64_t batch, int64_t S,
                                                              ChannelAffine f, float mean_g,
                                                              float xc_coef) {
  const __m512 m = _mm512_set1_ps(f.mu), scale = _mm512_set1_ps(f.scale),
               shift = _mm512_set1_ps(f.shift), mg = _mm512_set1_ps(mean_g),
               coef = _mm512_set1_ps(xc_coef);
  for_each_vector(stride, batch, S, [&](int64_t at, Lanes lanes) {
    __m512 gv = load(g + at, lanes);
    __m512 xv = (relu || training) ? load(x + at, lanes) : m;
    if constexpr (relu)
      gv = _mm512_maskz_mov_ps(relu_passes(lanes.mask, normalized(xv, m, scale, shift)), gv);
    if constexpr (training)
      gv = _mm512_fnmadd_ps(_mm512_sub_ps(xv, m), coef, _mm512_sub_ps(gv, mg));
    store(o + at, _mm512_mul_ps(scale, gv), lanes);
  });
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
    channel_sums_avx512<ChannelSums::shifted_moments>(xc, nullptr, stride, batch, S, shift, {},
                                                      sum_d, sum_dd);
    const double n = double(batch * S), mean_d = sum_d / n;
    mean = float(double(shift) + mean_d);
    var = float(std::max(sum_dd / n - mean_d * mean_d, 0.0));
    return true;
  }
  return false;
}

// The output rows of one channel by normalize_avx512; false where that does not run.
template <typename T>
bool lane_normalize(const T* xc, T* yc, int64_t stride, int64_t batch, int64_t S, T mu, T scale,
                    T shift, bool relu) {
  if constexpr (std::is_same_v<T, float>) {
    if (!cpu_has_avx512f()) return false;
    const ChannelAffine f{mu, scale, shift};
    (relu ? normalize_avx512<true> : normalize_avx512<false>)(xc, yc, stride, batch, S, f);
    return true;
  }
  return false;
}

// sum(g) and sum(g * (x - mu)) over one channel the same way, g masked where the forward's ReLU
// clipped with relu; false where that does not run.
template <typename T>
bool lane_gradient_sums(const T* gc, const T* xc, int64_t stride, int64_t batch, int64_t S, T mu,
                        T scale, T shift, bool relu, double& sum_g, double& sum_gc) {
  if constexpr (std::is_same_v<T, float>) {
    if (!cpu_has_avx512f()) return false;
    constexpr ChannelSums kind = ChannelSums::grads_and_grads_times_centered;
    (relu ? channel_sums_avx512<kind, true>
          : channel_sums_avx512<kind, false>)(gc, xc, stride, batch, S, mu, {mu, scale, shift},
                                              sum_g, sum_gc);
    return true;
  }
  return false;
}

// The input gradient rows of one channel by input_gradient_avx512; false where that does not run.
template <typename T>
bool lane_input_gradient(const T* gc, const T* xc, T* oc, int64_t stride, int64_t batch, int64_t S,
                         T mu, T scale, T shift, T mean_g, T xc_coef, bool relu, bool training) {
  if constexpr (std::is_same_v<T, float>) {
    if (!cpu_has_avx512f()) return false;
    const ChannelAffine f{mu, scale, shift};
    auto rows =
        relu
            ? (training ? input_gradient_avx512<true, true> : input_gradient_avx512<true, false>)
            : (training ? input_gradient_avx512<false, true> : input_gradient_avx512<false, false>);
    rows(gc, xc, oc, stride, batch, S, f, mean_g, xc_coef);
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
        if (lane_normalize(xp + c * S, yp + c * S, C * S, l.batch, S, mu, scale, shift, relu))
          continue;
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
                                     const Tensor& bias, const Tensor& mean, const Tensor& rstd,
                                     bool training, const Tensor& relu_output, const Tensor& gx,
                                     const Tensor& gweight, const Tensor& gbias) {
  const Layout l = layout_of(x);
  const int64_t S = l.spatial, C = l.channels;
  const bool relu = relu_output.defined();
  QKV_DISPATCH_FLOAT(x.dtype(), "batch_norm_backward", [&] {
    const T* g = gy.data<T>();
    const T* xp = x.data<T>();
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    const T* bb = bias.defined() ? bias.data<T>() : nullptr;
    const T* mp = mean.data<T>();
    const T* rp = rstd.data<T>();
    // The loops below read the output for the ReLU's mask; the float32 lanes recompute it.
    const T* ro = relu ? relu_output.data<T>() : nullptr;
    T* o = gx.defined() ? gx.data<T>() : nullptr;
    T* gw = gweight.defined() ? gweight.data<T>() : nullptr;
    T* gb = gbias.defined() ? gbias.data<T>() : nullptr;
    parallel_for(0, C, l.grain(), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const T mu = mp[c], rs = rp[c];
        const T scale = w ? rs * w[c] : rs, shift = bb ? bb[c] : T(0);
        // sum(g) and sum(g * (x - mean)); sum(g * xhat) is the second times rstd
        double sum_g = 0, sum_gc = 0;
        if ((gw || gb || (o && training)) &&
            !lane_gradient_sums(g + c * S, xp + c * S, C * S, l.batch, S, mu, scale, shift, relu,
                                sum_g, sum_gc)) {
          for (int64_t n = 0; n < l.batch; ++n) {
            const T* gr = g + (n * C + c) * S;
            const T* xr = xp + (n * C + c) * S;
            const T* rr = relu ? ro + (n * C + c) * S : nullptr;
            _Pragma("omp simd reduction(+ : sum_g, sum_gc)") for (int64_t i = 0; i < S; ++i) {
              const T gi = rr && rr[i] <= T(0) ? T(0) : gr[i];
              sum_g += gi;
              sum_gc += double(gi) * double(xr[i] - mu);
            }
          }
        }
        const double sum_gxhat = sum_gc * double(rs);
        if (gw) gw[c] = T(sum_gxhat);
        if (gb) gb[c] = T(sum_g);
        if (!o) continue;
        // training: gx = scale * (g - mean(g) - xhat * mean(g * xhat)), with xhat = (x - mu) * rs;
        // eval: gx = scale * g
        const T mean_g = T(sum_g / double(l.count()));
        const T xc_coef = T(sum_gxhat / double(l.count())) * rs;
        if (lane_input_gradient(g + c * S, xp + c * S, o + c * S, C * S, l.batch, S, mu, scale,
                                shift, mean_g, xc_coef, relu, training))
          continue;
        for (int64_t n = 0; n < l.batch; ++n) {
          const T* gr = g + (n * C + c) * S;
          const T* xr = xp + (n * C + c) * S;
          const T* rr = relu ? ro + (n * C + c) * S : nullptr;
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
