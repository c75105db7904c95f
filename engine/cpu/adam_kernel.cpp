// The fused Adam / AdamW step: one pass reading and writing the parameter and both moments.
//
// The loop is vectorized (omp simd over restrict pointers, the weight-decay choice hoisted out of
// it). Lanes compute exactly the scalar formula, in the same order, so the result does not depend
// on the vector width. This file is compiled with -fno-math-errno: otherwise std::sqrt must be
// able to set errno and GCC keeps the loop scalar (docs/CPU_KERNELS.md, "No errno").
#include <algorithm>
#include <cmath>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/prefetch.h"
#include "engine/dispatch.h"
#include "engine/parallel.h"

namespace qkv::cpu {

namespace {

// Adam's update of n elements. Decoupled (AdamW): the parameter shrinks by `decay` first;
// otherwise (Adam's L2 penalty) the gradient takes wd * p.
template <bool kDecoupled, typename T>
void adam_elements(T* __restrict p, const T* __restrict g, T* __restrict m, T* __restrict v,
                   int64_t n, T b1, T b2, T omb1, T omb2, T step_size, T rb2, T eps, T decay,
                   T wd) {
  _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {
    const T pi = kDecoupled ? p[i] * decay : p[i];
    const T gi = kDecoupled ? g[i] : g[i] + wd * pi;
    const T mi = b1 * m[i] + omb1 * gi;
    const T vi = b2 * v[i] + omb2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * mi / (std::sqrt(vi) * rb2 + eps);
  }
}

// Elements per block of the prefetching loop: 256 floats, 16 cache lines (1024 measured slower).
constexpr int64_t kPrefetchBlock = 256;

// One parameter's coefficients, in double until each range casts them to its dtype.
struct AdamCoefficients {
  double step_size, rb2, decay;
};

}  // namespace

void CpuBackend::adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                           const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                           double eps, double weight_decay, bool decoupled, int64_t step) {
  adam_steps({{param, grad, exp_avg, exp_avg_sq, lr, weight_decay, step}}, beta1, beta2, eps,
             decoupled);
}

void CpuBackend::adam_steps(const std::vector<AdamParameter>& list, double beta1, double beta2,
                            double eps, bool decoupled) {
  std::vector<int64_t> sizes;
  std::vector<AdamCoefficients> coefficients;
  for (const AdamParameter& a : list) {
    QKV_CHECK(a.param.dtype() == DType::f32 || a.param.dtype() == DType::f64, "adam_step",
              "expected float32 or float64, got ", dtype_name(a.param.dtype()));
    const double bias1 = 1 - std::pow(beta1, double(a.step));
    const double bias2 = 1 - std::pow(beta2, double(a.step));
    sizes.push_back(a.param.numel());
    coefficients.push_back({a.lr / bias1, 1 / std::sqrt(bias2), 1 - a.lr * a.weight_decay});
  }
  // Split down to 4096 elements: a weight's gradient comes from two threads in halves of its
  // rows (gemm.cpp, gemm_depth_halves), and each thread updating its own half reads it from its
  // own cache and keeps the same half of the parameter and its moments from step to step. One job
  // for the whole list: each thread goes through its parts of every parameter without waiting for
  // the other at each parameter's end.
  //
  // With more than one thread, every thread read the whole parameter in the forward and backward
  // GEMMs (their bands split rows, so each packs all of the weight), and each line this thread
  // writes must first be taken from the other cores' caches. Asking for the next block's lines
  // for writing (PREFETCHW) while this block computes overlaps those requests; alone they wait
  // one by one (docs/CPU_KERNELS.md, "The optimizer at two threads"). At one thread no other core
  // holds them and the blocks only add loop overhead.
  const bool lines_shared = num_threads() > 1;
  parallel_for_each_range(sizes, 4096, [&](int, size_t index, int64_t b, int64_t end) {
    const AdamParameter& a = list[index];
    const AdamCoefficients& c = coefficients[index];
    QKV_DISPATCH_FLOAT(a.param.dtype(), "adam_step", [&] {
      T* p = a.param.data<T>();
      const T* g = a.grad.data<T>();
      T* m = a.exp_avg.data<T>();
      T* v = a.exp_avg_sq.data<T>();
      // 1 - beta in double, as PyTorch passes it: in float32, 1 - 0.999f is 9.99987e-4:
      // every second moment 1.3e-5 off.
      const T b1 = T(beta1), b2 = T(beta2), omb1 = T(1 - beta1), omb2 = T(1 - beta2);
      const T step_size = T(c.step_size), rb2 = T(c.rb2), e = T(eps);
      const T decay = T(c.decay), wd = T(a.weight_decay);
      auto run = decoupled ? adam_elements<true, T> : adam_elements<false, T>;
      const int64_t block = lines_shared ? kPrefetchBlock : end - b;
      for (int64_t i = b; i < end; i += block) {
        if (lines_shared && i + block < end)
          prefetch_for_writing(p + i + block, std::min(end, i + 2 * block) - (i + block));
        run(p + i, g + i, m + i, v + i, std::min(block, end - i), b1, b2, omb1, omb2, step_size,
            rb2, e, decay, wd);
      }
    });
  });
}

}  // namespace qkv::cpu
