// The element conversion of copy/cast, written once for every backend (the CPU's copy and the
// CUDA one call it): bf16 goes through float (round to nearest even, NaN kept), anything to bool is
// "!= 0", a floating value to a signed integer saturates (engine/scalar_math.h).
#pragma once

#include <cstdint>
#include <type_traits>

#include "engine/dtype.h"
#include "engine/host_device.h"
#include "engine/scalar_math.h"

namespace qkv {

// bfloat16 <-> float with engine/dtype.h's rounding (to nearest even, NaN kept): dtype.h's own
// functions on the host, the same arithmetic on the device's bit casts in a CUDA kernel.
QKV_HOST_DEVICE inline float widen_bf16(bf16_t v) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(uint32_t(v.bits) << 16);
#else
  return bf16_to_float(v);
#endif
}
QKV_HOST_DEVICE inline bf16_t round_to_bf16(float f) {
#ifdef __CUDA_ARCH__
  uint32_t u = __float_as_uint(f);
  if ((u & 0x7fffffff) > 0x7f800000) return {uint16_t((u >> 16) | 0x40)};
  u += 0x7fff + ((u >> 16) & 1);
  return {uint16_t(u >> 16)};
#else
  return float_to_bf16(f);
#endif
}

template <typename To, typename From>
QKV_HOST_DEVICE inline To convert(From v) {
  if constexpr (std::is_same_v<From, bf16_t>) {
    return convert<To>(widen_bf16(v));
  } else if constexpr (std::is_same_v<To, bf16_t>) {
    return round_to_bf16(float(v));
  } else if constexpr (std::is_same_v<To, uint8_t>) {
    return v != From(0) ? 1 : 0;
  } else if constexpr (std::is_signed_v<To> && std::is_integral_v<To> &&
                       std::is_floating_point_v<From>) {
    return saturating_cast<To>(v);  // NaN -> 0, out of range -> the nearest end
  } else {
    return To(v);
  }
}

}  // namespace qkv
