// __nv_bfloat16 for the CPU emulator (tests/cuda_emulator): the conversions qkv's kernels use,
// rounding to nearest even as the device does.
#pragma once

#include <cstdint>
#include <cstring>

struct __nv_bfloat16 {
  uint16_t __x;
};

inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof u);
  if ((u & 0x7fffffffu) > 0x7f800000u) return {uint16_t((u >> 16) | 0x40)};  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}

inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t u = uint32_t(b.__x) << 16;
  float f;
  std::memcpy(&f, &u, sizeof f);
  return f;
}
