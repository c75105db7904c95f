// Scalar arithmetic that every backend must do the same way, kept in one place so a CPU kernel
// and a CUDA kernel give the same bits.
#pragma once

#include <limits>
#include <type_traits>

#include "engine/host_device.h"

namespace qkv {

// x / y, defined for every pair: integer division by zero gives 0 and the one overflowing
// quotient (lowest / -1) wraps to lowest, where the hardware would trap (x86) or answer anything
// (a GPU). The div op refuses a zero integer divisor before any kernel runs
// (engine/ops/elementwise.cpp); this only keeps a direct backend call from crashing.
template <typename T>
QKV_HOST_DEVICE inline T divide(T x, T y) {
  if constexpr (std::is_integral_v<T>) {
    if (y == 0) return T(0);
    if constexpr (std::is_signed_v<T>)
      if (y == T(-1)) return x == std::numeric_limits<T>::lowest() ? x : T(-x);
  }
  return x / y;
}

// A floating value as a signed integer type: truncated toward zero like a C++ cast, but NaN gives
// 0 and values out of range the nearest end, as a GPU's conversion (cvt.rzi.sat) does. In C++ an
// out-of-range float -> int cast is undefined (x86 answers the lowest value; NaN too).
template <typename To, typename From>
QKV_HOST_DEVICE inline To saturating_cast(From v) {
  static_assert(std::is_integral_v<To> && std::is_signed_v<To> && std::is_floating_point_v<From>);
  const double bound = -double(std::numeric_limits<To>::lowest());  // 2^(bits - 1), exact
  const double x = double(v);
  if (x != x) return To(0);
  if (x >= bound) return std::numeric_limits<To>::max();
  if (x < -bound) return std::numeric_limits<To>::lowest();
  return To(x);
}

}  // namespace qkv
