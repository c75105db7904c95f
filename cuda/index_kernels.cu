// Indexing kernels: index_select / index_add (embedding and its backward), gather / scatter_add.
//
// Tensors are viewed as [outer, size along dim, inner] (engine/split_at.h); indices were
// bounds-checked by the op. One thread per element of the smaller side; the adds use atomicAdd
// because indices may repeat (so float sums may differ from the CPU's in the last bits, and from
// run to run).
#include "cuda/cuda_backend_impl.h"
#include "cuda/launch.cuh"
#include "engine/split_at.h"

namespace qkv::cuda {

namespace {

// out[o][i][k] = x[o][index[i]][k]
template <typename T>
__global__ void index_select_kernel(int64_t total, Split3 s, int64_t n, const int64_t* index,
                                    const T* x, T* out) {
  for (int64_t p = grid_start(); p < total; p += grid_step()) {
    const int64_t k = p % s.inner, i = (p / s.inner) % n, o = p / (s.inner * n);
    out[p] = x[(o * s.mid + index[i]) * s.inner + k];
  }
}

// out[o][index[i]][k] += src[o][i][k]
template <typename T>
__global__ void index_add_kernel(int64_t total, Split3 s, int64_t n, const int64_t* index,
                                 const T* src, T* out) {
  for (int64_t p = grid_start(); p < total; p += grid_step()) {
    const int64_t k = p % s.inner, i = (p / s.inner) % n, o = p / (s.inner * n);
    atomicAdd(out + (o * s.mid + index[i]) * s.inner + k, src[p]);
  }
}

// out[o][j][k] = x[o][index[o][j][k]][k]
template <typename T>
__global__ void gather_kernel(int64_t total, Split3 sx, Split3 si, const int64_t* index, const T* x,
                              T* out) {
  for (int64_t p = grid_start(); p < total; p += grid_step()) {
    const int64_t k = p % si.inner, o = p / (si.inner * si.mid);
    out[p] = x[(o * sx.mid + index[p]) * sx.inner + k];
  }
}

// out[o][index[o][j][k]][k] += src[o][j][k]
template <typename T>
__global__ void scatter_add_kernel(int64_t total, Split3 so, Split3 si, const int64_t* index,
                                   const T* src, T* out) {
  for (int64_t p = grid_start(); p < total; p += grid_step()) {
    const int64_t k = p % si.inner, o = p / (si.inner * si.mid);
    atomicAdd(out + (o * so.mid + index[p]) * so.inner + k, src[p]);
  }
}

}  // namespace

void CudaBackend::index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) {
  const Split3 s = split_at(x.shape(), dim);
  const int64_t n = index.numel(), total = s.outer * n * s.inner;
  if (total == 0) return;
  QKV_DISPATCH_ALL(x.dtype(), "index_select", [&] {
    QKV_LAUNCH(index_select_kernel, blocks_for(total), kThreads, 0, stream_)
    (total, s, n, index.data<int64_t>(), x.data<T>(), out.data<T>());
    QKV_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  const Split3 s = split_at(out.shape(), dim);
  const int64_t n = index.numel(), total = s.outer * n * s.inner;
  if (total == 0) return;
  QKV_DISPATCH_FLOAT(out.dtype(), "index_add", [&] {
    QKV_LAUNCH(index_add_kernel, blocks_for(total), kThreads, 0, stream_)
    (total, s, n, index.data<int64_t>(), src.data<T>(), out.data<T>());
    QKV_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) {
  const Split3 sx = split_at(x.shape(), dim), si = split_at(index.shape(), dim);
  const int64_t total = index.numel();
  if (total == 0) return;
  QKV_DISPATCH_ALL(x.dtype(), "gather", [&] {
    QKV_LAUNCH(gather_kernel, blocks_for(total), kThreads, 0, stream_)
    (total, sx, si, index.data<int64_t>(), x.data<T>(), out.data<T>());
    QKV_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  const Split3 so = split_at(out.shape(), dim), si = split_at(index.shape(), dim);
  const int64_t total = index.numel();
  if (total == 0) return;
  QKV_DISPATCH_FLOAT(out.dtype(), "scatter_add", [&] {
    QKV_LAUNCH(scatter_add_kernel, blocks_for(total), kThreads, 0, stream_)
    (total, so, si, index.data<int64_t>(), src.data<T>(), out.data<T>());
    QKV_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace qkv::cuda
