// Turning a runtime dtype into a C++ element type for a templated kernel body.
#pragma once

#include <cstdint>

#include "engine/dtype.h"
#include "engine/error.h"

// Runs __VA_ARGS__ with `T` bound to float or double.
#define QKV_DISPATCH_FLOAT(dtype, op, ...)                                           \
  [&] {                                                                              \
    switch (dtype) {                                                                 \
      case ::qkv::DType::f32: {                                                      \
        using T = float;                                                             \
        return __VA_ARGS__();                                                        \
      }                                                                              \
      case ::qkv::DType::f64: {                                                      \
        using T = double;                                                            \
        return __VA_ARGS__();                                                        \
      }                                                                              \
      default:                                                                       \
        throw ::qkv::Error(std::string(op) + ": expected float32 or float64, got " + \
                           ::qkv::dtype_name(dtype));                                \
    }                                                                                \
  }()

// Runs __VA_ARGS__ with `T` bound to float, double, int64_t or uint8_t (bool).
#define QKV_DISPATCH_ALL(dtype, op, ...)                                                         \
  [&] {                                                                                          \
    switch (dtype) {                                                                             \
      case ::qkv::DType::f32: {                                                                  \
        using T = float;                                                                         \
        return __VA_ARGS__();                                                                    \
      }                                                                                          \
      case ::qkv::DType::f64: {                                                                  \
        using T = double;                                                                        \
        return __VA_ARGS__();                                                                    \
      }                                                                                          \
      case ::qkv::DType::i64: {                                                                  \
        using T = int64_t;                                                                       \
        return __VA_ARGS__();                                                                    \
      }                                                                                          \
      case ::qkv::DType::b8: {                                                                   \
        using T = uint8_t;                                                                       \
        return __VA_ARGS__();                                                                    \
      }                                                                                          \
      default:                                                                                   \
        throw ::qkv::Error(std::string(op) + ": unsupported dtype " + ::qkv::dtype_name(dtype)); \
    }                                                                                            \
  }()
