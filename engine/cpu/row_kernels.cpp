// Row-wise fused kernels over the last dimension: softmax / log_softmax and layer_norm.
#include <cmath>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/vec_math.h"
#include "engine/dispatch.h"
#include "engine/parallel.h"

namespace qkv::cpu {

namespace {
// float rows use the vectorizable exp; double rows keep libm's
inline float row_exp(float v) { return fast_exp(v); }
inline double row_exp(double v) { return std::exp(v); }

int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1)); }

// The sum of term(c) for c < n in double, kept as sixteen partial sums (one per vector lane) that
// are added up at the end. A single running sum puts one add per element on the critical path
// and cannot be vectorized without reordering it; this order is fixed, so results stay
// deterministic. (An `omp simd reduction` here is not vectorized by GCC inside the dispatch
// macro's lambda.)
template <typename Term>
double lane_sum(int64_t n, Term term) {
  constexpr int64_t kLanes = 16;
  double part[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= n; c += kLanes)
    for (int64_t l = 0; l < kLanes; ++l) part[l] += term(c + l);
  for (; c < n; ++c) part[0] += term(c);
  // pairwise, halving: four dependent vector adds instead of fifteen dependent scalar ones
  for (int64_t half = kLanes / 2; half > 0; half /= 2)
    for (int64_t l = 0; l < half; ++l) part[l] += part[l + half];
  return part[0];
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
        // two passes (mean, then centered variance): stable where E[x^2]-E[x]^2 is not
        const double s = lane_sum(cols, [&](int64_t c) { return double(xr[c]); });
        T mu = T(s / cols);
        const double v = lane_sum(cols, [&](int64_t c) {
          const double d = xr[c] - mu;
          return d * d;
        });
        T rs = T(1.0 / std::sqrt(v / cols + eps));
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
    parallel_for(0, rows, row_grain(cols), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        const T* gr = g + r * cols;
        const T* xr = xp + r * cols;
        T mu = mp[r], rs = rp[r];
        const double sum_gh = lane_sum(cols, [&](int64_t c) { return double(gr[c] * w[c]); });
        const double sum_ghh = lane_sum(
            cols, [&](int64_t c) { return double(gr[c] * w[c]) * double((xr[c] - mu) * rs); });
        T a = T(sum_gh / cols), bcoef = T(sum_ghh / cols);
        _Pragma("omp simd") for (int64_t c = 0; c < cols; ++c) {
          T gh = gr[c] * w[c];
          T h = (xr[c] - mu) * rs;
          o[r * cols + c] = rs * (gh - a - h * bcoef);
        }
      }
    });
    // gweight / gbias: column sums over rows; each thread takes a band of columns so no two
    // threads write the same accumulator.
    if (gweight.defined() || gbias.defined()) {
      T* gw = gweight.defined() ? gweight.data<T>() : nullptr;
      T* gb = gbias.defined() ? gbias.data<T>() : nullptr;
      parallel_for(0, cols, 64, [&](int64_t c0, int64_t c1) {
        std::vector<double> aw(c1 - c0, 0.0), ab(c1 - c0, 0.0);
        for (int64_t r = 0; r < rows; ++r) {
          const T* gr = g + r * cols;
          const T* xr = xp + r * cols;
          T mu = mp[r], rs = rp[r];
          for (int64_t c = c0; c < c1; ++c) {
            aw[c - c0] += double(gr[c]) * ((xr[c] - mu) * rs);
            ab[c - c0] += gr[c];
          }
        }
        for (int64_t c = c0; c < c1; ++c) {
          if (gw) gw[c] = T(aw[c - c0]);
          if (gb) gb[c] = T(ab[c - c0]);
        }
      });
    }
  });
}

}  // namespace qkv::cpu
