// Shared helpers for the CUDA suite: the "is there a GPU" precondition, random inputs, and
// comparisons of a GPU result against the CPU backend's.
#pragma once

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/error.h"
#include "engine/ops.h"

#ifdef QKV_WITH_CUDA
#include "cuda/cuda_backend.h"
#endif

namespace qkv::test {

// Precondition for every GPU test: a failed precondition makes Boost.Test report the case as
// skipped (with this message), so a machine without a GPU never counts it as passed.
inline boost::test_tools::assertion_result gpu_present(boost::unit_test::test_unit_id) {
  boost::test_tools::assertion_result result(false);
#ifdef QKV_WITH_CUDA
  if (cuda::init()) return true;
  result.message() << "no GPU: " << cuda::status();
#else
  result.message() << "built without CUDA";
#endif
  return result;
}

inline Backend& host() { return cpu::cpu_backend(); }  // the reference
inline Backend& gpu() { return backend_for(Device::cuda()); }

inline Tensor on_gpu(const Tensor& t) { return t.to(Device::cuda()); }
inline Tensor on_cpu(const Tensor& t) { return t.to(Device::cpu()); }

// Uniform random values in [low, high) on the CPU, reproducible per seed.
inline Tensor random_tensor(const Shape& shape, DType dtype, double low, double high,
                            uint64_t seed) {
  Generator gen(seed);
  if (dtype == DType::f32 || dtype == DType::f64)
    return uniform(shape, low, high, TensorOptions{.dtype = dtype}, &gen);
  Tensor f = uniform(shape, low, high, TensorOptions{.dtype = DType::f64}, &gen);
  if (dtype == DType::i64) {  // integers in [low, high)
    std::vector<int64_t> values;
    for (double v : f.to_vector<double>()) values.push_back(int64_t(std::floor(v)));
    return tensor_i64(values, shape);
  }
  if (dtype == DType::b8) return gt(f, (low + high) / 2);  // about half true
  return f.to(dtype);  // bf16: rounded; int8: truncated toward zero
}

// An empty tensor shaped like `t` on the given device.
inline Tensor empty_like_on(const Tensor& t, Device device,
                            std::optional<DType> dtype = std::nullopt) {
  return Tensor::empty(t.shape(), dtype.value_or(t.dtype()), device);
}

inline std::vector<double> values_of(const Tensor& t) {
  Tensor c = on_cpu(t);
  if (c.dtype() == DType::i64 || c.dtype() == DType::b8) {
    Tensor wide = Tensor::empty(c.shape(), DType::f64);
    host().copy(c, wide);
    return wide.to_vector<double>();
  }
  return c.to_vector<double>();
}

// Tolerance per dtype for kernels whose GPU math may differ from the CPU's in the last bits.
inline double tolerance(DType t) {
  switch (t) {
    case DType::f32:
      return 2e-6;
    case DType::bf16:
      return 1e-2;
    default:
      return 1e-13;
  }
}

// Every element of `got` (GPU) must be within tol * (|want| + 1e-2 * max|want|) of `want` (CPU):
// relative for large values, floored so tiny ones are judged against the tensor's scale. NaNs
// and infinities must match exactly.
inline void check_close(const Tensor& got, const Tensor& want, double tol,
                        const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    BOOST_REQUIRE(got.shape() == want.shape());
    const std::vector<double> g = values_of(got), w = values_of(want);
    double scale = 0;
    for (double v : w)
      if (std::isfinite(v)) scale = std::max(scale, std::abs(v));
    double worst = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < w.size(); ++i) {
      if (std::isnan(w[i]) || std::isinf(w[i])) {
        BOOST_TEST((std::isnan(w[i]) ? std::isnan(g[i]) : g[i] == w[i]),
                   "element " << i << ": got " << g[i] << ", want " << w[i]);
        continue;
      }
      const double err = std::abs(g[i] - w[i]) / (std::abs(w[i]) + 1e-2 * scale + 1e-300);
      if (!(err <= worst)) worst = err, worst_at = i;  // catches NaN in got too
    }
    BOOST_TEST(worst <= tol, "normalized error " << worst << " > " << tol << " at element "
                                                 << worst_at << ": got " << g[worst_at] << ", want "
                                                 << w[worst_at]);
  }
}

inline void check_equal(const Tensor& got, const Tensor& want, const std::string& what) {
  check_close(got, want, 0.0, what);
}

}  // namespace qkv::test
