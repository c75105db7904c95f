// Row-wise fused kernels over the last dimension: softmax / log_softmax and layer_norm.
//
// One block per row (grid-stride over rows); each thread walks the row with a stride of
// blockDim.x and the block combines the partial sums. The arithmetic follows
// engine/cpu/row_kernels.cpp: a fully -inf row gives zeros (log: -inf), layer_norm takes its
// statistics in two passes with double accumulators.
#include <cmath>
#include <limits>

#include "cuda/block_reduce.cuh"
#include "cuda/cuda_backend_impl.h"
#include "cuda/launch.cuh"

namespace qkv::cuda {

namespace {

template <typename T>
__global__ void softmax_kernel(int64_t rows, int64_t cols, const T* x, T* y, bool log) {
  __shared__ T scratch[kMaxBlockReduceThreads];
  const T neg_inf = -std::numeric_limits<T>::infinity();
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    T mx = neg_inf;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) mx = max(mx, xr[c]);
    mx = block_reduce(mx, MaxOp<T>{}, scratch);
    if (mx == neg_inf) {  // a fully masked row: zeros, not NaN
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = log ? neg_inf : T(0);
      continue;
    }
    T total = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      T e = std::exp(xr[c] - mx);
      total += e;
      if (!log) yr[c] = e;
    }
    total = block_reduce(total, SumOp<T>{}, scratch);
    if (log) {
      const T lse = mx + std::log(total);
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] = xr[c] - lse;
    } else {
      const T inv = T(1) / total;
      for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) yr[c] *= inv;
    }
  }
}

template <typename T>
__global__ void softmax_backward_kernel(int64_t rows, int64_t cols, const T* gy, const T* y, T* gx,
                                        bool log) {
  __shared__ T scratch[kMaxBlockReduceThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gr = gy + r * cols;
    const T* yr = y + r * cols;
    T* out = gx + r * cols;
    T s = 0;  // log: sum(gy); else: sum(gy * y)
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += log ? gr[c] : gr[c] * yr[c];
    s = block_reduce(s, SumOp<T>{}, scratch);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      if (log) {  // gx = gy - softmax * sum(gy)
        const T p = isinf(yr[c]) ? T(0) : std::exp(yr[c]);
        out[c] = gr[c] - p * s;
      } else {  // gx = y * (gy - sum(gy * y))
        out[c] = yr[c] * (gr[c] - s);
      }
    }
  }
}

template <typename T>
__global__ void layer_norm_kernel(int64_t rows, int64_t cols, const T* x, const T* w, const T* b,
                                  double eps, T* y, T* mean, T* rstd) {
  __shared__ double scratch[kMaxBlockReduceThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* xr = x + r * cols;
    T* yr = y + r * cols;
    double s = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) s += xr[c];
    s = block_reduce(s, SumOp<double>{}, scratch);
    const T mu = T(s / cols);
    double v = 0;  // second pass: centered, stable where E[x^2] - E[x]^2 is not
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x)
      v += double(xr[c] - mu) * double(xr[c] - mu);
    v = block_reduce(v, SumOp<double>{}, scratch);
    const T rs = T(1.0 / std::sqrt(v / cols + eps));
    if (threadIdx.x == 0) mean[r] = mu, rstd[r] = rs;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T h = (xr[c] - mu) * rs;
      yr[c] = (w ? h * w[c] : h) + (b ? b[c] : T(0));
    }
  }
}

// gx = rstd * (gh - mean(gh) - h * mean(gh * h)), with h the normalized x and gh = gy * w.
template <typename T>
__global__ void layer_norm_backward_kernel(int64_t rows, int64_t cols, const T* gy, const T* x,
                                           const T* w, const T* mean, const T* rstd, T* gx) {
  __shared__ double scratch[kMaxBlockReduceThreads];
  for (int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const T* gr = gy + r * cols;
    const T* xr = x + r * cols;
    const T mu = mean[r], rs = rstd[r];
    double sum_gh = 0, sum_ghh = 0;
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T gh = w ? gr[c] * w[c] : gr[c];
      const T h = (xr[c] - mu) * rs;
      sum_gh += gh;
      sum_ghh += double(gh) * h;
    }
    sum_gh = block_reduce(sum_gh, SumOp<double>{}, scratch);
    sum_ghh = block_reduce(sum_ghh, SumOp<double>{}, scratch);
    const T a = T(sum_gh / cols), bcoef = T(sum_ghh / cols);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) {
      const T gh = w ? gr[c] * w[c] : gr[c];
      const T h = (xr[c] - mu) * rs;
      gx[r * cols + c] = rs * (gh - a - h * bcoef);
    }
  }
}

// gweight/gbias are column sums over all rows. Stage 1: block (x, y) sums the rows of chunk y
// for a band of columns into partial[y][col]; stage 2 adds the chunks. Deterministic (no atomics).
constexpr int64_t kRowsPerChunk = 128;

template <typename T>
__global__ void layer_norm_param_partial_kernel(int64_t rows, int64_t cols, const T* gy, const T* x,
                                                const T* mean, const T* rstd, double* partial_w,
                                                double* partial_b) {
  const int64_t c = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= cols) return;
  const int64_t r0 = int64_t(blockIdx.y) * kRowsPerChunk;
  const int64_t r1 = min(rows, r0 + kRowsPerChunk);
  double aw = 0, ab = 0;
  for (int64_t r = r0; r < r1; ++r) {
    const T g = gy[r * cols + c];
    aw += double(g) * ((x[r * cols + c] - mean[r]) * rstd[r]);
    ab += g;
  }
  partial_w[blockIdx.y * cols + c] = aw;
  partial_b[blockIdx.y * cols + c] = ab;
}

template <typename T>
__global__ void layer_norm_param_finish_kernel(int64_t chunks, int64_t cols,
                                               const double* partial_w, const double* partial_b,
                                               T* gw, T* gb) {
  for (int64_t c = grid_start(); c < cols; c += grid_step()) {
    double aw = 0, ab = 0;
    for (int64_t k = 0; k < chunks; ++k)
      aw += partial_w[k * cols + c], ab += partial_b[k * cols + c];
    if (gw) gw[c] = T(aw);
    if (gb) gb[c] = T(ab);
  }
}

// Optional operands (weight, bias, their gradients) are null pointers when undefined.
template <typename T>
T* data_or_null(const Tensor& t) {
  return t.defined() ? t.data<T>() : nullptr;
}

int64_t last_dim(const Tensor& t) { return t.shape().empty() ? 1 : t.shape().back(); }

}  // namespace

void CudaBackend::softmax(const Tensor& x, const Tensor& out, bool log) {
  const int64_t cols = last_dim(x);
  const int64_t rows = cols ? x.numel() / cols : 0;
  if (rows == 0) return;
  QKV_DISPATCH_FLOAT(x.dtype(), "softmax", [&] {
    QKV_LAUNCH(softmax_kernel, blocks_for(rows, 1), row_threads(cols), 0, stream_)
    (rows, cols, x.data<T>(), out.data<T>(), log);
    QKV_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::softmax_backward(const Tensor& gy, const Tensor& y, const Tensor& gx, bool log) {
  const int64_t cols = last_dim(y);
  const int64_t rows = cols ? y.numel() / cols : 0;
  if (rows == 0) return;
  QKV_DISPATCH_FLOAT(y.dtype(), "softmax_backward", [&] {
    QKV_LAUNCH(softmax_backward_kernel, blocks_for(rows, 1), row_threads(cols), 0, stream_)
    (rows, cols, gy.data<T>(), y.data<T>(), gx.data<T>(), log);
    QKV_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                             const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const int64_t rows = mean.numel();
  const int64_t cols = rows ? x.numel() / rows : 0;
  if (rows == 0) return;
  QKV_DISPATCH_FLOAT(x.dtype(), "layer_norm", [&] {
    QKV_LAUNCH(layer_norm_kernel, blocks_for(rows, 1), row_threads(cols), 0, stream_)
    (rows, cols, x.data<T>(), data_or_null<T>(weight), data_or_null<T>(bias), eps, out.data<T>(),
     mean.data<T>(), rstd.data<T>());
    QKV_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                                      const Tensor& mean, const Tensor& rstd, const Tensor& gx,
                                      const Tensor& gweight, const Tensor& gbias) {
  const int64_t rows = mean.numel();
  const int64_t cols = rows ? x.numel() / rows : 0;
  if (rows == 0) return;
  QKV_DISPATCH_FLOAT(x.dtype(), "layer_norm_backward", [&] {
    QKV_LAUNCH(layer_norm_backward_kernel, blocks_for(rows, 1), row_threads(cols), 0, stream_)
    (rows, cols, gy.data<T>(), x.data<T>(), data_or_null<T>(weight), mean.data<T>(), rstd.data<T>(),
     gx.data<T>());
    QKV_CUDA_CHECK_LAUNCH();
    if (!gweight.defined() && !gbias.defined()) return;
    const int64_t chunks = (rows + kRowsPerChunk - 1) / kRowsPerChunk;
    QKV_CHECK(chunks < 65536, "layer_norm_backward", "too many rows: ", rows);
    // Scratch from the caching allocator; freed on return, which is safe on our one stream.
    Tensor partial = Tensor::empty({2, chunks, cols}, DType::f64, device());
    double* pw = partial.data<double>();
    double* pb = pw + chunks * cols;
    dim3 grid(unsigned((cols + kThreads - 1) / kThreads), unsigned(chunks));
    QKV_LAUNCH(layer_norm_param_partial_kernel, grid, kThreads, 0, stream_)
    (rows, cols, gy.data<T>(), x.data<T>(), mean.data<T>(), rstd.data<T>(), pw, pb);
    QKV_CUDA_CHECK_LAUNCH();
    QKV_LAUNCH(layer_norm_param_finish_kernel, blocks_for(cols), kThreads, 0, stream_)
    (chunks, cols, pw, pb, data_or_null<T>(gweight), data_or_null<T>(gbias));
    QKV_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace qkv::cuda
