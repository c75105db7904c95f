// clip_grad_norm_'s two passes over the gradients, each one job over the whole list.
//
// The squares are summed, and the gradients scaled, by parallel_for_each_range with Adam's split
// (engine/cpu/adam_kernel.cpp): each thread reads and writes the part of every gradient it will
// update in the optimizer step (for a weight whose gradient's product split its rows, the part
// that thread wrote in the backward), and the pool is woken twice for the list, where the
// composed ops (square, sum, mul, copy_) make five passes per gradient, each split its own way.
#include <algorithm>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/dispatch.h"
#include "engine/parallel.h"

namespace qkv::cpu {

namespace {

// Adam's grain: the same split of each tensor as its step.
constexpr int64_t kGrain = 4096;

// The tensors the kernels take (contiguous float32 and float64) and the rest, which go to
// Backend's composed default.
struct Split {
  std::vector<Tensor> kernel, rest;
  std::vector<int64_t> sizes;  // of the kernel's
};

Split split(const std::vector<Tensor>& xs) {
  Split s;
  for (const Tensor& x : xs) {
    if (x.is_contiguous() && (x.dtype() == DType::f32 || x.dtype() == DType::f64)) {
      s.kernel.push_back(x);
      s.sizes.push_back(x.numel());
    } else {
      s.rest.push_back(x);
    }
  }
  return s;
}

// Each square in T (torch's norm squares in the tensor's dtype), added in double lanes.
template <typename T>
double squares_of(const T* __restrict x, int64_t n) {
  double total = 0;
  _Pragma("omp simd reduction(+ : total)") for (int64_t i = 0; i < n; ++i) {
    const T square = x[i] * x[i];
    total += double(square);
  }
  return total;
}

}  // namespace

double CpuBackend::sum_of_squares(const std::vector<Tensor>& xs) {
  const Split s = split(xs);
  // One total per chunk, a cache line apart, added in chunk order at the end.
  struct alignas(64) Partial {
    double total = 0;
  };
  std::vector<Partial> partials(static_cast<size_t>(num_threads()));
  parallel_for_each_range(s.sizes, kGrain, [&](int chunk, size_t i, int64_t b, int64_t e) {
    QKV_DISPATCH_FLOAT(s.kernel[i].dtype(), "sum_of_squares", [&] {
      partials[size_t(chunk)].total += squares_of(s.kernel[i].data<T>() + b, e - b);
    });
  });
  double total = s.rest.empty() ? 0 : Backend::sum_of_squares(s.rest);
  for (const Partial& p : partials) total += p.total;
  return total;
}

void CpuBackend::scale_(const std::vector<Tensor>& xs, double scale) {
  const Split s = split(xs);
  parallel_for_each_range(s.sizes, kGrain, [&](int, size_t i, int64_t b, int64_t e) {
    QKV_DISPATCH_FLOAT(s.kernel[i].dtype(), "scale_", [&] {
      T* __restrict x = s.kernel[i].data<T>() + b;
      const T factor = T(scale);  // mul_scalar's rounding of the scalar
      _Pragma("omp simd") for (int64_t j = 0; j < e - b; ++j) x[j] *= factor;
    });
  });
  if (!s.rest.empty()) Backend::scale_(s.rest, scale);
}

}  // namespace qkv::cpu
