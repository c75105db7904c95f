// Batch normalization over x [N, C, S...]: each channel's values are N contiguous runs of S (the
// spatial size), so a channel's statistics are vectorized sums over those runs, in double as the
// row kernels accumulate. In float32 on AVX-512 both passes (the sums, then the output or the
// input's gradient) read the tensor image by image, in memory order: each channel's sums are kept
// per fixed range of images and added in range order, so they do not depend on the thread count.
// Elsewhere (float64, or no AVX-512) the threads take whole channels, a channel's runs in turn.
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

#include "engine/cpu/avx512_target.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/prefetch.h"
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

// g masked to the lanes where the ReLU passed. g is loaded whole first: left to itself GCC folds
// the masking into a masked load of g, which cannot issue before x's load and the compare that
// make its mask, and which, missing the caches, gets no help from the hardware prefetcher
// (avx512_target.h's prefetch_ahead): with g and x coming from memory, the backward ran at about
// half batch_norm's speed (docs/CPU_KERNELS.md). The empty asm makes the loaded vector a value
// GCC cannot see into.
__attribute__((target("avx512f"), always_inline)) inline __m512 masked_gradient(__m512 g,
                                                                                __mmask16 passes) {
  asm("" : "+v"(g));
  return _mm512_maskz_mov_ps(passes, g);
}

// A channel's normalization: mean, scale = rstd * weight, shift = bias.
struct ChannelAffine {
  float mu, scale, shift;
};

enum class ChannelSums { shifted_moments, grads_and_grads_times_centered };

// A channel's sums over part of the batch, in sixteen double lanes each (sum0 in the first 16
// doubles, sum1 in the next 16), kept in memory between runs.
constexpr int64_t kLaneDoubles = 32;

// Adds one run of S values (a, and b for the gradient sums) to a channel's lane sums, on AVX-512,
// the run's last values read with a mask. shifted_moments: with d = a - center in double, sum0 +=
// d and sum1 += d^2 (one pass for the mean and the variance); grads_and_grads_times_centered:
// sum0 += a (the gradient), sum1 += a * (b - center), center the mean. With relu, a counts only
// where the forward's output normalized(b) by f passes (a template flag, so the loops without it
// test nothing; f is not read otherwise).
template <ChannelSums kind, bool relu = false>
__attribute__((target("avx512f"), always_inline)) inline void add_run_avx512(
    const float* a, const float* b, int64_t S, float center, ChannelAffine f, double* lanes) {
  __m512d s0lo = _mm512_loadu_pd(lanes), s0hi = _mm512_loadu_pd(lanes + 8),
          s1lo = _mm512_loadu_pd(lanes + 16), s1hi = _mm512_loadu_pd(lanes + 24);
  const __m512 c = _mm512_set1_ps(center), m = _mm512_set1_ps(f.mu),
               scale = _mm512_set1_ps(f.scale), shift = _mm512_set1_ps(f.shift);
  auto add = [&](__m512 av, __m512 bv, __mmask16 lanes_on) {
    if constexpr (kind == ChannelSums::shifted_moments) {
      const __m512d center_d = _mm512_set1_pd(double(center));
      const __m512d lo = _mm512_maskz_sub_pd(__mmask8(lanes_on), low_doubles(av), center_d);
      const __m512d hi = _mm512_maskz_sub_pd(__mmask8(lanes_on >> 8), high_doubles(av), center_d);
      s0lo = _mm512_add_pd(s0lo, lo);
      s0hi = _mm512_add_pd(s0hi, hi);
      s1lo = _mm512_fmadd_pd(lo, lo, s1lo);
      s1hi = _mm512_fmadd_pd(hi, hi, s1hi);
    } else {
      if constexpr (relu)
        av = masked_gradient(av, relu_passes(lanes_on, normalized(bv, m, scale, shift)));
      const __m512 d = _mm512_maskz_sub_ps(lanes_on, bv, c);
      const __m512d glo = low_doubles(av), ghi = high_doubles(av);
      s0lo = _mm512_add_pd(s0lo, glo);
      s0hi = _mm512_add_pd(s0hi, ghi);
      s1lo = _mm512_fmadd_pd(glo, low_doubles(d), s1lo);
      s1hi = _mm512_fmadd_pd(ghi, high_doubles(d), s1hi);
    }
  };
  constexpr bool two = kind == ChannelSums::grads_and_grads_times_centered;
  int64_t i = 0;
  for (; i + 16 <= S; i += 16) {
    prefetch_ahead(a + i);
    if constexpr (two) prefetch_ahead(b + i);
    add(_mm512_loadu_ps(a + i), two ? _mm512_loadu_ps(b + i) : c, __mmask16(0xffff));
  }
  if (i < S) {
    const __mmask16 tail = __mmask16((1u << (S - i)) - 1);
    add(_mm512_maskz_loadu_ps(tail, a + i), two ? _mm512_maskz_loadu_ps(tail, b + i) : c, tail);
  }
  _mm512_storeu_pd(lanes, s0lo);
  _mm512_storeu_pd(lanes + 8, s0hi);
  _mm512_storeu_pd(lanes + 16, s1lo);
  _mm512_storeu_pd(lanes + 24, s1hi);
}

// The sixteen lanes of a sum, added up.
__attribute__((target("avx512f"))) double lanes_total(const double* lanes) {
  return _mm512_reduce_add_pd(_mm512_add_pd(_mm512_loadu_pd(lanes), _mm512_loadu_pd(lanes + 8)));
}

// The batch is cut into this many contiguous ranges of images (fewer for a small batch), whatever
// the thread count; each range's sums are kept apart and added in range order, so the statistics
// are the same bits at any thread count.
constexpr int64_t kImageRanges = 16;

// Work item (range r of `ranges`, channels [c0, c1)) of image_major_sums: its images' runs added
// to its lanes in memory order, on AVX-512 (the runs inlined: at 7 x 7 a run is four vectors).
template <ChannelSums kind, bool relu>
__attribute__((target("avx512f"))) void sum_item(const float* a, const float* b, const Layout& l,
                                                 const float* centers, const ChannelAffine* affine,
                                                 int64_t n0, int64_t n1, int64_t c0, int64_t c1,
                                                 double* lanes) {
  const int64_t C = l.channels, S = l.spatial;
  for (int64_t n = n0; n < n1; ++n)
    for (int64_t c = c0; c < c1; ++c) {
      const int64_t at = (n * C + c) * S;
      add_run_avx512<kind, relu>(a + at, b ? b + at : nullptr, S, centers[c],
                                 affine ? affine[c] : ChannelAffine{}, lanes + c * kLaneDoubles);
    }
}

// Every channel's sums (sum0[c], sum1[c]) over the whole batch, read image by image: in memory
// order, so at the bandwidth the prefetchers give a stream. (Channel by channel, the reads are
// runs of S floats C * S apart, 3 KB in 50 KB at [128, 16, 28, 28]: they got about half of it.)
// A work item is a range of images and a block of channels (blocks only where the ranges alone
// are too few to share out); its lane sums live in `lanes`, [range, channel, 32 doubles].
template <ChannelSums kind, bool relu>
void image_major_sums(const float* a, const float* b, const Layout& l, const float* centers,
                      const ChannelAffine* affine, double* sum0, double* sum1) {
  const int64_t N = l.batch, C = l.channels, S = l.spatial;
  if (N * C * S == 0) {  // nothing to add (an empty batch or image in eval)
    std::fill(sum0, sum0 + C, 0.0);
    std::fill(sum1, sum1 + C, 0.0);
    return;
  }
  const int64_t ranges = std::min(N, kImageRanges);
  const int64_t blocks = std::min(C, std::max<int64_t>(1, kImageRanges / ranges));
  std::vector<double> lanes(size_t(ranges * C * kLaneDoubles), 0.0);
  const int64_t values_per_item = std::max<int64_t>(1, N * C * S / (ranges * blocks));
  parallel_for(0, ranges * blocks, std::max<int64_t>(1, 16384 / values_per_item),
               [&](int64_t i0, int64_t i1) {
                 for (int64_t i = i0; i < i1; ++i) {
                   const int64_t r = i / blocks, blk = i % blocks;
                   sum_item<kind, relu>(a, b, l, centers, affine, r * N / ranges,
                                        (r + 1) * N / ranges, blk * C / blocks,
                                        (blk + 1) * C / blocks,
                                        lanes.data() + r * C * kLaneDoubles);
                 }
               });
  for (int64_t c = 0; c < C; ++c) {
    double* total = lanes.data() + c * kLaneDoubles;  // range 0's lanes gather the others
    for (int64_t r = 1; r < ranges; ++r)
      for (int64_t j = 0; j < kLaneDoubles; ++j)
        total[j] += lanes[size_t((r * C + c) * kLaneDoubles + j)];
    sum0[c] = lanes_total(total);
    sum1[c] = lanes_total(total + 16);
  }
}

// f(r0, r1) for the runs [r0, r1) of S values (run r = n * C + c: image n, channel c, at r * S)
// in memory order, the threads taking contiguous stretches of runs.
template <typename F>
void for_each_run(const Layout& l, F f) {
  const int64_t runs = l.batch * l.channels;
  parallel_for(0, runs, std::max<int64_t>(1, 16384 / std::max<int64_t>(l.spatial, 1)), f);
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

// Runs f(offset, lanes) over a run of S values, sixteen at a time, the last with a mask; inlined,
// so `partial` is a constant in each call.
template <typename F>
__attribute__((always_inline)) inline void for_each_vector(int64_t S, F f) {
  int64_t i = 0;
  for (; i + 16 <= S; i += 16) f(i, Lanes{__mmask16(0xffff), false});
  if (i < S) f(i, Lanes{__mmask16((1u << (S - i)) - 1), true});
}

// f(r, c) for the runs r in [r0, r1) (run r = n * C + c: image n, channel c), keeping c without a
// division per run; inlined into the AVX-512 loops below.
template <typename F>
__attribute__((always_inline)) inline void for_runs(const Layout& l, int64_t r0, int64_t r1, F f) {
  for (int64_t r = r0, c = r0 % l.channels; r < r1; ++r, c = c + 1 == l.channels ? 0 : c + 1)
    f(r, c);
}

// The forward's output for one run of S values: normalized(x), clipped at 0 with relu as relu's
// kernel clips (y < 0 becomes 0; NaN and -0 pass).
template <bool relu>
__attribute__((target("avx512f"), always_inline)) inline void normalize_avx512(const float* x,
                                                                               float* y, int64_t S,
                                                                               ChannelAffine f) {
  const __m512 m = _mm512_set1_ps(f.mu), scale = _mm512_set1_ps(f.scale),
               shift = _mm512_set1_ps(f.shift), zero = _mm512_setzero_ps();
  for_each_vector(S, [&](int64_t at, Lanes lanes) {
    prefetch_ahead(x + at);
    prefetch_line_ahead<1>(y + at);
    __m512 v = normalized(load(x + at, lanes), m, scale, shift);
    if constexpr (relu) v = _mm512_mask_mov_ps(v, _mm512_cmp_ps_mask(v, zero, _CMP_LT_OQ), zero);
    store(y + at, v, lanes);
  });
}

// The input gradient of one run of S values: with g' = g (masked where the forward's ReLU
// clipped), training writes f.scale * (g' - mean_g - (x - mu) * xc_coef), eval f.scale * g' (no x
// term, so a NaN x leaves its gradient finite).
template <bool relu, bool training>
__attribute__((target("avx512f"), always_inline)) inline void input_gradient_avx512(
    const float* g, const float* x, float* o, int64_t S, ChannelAffine f, float mean_g,
    float xc_coef) {
  const __m512 m = _mm512_set1_ps(f.mu), scale = _mm512_set1_ps(f.scale),
               shift = _mm512_set1_ps(f.shift), mg = _mm512_set1_ps(mean_g),
               coef = _mm512_set1_ps(xc_coef);
  for_each_vector(S, [&](int64_t at, Lanes lanes) {
    prefetch_ahead(g + at);
    if constexpr (relu || training) prefetch_ahead(x + at);
    prefetch_line_ahead<1>(o + at);
    __m512 gv = load(g + at, lanes);
    __m512 xv = (relu || training) ? load(x + at, lanes) : m;
    if constexpr (relu)
      gv = masked_gradient(gv, relu_passes(lanes.mask, normalized(xv, m, scale, shift)));
    if constexpr (training)
      gv = _mm512_fnmadd_ps(_mm512_sub_ps(xv, m), coef, _mm512_sub_ps(gv, mg));
    store(o + at, _mm512_mul_ps(scale, gv), lanes);
  });
}

// The output of runs [r0, r1) (run r = n * C + c), each by its channel's affine.
template <bool relu>
__attribute__((target("avx512f"))) void normalize_runs(const float* x, float* y, const Layout& l,
                                                       const ChannelAffine* affine, int64_t r0,
                                                       int64_t r1) {
  const int64_t S = l.spatial;
  for_runs(l, r0, r1, [&](int64_t r, int64_t c) {
    normalize_avx512<relu>(x + r * S, y + r * S, S, affine[c]);
  });
}

// The input gradient of runs [r0, r1) likewise.
template <bool relu, bool training>
__attribute__((target("avx512f"))) void input_gradient_runs(
    const float* g, const float* x, float* o, const Layout& l, const ChannelAffine* affine,
    const float* mean_g, const float* xc_coef, int64_t r0, int64_t r1) {
  const int64_t S = l.spatial;
  for_runs(l, r0, r1, [&](int64_t r, int64_t c) {
    input_gradient_avx512<relu, training>(g + r * S, x + r * S, o + r * S, S, affine[c], mean_g[c],
                                          xc_coef[c]);
  });
}

// The float32 forward on AVX-512, both passes image by image: the statistics (in training) by
// image_major_sums of x - x[0, c] in double (shifted by a value of the channel, the variance sum1
// / n - (sum0 / n)^2 loses only about (mean - x[0])^2 / var times double's rounding, far below
// float's however far the channel's mean lies from zero, where sums of x^2 would lose mean^2 /
// var times it), then the output runs.
void batch_norm_avx512(const Layout& l, const float* x, const float* w, const float* b, double eps,
                       bool training, float* mean, float* var, float* rstd, float* y, bool relu) {
  const int64_t C = l.channels, S = l.spatial;
  if (training) {
    std::vector<float> centers(static_cast<size_t>(C));
    std::vector<double> sum_d(static_cast<size_t>(C)), sum_dd(static_cast<size_t>(C));
    for (int64_t c = 0; c < C; ++c) centers[size_t(c)] = x[c * S];
    image_major_sums<ChannelSums::shifted_moments, false>(x, nullptr, l, centers.data(), nullptr,
                                                          sum_d.data(), sum_dd.data());
    const double n = double(l.count());
    for (int64_t c = 0; c < C; ++c) {
      const double mean_d = sum_d[size_t(c)] / n;
      mean[c] = float(double(centers[size_t(c)]) + mean_d);
      var[c] = float(std::max(sum_dd[size_t(c)] / n - mean_d * mean_d, 0.0));
    }
  }
  std::vector<ChannelAffine> affine(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const float rs = float(1.0 / std::sqrt(double(var[c]) + eps));
    rstd[c] = rs;
    affine[size_t(c)] = {mean[c], w ? rs * w[c] : rs, b ? b[c] : 0.0f};
  }
  for_each_run(l, [&](int64_t r0, int64_t r1) {
    (relu ? normalize_runs<true> : normalize_runs<false>)(x, y, l, affine.data(), r0, r1);
  });
}

// The float32 backward on AVX-512 the same way: sum(g) and sum(g * (x - mu)) per channel (g
// masked where the forward's ReLU clipped with relu) by image_major_sums, then the input
// gradient's runs.
void batch_norm_backward_avx512(const Layout& l, const float* g, const float* x, const float* w,
                                const float* b, const float* mean, const float* rstd, bool training,
                                bool relu, float* gx, float* gw, float* gb) {
  const int64_t C = l.channels;
  std::vector<ChannelAffine> affine(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c)
    affine[size_t(c)] = {mean[c], w ? rstd[c] * w[c] : rstd[c], b ? b[c] : 0.0f};
  std::vector<double> sum_g(size_t(C), 0.0), sum_gc(size_t(C), 0.0);
  if (gw || gb || (gx && training)) {
    constexpr ChannelSums kind = ChannelSums::grads_and_grads_times_centered;
    (relu ? image_major_sums<kind, true>
          : image_major_sums<kind, false>)(g, x, l, mean, affine.data(), sum_g.data(),
                                           sum_gc.data());
  }
  // training: gx = scale * (g - mean(g) - xhat * mean(g * xhat)), with xhat = (x - mu) * rs;
  // eval: gx = scale * g
  std::vector<float> mean_g(static_cast<size_t>(C)), xc_coef(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    const double sum_gxhat = sum_gc[size_t(c)] * double(rstd[c]);
    if (gw) gw[c] = float(sum_gxhat);
    if (gb) gb[c] = float(sum_g[size_t(c)]);
    mean_g[size_t(c)] = float(sum_g[size_t(c)] / double(l.count()));
    xc_coef[size_t(c)] = float(sum_gxhat / double(l.count())) * rstd[c];
  }
  if (!gx) return;
  auto runs =
      relu ? (training ? input_gradient_runs<true, true> : input_gradient_runs<true, false>)
           : (training ? input_gradient_runs<false, true> : input_gradient_runs<false, false>);
  for_each_run(l, [&](int64_t r0, int64_t r1) {
    runs(g, x, gx, l, affine.data(), mean_g.data(), xc_coef.data(), r0, r1);
  });
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
  if (x.dtype() == DType::f32 && cpu_has_avx512f()) {
    batch_norm_avx512(l, x.data<float>(), weight.defined() ? weight.data<float>() : nullptr,
                      bias.defined() ? bias.data<float>() : nullptr, eps, training,
                      mean.data<float>(), var.data<float>(), rstd.data<float>(), out.data<float>(),
                      relu);
    return;
  }
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
        if (training) {
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
                                     const Tensor& bias, const Tensor& mean, const Tensor& rstd,
                                     bool training, const Tensor& relu_output, const Tensor& gx,
                                     const Tensor& gweight, const Tensor& gbias) {
  const Layout l = layout_of(x);
  const int64_t S = l.spatial, C = l.channels;
  const bool relu = relu_output.defined();
  if (x.dtype() == DType::f32 && cpu_has_avx512f()) {
    batch_norm_backward_avx512(
        l, gy.data<float>(), x.data<float>(), weight.defined() ? weight.data<float>() : nullptr,
        bias.defined() ? bias.data<float>() : nullptr, mean.data<float>(), rstd.data<float>(),
        training, relu, gx.defined() ? gx.data<float>() : nullptr,
        gweight.defined() ? gweight.data<float>() : nullptr,
        gbias.defined() ? gbias.data<float>() : nullptr);
    return;
  }
  QKV_DISPATCH_FLOAT(x.dtype(), "batch_norm_backward", [&] {
    const T* g = gy.data<T>();
    const T* xp = x.data<T>();
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    const T* mp = mean.data<T>();
    const T* rp = rstd.data<T>();
    // The output gives the ReLU's mask (the float32 lanes recompute it from x, w and b).
    const T* ro = relu ? relu_output.data<T>() : nullptr;
    T* o = gx.defined() ? gx.data<T>() : nullptr;
    T* gw = gweight.defined() ? gweight.data<T>() : nullptr;
    T* gb = gbias.defined() ? gbias.data<T>() : nullptr;
    parallel_for(0, C, l.grain(), [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const T mu = mp[c], rs = rp[c];
        const T scale = w ? rs * w[c] : rs;
        // sum(g) and sum(g * (x - mean)); sum(g * xhat) is the second times rstd
        double sum_g = 0, sum_gc = 0;
        if (gw || gb || (o && training)) {
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
