// Element types a tensor can hold.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace qkv {

enum class DType : uint8_t {
  f32,   // the working type everywhere
  f64,   // CPU only; gradcheck runs in it
  i64,   // token ids, labels, indices
  b8,    // boolean masks (one byte per element; true = 1)
  bf16,  // 16-bit brain float, for mixed precision on CUDA (storage and casts on the CPU)
  i8,    // signed bytes: INT8-quantized weights (storage and casts only; nn/quantized.h)
};

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f64:
      return 8;
    case DType::i64:
      return 8;
    case DType::b8:
      return 1;
    case DType::bf16:
      return 2;
    case DType::i8:
      return 1;
  }
  return 0;
}

inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32:
      return "float32";
    case DType::f64:
      return "float64";
    case DType::i64:
      return "int64";
    case DType::b8:
      return "bool";
    case DType::bf16:
      return "bfloat16";
    case DType::i8:
      return "int8";
  }
  return "?";
}

inline bool is_floating(DType t) { return t == DType::f32 || t == DType::f64 || t == DType::bf16; }

// bfloat16 as plain bits with round-to-nearest-even conversion; enough for storage and casts.
struct bf16_t {
  uint16_t bits;
};
inline float bf16_to_float(bf16_t v) {
  uint32_t u = uint32_t(v.bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
inline bf16_t float_to_bf16(float f) {
  uint32_t u;
  __builtin_memcpy(&u, &f, 4);
  if ((u & 0x7fffffff) > 0x7f800000) return {uint16_t((u >> 16) | 0x40)};  // keep NaN a NaN
  u += 0x7fff + ((u >> 16) & 1);
  return {uint16_t(u >> 16)};
}

}  // namespace qkv
