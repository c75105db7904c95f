// Turning a runtime dtype into a C++ element type for a templated kernel body. One dispatch for
// every backend: the CPU kernels (engine/cpu/) and the CUDA ones (cuda/) both go through it.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "engine/dtype.h"
#include "engine/error.h"

namespace qkv {

// The dtype that stores elements of type T.
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>)
    return DType::f32;
  else if constexpr (std::is_same_v<T, double>)
    return DType::f64;
  else if constexpr (std::is_same_v<T, int64_t>)
    return DType::i64;
  else if constexpr (std::is_same_v<T, uint8_t>)
    return DType::b8;
  else if constexpr (std::is_same_v<T, bf16_t>)
    return DType::bf16;
  else {
    static_assert(std::is_same_v<T, int8_t>, "no dtype stores this type");
    return DType::i8;
  }
}

// Calls f with a value of the type among Ts that `dtype` stores; a dtype outside Ts throws
// "<op>: <unsupported>" followed by the dtype's name.
template <typename T, typename... Ts, typename F>
decltype(auto) dispatch_among(DType dtype, const char* op, const char* unsupported, F&& f) {
  if (dtype == dtype_of<T>()) return f(T{});
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

// Runs __VA_ARGS__ with `T` bound to float, double or int64_t (the dtypes arithmetic takes).
#define QKV_DISPATCH_ARITHMETIC(dtype, op, ...)                                                   \
  ::qkv::dispatch_among<float, double, int64_t>(dtype, op, "unsupported dtype ",                  \
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
