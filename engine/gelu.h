// GELU and its derivative, PyTorch 1.13's two forms (exact, with erf; approximate="tanh"), written
// once for every backend: the CPU kernels (engine/cpu/) and the CUDA ones (cuda/) both call these.
// `Math` supplies erf and exp; StdMath's are the standard ones, which nvcc maps to the device's.
// The CPU's float path passes vectorizable approximations instead (engine/cpu/vec_math.h).
#pragma once

#include <cmath>

#include "engine/host_device.h"

namespace qkv {

struct StdMath {
  template <typename T>
  QKV_HOST_DEVICE static T erf(T x) {
    return std::erf(x);
  }
  template <typename T>
  QKV_HOST_DEVICE static T exp(T x) {
    return std::exp(x);
  }
};

namespace gelu_constants {
constexpr double kInvSqrt2 = 0.70710678118654752440;     // 1/sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1/sqrt(2 pi): the normal pdf's scale
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2/pi)
constexpr double kCubic = 0.044715;                      // the tanh form's cubic coefficient
}  // namespace gelu_constants

// x * Phi(x), Phi the standard normal CDF.
template <typename Math = StdMath, typename T>
QKV_HOST_DEVICE inline T gelu_erf(T x) {
  return T(0.5) * x * (T(1) + Math::erf(x * T(gelu_constants::kInvSqrt2)));
}

// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename T>
QKV_HOST_DEVICE inline T gelu_tanh(T x) {
  using namespace gelu_constants;
  return T(0.5) * x * (T(1) + std::tanh(T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x)));
}

// d/dx of gelu_erf: Phi(x) + x phi(x), phi the standard normal pdf.
template <typename Math = StdMath, typename T>
QKV_HOST_DEVICE inline T gelu_erf_grad(T x) {
  using namespace gelu_constants;
  const T cdf = T(0.5) * (T(1) + Math::erf(x * T(kInvSqrt2)));
  const T pdf = Math::exp(T(-0.5) * x * x) * T(kInvSqrt2Pi);
  return cdf + x * pdf;
}

// d/dx of gelu_tanh.
template <typename T>
QKV_HOST_DEVICE inline T gelu_tanh_grad(T x) {
  using namespace gelu_constants;
  const T t = std::tanh(T(kSqrt2OverPi) * (x + T(kCubic) * x * x * x));
  const T dinner = T(kSqrt2OverPi) * (T(1) + T(3 * kCubic) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * dinner;
}

}  // namespace qkv
