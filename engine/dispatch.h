// Turning a runtime dtype into a C++ element type for a templated kernel body. One dispatch for
// every backend: the CPU kernels (engine/cpu/) and the CUDA ones (cuda/) both go through it.
#pragma once

#include <cstdint>
#include <string>

#include "engine/dtype.h"
#include "engine/error.h"

namespace qkv {

// The element type each dtype stores.
template <typename T>
struct DTypeOf;
template <>
struct DTypeOf<float> {
  static constexpr DType value = DType::f32;
};
template <>
struct DTypeOf<double> {
  static constexpr DType value = DType::f64;
};
template <>
struct DTypeOf<int64_t> {
  static constexpr DType value = DType::i64;
};
template <>
struct DTypeOf<uint8_t> {
  static constexpr DType value = DType::b8;
};
template <>
struct DTypeOf<bf16_t> {
  static constexpr DType value = DType::bf16;
};
template <>
struct DTypeOf<int8_t> {
  static constexpr DType value = DType::i8;
};

// Calls f with a value of the type among Ts that `dtype` stores; a dtype outside Ts throws
// "<op>: <unsupported>" followed by the dtype's name.
template <typename T, typename... Ts, typename F>
decltype(auto) dispatch_among(DType dtype, const char* op, const char* unsupported, F&& f) {
  if (dtype == DTypeOf<T>::value) return f(T{});
  if constexpr (sizeof...(Ts) > 0)
    return dispatch_among<Ts...>(dtype, op, unsupported, f);
  else
    throw Error(std::string(op) + ": " + unsupported + dtype_name(dtype));
}

// Every dtype, bfloat16 and int8 included (what copy/cast and fill need).
template <typename F>
decltype(auto) dispatch_any_dtype(DType dtype, const char* op, F&& f) {
  return dispatch_among<float, double, int64_t, uint8_t, bf16_t, int8_t>(dtype, op,
                                                                         "unsupported dtype ", f);
}

}  // namespace qkv

// Runs __VA_ARGS__ with `T` bound to float or double.
#define QKV_DISPATCH_FLOAT(dtype, op, ...)                                               \
  ::qkv::dispatch_among<float, double>(dtype, op, "expected float32 or float64, got ",   \
                                       [&](auto qkv_dispatch_value_) -> decltype(auto) { \
                                         using T = decltype(qkv_dispatch_value_);        \
                                         return __VA_ARGS__();                           \
                                       })

// Runs __VA_ARGS__ with `T` bound to float, double, int64_t or uint8_t (bool).
#define QKV_DISPATCH_ALL(dtype, op, ...)                                                 \
  ::qkv::dispatch_among<float, double, int64_t, uint8_t>(                                \
      dtype, op, "unsupported dtype ", [&](auto qkv_dispatch_value_) -> decltype(auto) { \
        using T = decltype(qkv_dispatch_value_);                                         \
        return __VA_ARGS__();                                                            \
      })
