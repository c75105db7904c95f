// Random fills and the fused Adam step.
#include <cmath>

#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/dispatch.h"
#include "engine/parallel.h"
#include "engine/random.h"

namespace qkv::cpu {

namespace {
template <typename F>
void fill_with(const Tensor& out, F value_at) {
  QKV_DISPATCH_FLOAT(out.dtype(), "random", [&] {
    T* p = out.data<T>();
    parallel_for(0, out.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = T(value_at(i));
    });
  });
}
}  // namespace

void CpuBackend::random_uniform(const Tensor& out, uint64_t seed, uint64_t offset, double low,
                                double high) {
  fill_with(out, [&](int64_t i) { return low + (high - low) * philox::uniform(seed, offset + i); });
}

void CpuBackend::random_normal(const Tensor& out, uint64_t seed, uint64_t offset, double mean,
                               double std) {
  fill_with(out, [&](int64_t i) { return mean + std * philox::normal(seed, offset + i); });
}

void CpuBackend::random_bernoulli(const Tensor& out, uint64_t seed, uint64_t offset, double p) {
  fill_with(out, [&](int64_t i) { return philox::uniform(seed, offset + i) < p ? 1.0 : 0.0; });
}

void CpuBackend::adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                           const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                           double eps, double weight_decay, bool decoupled, int64_t step) {
  const double bias1 = 1 - std::pow(beta1, double(step));
  const double bias2 = 1 - std::pow(beta2, double(step));
  QKV_DISPATCH_FLOAT(param.dtype(), "adam_step", [&] {
    T* p = param.data<T>();
    const T* g = grad.data<T>();
    T* m = exp_avg.data<T>();
    T* v = exp_avg_sq.data<T>();
    const T b1 = T(beta1), b2 = T(beta2), step_size = T(lr / bias1), wd = T(weight_decay);
    const T rb2 = T(1 / std::sqrt(bias2)), e = T(eps), decay = T(1 - lr * weight_decay);
    parallel_for(0, param.numel(), 16384, [&](int64_t b, int64_t end) {
      for (int64_t i = b; i < end; ++i) {
        T gi = g[i];
        if (decoupled)
          p[i] *= decay;
        else
          gi += wd * p[i];
        m[i] = b1 * m[i] + (T(1) - b1) * gi;
        v[i] = b2 * v[i] + (T(1) - b2) * gi * gi;
        p[i] -= step_size * m[i] / (std::sqrt(v[i]) * rb2 + e);
      }
    });
  });
}

}  // namespace qkv::cpu
