// Random fills and the fused Adam step.
//
// Element i of a uniform or normal fill uses Philox counter offset + i, of a Bernoulli fill word
// i % 4 of counter offset + i / 4 (engine/random.h, compiled for the device), and the value is
// computed in double then rounded to the element type exactly as on the CPU, so a seeded uniform or
// Bernoulli fill gives the CPU's bits. (A normal fill goes through log and cos, whose device
// versions may differ from glibc's in the last bit of a double.)
#include <cmath>

#include "cuda/cuda_backend_impl.h"
#include "cuda/launch.cuh"
#include "engine/example_draws.h"
#include "engine/random.h"

namespace qkv::cuda {

namespace {

enum class Distribution { uniform, normal, bernoulli };

template <typename T>
__global__ void random_kernel(int64_t n, T* out, Distribution dist, uint64_t seed, uint64_t offset,
                              double a, double b) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) {
    const uint64_t ctr = offset + uint64_t(i);
    double v;
    switch (dist) {
      // the same fused multiply-adds as the CPU (engine/random.h), so the bits agree
      case Distribution::uniform:
        v = philox::uniform_between(a, b, philox::uniform(seed, ctr));
        break;
      case Distribution::normal:
        v = philox::normal_with(a, b, philox::normal(seed, ctr));
        break;
      default:  // four draws per Philox block, as on the CPU (engine/random.h); b when drawn
        v = philox::bernoulli(seed, offset, uint64_t(i), philox::bernoulli_threshold(a)) ? b : 0.0;
        break;
    }
    out[i] = T(v);
  }
}

void fill_random(const Tensor& out, Distribution dist, uint64_t seed, uint64_t offset, double a,
                 double b, cudaStream_t stream) {
  const int64_t n = out.numel();
  if (n == 0) return;
  QKV_DISPATCH_FLOAT(out.dtype(), "random", [&] {
    QKV_LAUNCH(random_kernel, blocks_for(n), kThreads, 0, stream)
    (n, out.data<T>(), dist, seed, offset, a, b);
    QKV_CUDA_CHECK_LAUNCH();
  });
}

// Element i draws exactly as the CPU's random_bernoulli_by_example does (engine/random.h).
template <typename T>
__global__ void bernoulli_by_example_kernel(int64_t n, T* out, uint64_t key,
                                            philox::ExampleLayout layout, const int64_t* examples,
                                            uint64_t threshold, double value) {
  const uint64_t row = layout.row();
  for (int64_t i = grid_start(); i < n; i += grid_step()) {
    const uint64_t example = uint64_t(examples[uint64_t(i) / row]);
    out[i] = philox::example_bernoulli_at(key, layout, example, uint64_t(i), threshold) ? T(value)
                                                                                        : T(0);
  }
}

template <typename T>
struct AdamParams {
  // one_minus_beta*: 1 - beta computed in double, as PyTorch passes it (in float32,
  // 1 - 0.999f is 9.99987e-4: every second moment 1.3e-5 off)
  T beta1, beta2, one_minus_beta1, one_minus_beta2, step_size, weight_decay, rsqrt_bias2, eps,
      decay;
  bool decoupled;
};

template <typename T>
__global__ void adam_kernel(int64_t n, T* p, const T* g, T* m, T* v, AdamParams<T> a) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) {
    T gi = g[i];
    if (a.decoupled)
      p[i] *= a.decay;
    else
      gi += a.weight_decay * p[i];
    const T mi = a.beta1 * m[i] + a.one_minus_beta1 * gi;
    const T vi = a.beta2 * v[i] + a.one_minus_beta2 * gi * gi;
    m[i] = mi, v[i] = vi;
    p[i] -= a.step_size * mi / (std::sqrt(vi) * a.rsqrt_bias2 + a.eps);
  }
}

}  // namespace

void CudaBackend::random_uniform(const Tensor& out, uint64_t seed, uint64_t offset, double low,
                                 double high) {
  fill_random(out, Distribution::uniform, seed, offset, low, high, stream_);
}

void CudaBackend::random_normal(const Tensor& out, uint64_t seed, uint64_t offset, double mean,
                                double std) {
  fill_random(out, Distribution::normal, seed, offset, mean, std, stream_);
}

void CudaBackend::random_bernoulli(const Tensor& out, uint64_t seed, uint64_t offset, double p,
                                   double value) {
  fill_random(out, Distribution::bernoulli, seed, offset, p, value, stream_);
}

void CudaBackend::random_bernoulli_by_example(const Tensor& out, uint64_t key,
                                              const Tensor& examples, double p, double value) {
  const philox::ExampleLayout layout =
      example_layout(out.shape(), size_t(examples.numel()), "dropout");
  const int64_t n = out.numel();
  if (n == 0) return;
  const uint64_t threshold = philox::bernoulli_threshold(p);
  QKV_DISPATCH_FLOAT(out.dtype(), "random_bernoulli_by_example", [&] {
    QKV_LAUNCH(bernoulli_by_example_kernel, blocks_for(n), kThreads, 0, stream_)
    (n, out.data<T>(), key, layout, examples.data<int64_t>(), threshold, value);
    QKV_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                            const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                            double eps, double weight_decay, bool decoupled, int64_t step) {
  const int64_t n = param.numel();
  if (n == 0) return;
  // Same scalars, computed on the host in double, as the CPU step.
  const double bias1 = 1 - std::pow(beta1, double(step));
  const double bias2 = 1 - std::pow(beta2, double(step));
  QKV_DISPATCH_FLOAT(param.dtype(), "adam_step", [&] {
    AdamParams<T> a{T(beta1),
                    T(beta2),
                    T(1 - beta1),
                    T(1 - beta2),
                    T(lr / bias1),
                    T(weight_decay),
                    T(1 / std::sqrt(bias2)),
                    T(eps),
                    T(1 - lr * weight_decay),
                    decoupled};
    QKV_LAUNCH(adam_kernel, blocks_for(n), kThreads, 0, stream_)
    (n, param.data<T>(), grad.data<T>(), exp_avg.data<T>(), exp_avg_sq.data<T>(), a);
    QKV_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace qkv::cuda
