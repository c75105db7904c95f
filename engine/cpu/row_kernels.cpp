// Row-wise fused kernels over the last dimension: softmax / log_softmax and layer_norm.
#include <cmath>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/lane_sum.h"
#include "engine/cpu/vec_math.h"
#include "engine/dispatch.h"
#include "engine/parallel.h"

namespace qkv::cpu {

namespace {
// float rows use the vectorizable exp; double rows keep libm's
inline float row_exp(float v) { return fast_exp(v); }
inline double row_exp(double v) { return std::exp(v); }

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

// layer_norm's backward takes rows in chunks of this many; each chunk sums its own share of the
// weight and bias gradients, and the chunks' shares are added in order: the same sums whatever
// the thread count.
constexpr int64_t kLayerNormChunk = 32;

// One row of layer_norm's backward: gx into o, and gy * h and gy added into the chunk's shares of
// the weight and bias gradients (share_w null: no affine parameters asked for; the first row of
// a chunk finds them zeroed by the caller's vector).
template <typename T>
void layer_norm_backward_row(const T* gr, const T* xr, const T* w, T mu, T rs, int64_t cols, T* o,
                             T* share_w, T* share_b) {
  const T mean_gh = lane_sum<T>(cols, [&](int64_t c) { return gr[c] * w[c]; }) / T(cols);
  const T mean_ghh =
      lane_sum<T>(cols, [&](int64_t c) { return gr[c] * w[c] * ((xr[c] - mu) * rs); }) / T(cols);
  if (share_w) {
    _Pragma("omp simd") for (int64_t c = 0; c < cols; ++c) {
      const T h = (xr[c] - mu) * rs;
      o[c] = rs * (gr[c] * w[c] - mean_gh - h * mean_ghh);
      share_w[c] += gr[c] * h;
      share_b[c] += gr[c];
    }
  } else {
    _Pragma("omp simd") for (int64_t c = 0; c < cols; ++c) {
      const T h = (xr[c] - mu) * rs;
      o[c] = rs * (gr[c] * w[c] - mean_gh - h * mean_ghh);
    }
  }
}
}  // namespace

void CpuBackend::softmax(const Tensor& x, const Tensor& out, bool log) {
  const int64_t cols = x.shape().empty() ? 1 : x.shape().back();
  const int64_t rows = cols ? x.numel() / cols : 0;
  QKV_DISPATCH_FLOAT(x.dtype(), "softmax", [&] {
    const T* xp = x.data<T>();
    T* yp = out.data<T>();
    parallel_for(0, rows, row_grain(cols), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* xr = xp + r * cols;
        T* yr = yp + r * cols;
        T mx = -std::numeric_limits<T>::infinity();
        _Pragma("omp simd reduction(max : mx)") for (int64_t c = 0; c < cols; ++c) mx =
            xr[c] > mx ? xr[c] : mx;
        if (mx == -std::numeric_limits<T>::infinity()) {
          // every entry is -inf (a fully masked row): define the result as zeros, not NaN
          for (int64_t c = 0; c < cols; ++c)
            yr[c] = log ? -std::numeric_limits<T>::infinity() : T(0);
          continue;
        }
        T total = 0;
        if (log) {
          _Pragma("omp simd reduction(+ : total)") for (int64_t c = 0; c < cols; ++c) total +=
              row_exp(xr[c] - mx);
          // (x - max) - log(total): subtracting the large max first keeps the low bits
          T log_total = std::log(total);
          _Pragma("omp simd") for (int64_t c = 0; c < cols; ++c) yr[c] = (xr[c] - mx) - log_total;
        } else {
          _Pragma("omp simd reduction(+ : total)") for (int64_t c = 0; c < cols; ++c) {
            T ev = row_exp(xr[c] - mx);
            yr[c] = ev;
            total += ev;
          }
          T inv = T(1) / total;
          _Pragma("omp simd") for (int64_t c = 0; c < cols; ++c) yr[c] *= inv;
        }
      }
    });
  });
}

void CpuBackend::softmax_backward(const Tensor& gy, const Tensor& y, const Tensor& gx, bool log) {
  const int64_t cols = y.shape().empty() ? 1 : y.shape().back();
  const int64_t rows = cols ? y.numel() / cols : 0;
  QKV_DISPATCH_FLOAT(y.dtype(), "softmax_backward", [&] {
    const T* g = gy.data<T>();
    const T* yp = y.data<T>();
    T* o = gx.data<T>();
    parallel_for(0, rows, row_grain(cols), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* gr = g + r * cols;
        const T* yr = yp + r * cols;
        T* orow = o + r * cols;
        if (log) {  // gx = gy - softmax * sum(gy)
          T s = 0;
          for (int64_t c = 0; c < cols; ++c) s += gr[c];
          for (int64_t c = 0; c < cols; ++c) {
            T p = std::isinf(yr[c]) ? T(0) : std::exp(yr[c]);
            orow[c] = gr[c] - p * s;
          }
        } else {  // gx = y * (gy - sum(gy * y))
          T dot = 0;
          for (int64_t c = 0; c < cols; ++c) dot += gr[c] * yr[c];
          for (int64_t c = 0; c < cols; ++c) orow[c] = yr[c] * (gr[c] - dot);
        }
      }
    });
  });
}

void CpuBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                            const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const int64_t rows = mean.numel();
  const int64_t cols = rows ? x.numel() / rows : 0;
  QKV_DISPATCH_FLOAT(x.dtype(), "layer_norm", [&] {
    const T* xp = x.data<T>();
    const T* w = weight.defined() ? weight.data<T>() : nullptr;
    const T* bb = bias.defined() ? bias.data<T>() : nullptr;
    T* yp = out.data<T>();
    T* mp = mean.data<T>();
    T* rp = rstd.data<T>();
    parallel_for(0, rows, row_grain(cols), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* xr = xp + r * cols;
        T* yr = yp + r * cols;
        // two passes (mean, then centered variance): stable where E[x^2]-E[x]^2 is not. The mean
        // sums x - x[0]: float lanes summing values far from zero (x near 100 with a spread of
        // 1) would lose the low bits that x - mean is made of.
        const T x0 = cols > 0 ? xr[0] : T(0);
        const T mu = x0 + lane_sum<T>(cols, [&](int64_t c) { return xr[c] - x0; }) / T(cols);
        const T v = lane_sum<T>(cols, [&](int64_t c) {
          const T d = xr[c] - mu;
          return d * d;
        });
        const T rs = T(1) / std::sqrt(v / T(cols) + T(eps));
        mp[r] = mu, rp[r] = rs;
        if (w && bb) {
          _Pragma("omp simd") for (int64_t c = 0; c < cols; ++c) yr[c] =
              (xr[c] - mu) * rs * w[c] + bb[c];
        } else {
          for (int64_t c = 0; c < cols; ++c) {
            T h = (xr[c] - mu) * rs;
            yr[c] = (w ? h * w[c] : h) + (bb ? bb[c] : T(0));
          }
        }
      }
    });
  });
}

void CpuBackend::layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                                     const Tensor& mean, const Tensor& rstd, const Tensor& gx,
                                     const Tensor& gweight, const Tensor& gbias) {
  const int64_t rows = mean.numel();
  const int64_t cols = rows ? x.numel() / rows : 0;
  QKV_DISPATCH_FLOAT(x.dtype(), "layer_norm_backward", [&] {
    const T* g = gy.data<T>();
    const T* xp = x.data<T>();
    // Without a weight, a row of ones: one loop body for both, which the compiler vectorizes (it
    // does not vectorize a load that depends on whether the pointer is null).
    std::vector<T> unit_weight(weight.defined() ? 0 : size_t(cols), T(1));
    const T* w = weight.defined() ? weight.data<T>() : unit_weight.data();
    const T* mp = mean.data<T>();
    const T* rp = rstd.data<T>();
    T* o = gx.data<T>();
    // gx: per row, with h = normalized x and gh = gy * w:
    //   gx = rstd * (gh - mean(gh) - h * mean(gh * h))
    // and, in the same pass, each chunk's share of gweight = sum(gy * h) and gbias = sum(gy).
    T* gw = gweight.defined() ? gweight.data<T>() : nullptr;
    T* gb = gbias.defined() ? gbias.data<T>() : nullptr;
    const int64_t chunks = (rows + kLayerNormChunk - 1) / kLayerNormChunk;
    std::vector<T> shares(size_t(gw || gb ? chunks * 2 * cols : 0));
    const int64_t grain = std::max<int64_t>(1, row_grain(cols) / kLayerNormChunk);
    parallel_for(0, chunks, grain, [&](int64_t c0, int64_t c1) {
      for (int64_t chunk = c0; chunk < c1; ++chunk) {
        T* share_w = shares.empty() ? nullptr : shares.data() + chunk * 2 * cols;
        T* share_b = share_w ? share_w + cols : nullptr;
        const int64_t r1 = std::min(rows, (chunk + 1) * kLayerNormChunk);
        for (int64_t r = chunk * kLayerNormChunk; r < r1; ++r)
          layer_norm_backward_row(g + r * cols, xp + r * cols, w, mp[r], rp[r], cols, o + r * cols,
                                  share_w, share_b);
      }
    });
    // the chunks' shares, in chunk order, in double
    for (int64_t c = 0; c < cols && !shares.empty(); ++c) {
      double sw = 0, sb = 0;
      for (int64_t chunk = 0; chunk < chunks; ++chunk) {
        sw += shares[size_t(chunk * 2 * cols + c)];
        sb += shares[size_t(chunk * 2 * cols + cols + c)];
      }
      if (gw) gw[c] = T(sw);
      if (gb) gb[c] = T(sb);
    }
  });
}

}  // namespace qkv::cpu
