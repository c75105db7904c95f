// Batch normalization over x [N, C, S...]: each channel's values are N contiguous runs of S (the
// spatial size), so a channel's statistics are vectorized sums over those runs, in double as the
// row kernels accumulate, and the threads take whole channels (no two write the same output).
#include <cmath>

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
        if (gw || gb || (o && training)) {
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
