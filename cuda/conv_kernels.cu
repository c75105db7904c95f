// im2col and col2im on the GPU (the CPU's are in engine/cpu/conv_kernels.cpp, with the index map).
//
// im2col: one thread per element of cols, reading its input element or the padding value.
// col2im: one thread per *input* element, summing the cols entries that read it - a gather
// instead of a scatter, so there are no atomics and the sum is deterministic.
#include "cuda/cuda_backend_impl.h"
#include "cuda/launch.cuh"

namespace qkv::cuda {

namespace {

struct Geometry {
  int64_t C, H, W, Ho, Wo;
  Window2d w;
};

template <typename T>
__global__ void im2col_kernel(int64_t total, Geometry g, const T* x, T* cols, T pad_value) {
  const int64_t kk = g.w.kernel_h * g.w.kernel_w, L = g.Ho * g.Wo;
  for (int64_t p = grid_start(); p < total; p += grid_step()) {
    // p = ((plane * kk + tap) * L + oh * Wo + ow), plane = n * C + c
    const int64_t l = p % L, tap = (p / L) % kk, plane = p / (L * kk);
    const int64_t oh = l / g.Wo, ow = l % g.Wo, i = tap / g.w.kernel_w, j = tap % g.w.kernel_w;
    const int64_t ih = oh * g.w.stride_h - g.w.pad_h + i * g.w.dilation_h;
    const int64_t iw = ow * g.w.stride_w - g.w.pad_w + j * g.w.dilation_w;
    const bool inside = ih >= 0 && ih < g.H && iw >= 0 && iw < g.W;
    cols[p] = inside ? x[(plane * g.H + ih) * g.W + iw] : pad_value;
  }
}

template <typename T>
__global__ void col2im_kernel(int64_t total, Geometry g, const T* cols, T* x) {
  const int64_t kk = g.w.kernel_h * g.w.kernel_w, L = g.Ho * g.Wo;
  for (int64_t p = grid_start(); p < total; p += grid_step()) {
    const int64_t iw = p % g.W, ih = (p / g.W) % g.H, plane = p / (g.W * g.H);
    T acc = 0;
    for (int64_t i = 0; i < g.w.kernel_h; ++i) {
      // output row oh reads ih when oh * sh = ih + ph - i * dh
      const int64_t hh = ih + g.w.pad_h - i * g.w.dilation_h;
      if (hh < 0 || hh % g.w.stride_h != 0 || hh / g.w.stride_h >= g.Ho) continue;
      const int64_t oh = hh / g.w.stride_h;
      for (int64_t j = 0; j < g.w.kernel_w; ++j) {
        const int64_t ww = iw + g.w.pad_w - j * g.w.dilation_w;
        if (ww < 0 || ww % g.w.stride_w != 0 || ww / g.w.stride_w >= g.Wo) continue;
        const int64_t ow = ww / g.w.stride_w;
        acc += cols[(plane * kk + i * g.w.kernel_w + j) * L + oh * g.Wo + ow];
      }
    }
    x[p] += acc;
  }
}

Geometry geometry_of(const Tensor& x, const Window2d& w) {
  return {x.size(1), x.size(2), x.size(3), w.out_h(x.size(2)), w.out_w(x.size(3)), w};
}

}  // namespace

void CudaBackend::im2col(const Tensor& x, const Window2d& w, const Tensor& cols, double pad_value) {
  const Geometry g = geometry_of(x, w);
  const int64_t total = cols.numel();
  if (total == 0) return;
  QKV_DISPATCH_FLOAT(x.dtype(), "im2col", [&] {
    QKV_LAUNCH(im2col_kernel, blocks_for(total), kThreads, 0, stream_)
    (total, g, x.data<T>(), cols.data<T>(), T(pad_value));
    QKV_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::col2im(const Tensor& cols, const Window2d& w, const Tensor& x) {
  const Geometry g = geometry_of(x, w);
  const int64_t total = x.numel();
  if (total == 0) return;
  QKV_DISPATCH_FLOAT(x.dtype(), "col2im", [&] {
    QKV_LAUNCH(col2im_kernel, blocks_for(total), kThreads, 0, stream_)
    (total, g, cols.data<T>(), x.data<T>());
    QKV_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace qkv::cuda
