// Elementwise CUDA kernels: copy/cast, fill, unary, binary and where over strided operands.
//
// Every op is one grid-stride kernel over the output's elements (map1/map2/where_kernel) applied
// with a small functor; the op is a runtime switch inside the functor, uniform across the grid, so
// one kernel per dtype serves every op. Formulas mirror engine/cpu/elementwise_kernels.cpp.
#include <cmath>

#include "cuda/cuda_backend_impl.h"
#include "cuda/launch.cuh"
#include "cuda/strided.cuh"
#include "engine/gelu.h"
#include "engine/scalar_math.h"

namespace qkv::cuda {

namespace {

template <typename In, typename Out, typename F>
__global__ void map1_kernel(int64_t n, StridedLayout<2> layout, const In* x, Out* out, F f) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) {
    int64_t off[2];
    offsets_of(layout, i, off);
    out[off[0]] = f(x[off[1]]);
  }
}

template <typename A, typename B, typename Out, typename F>
__global__ void map2_kernel(int64_t n, StridedLayout<3> layout, const A* a, const B* b, Out* out,
                            F f) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) {
    int64_t off[3];
    offsets_of(layout, i, off);
    out[off[0]] = f(a[off[1]], b[off[2]]);
  }
}

// out = f(x) elementwise; both may be strided views.
template <typename In, typename Out, typename F>
void map1(const Tensor& x, const Tensor& out, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  auto layout = make_layout<2>(out.shape(), {out.strides(), x.strides()});
  QKV_LAUNCH(map1_kernel, blocks_for(n), kThreads, 0, stream())
  (n, layout, static_cast<const In*>(x.raw_data()), static_cast<Out*>(out.raw_data()), f);
  QKV_CUDA_CHECK_LAUNCH();
}

template <typename A, typename B, typename Out, typename F>
void map2(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const int64_t n = out.numel();
  if (n == 0) return;
  auto layout = make_layout<3>(out.shape(), {out.strides(), a.strides(), b.strides()});
  QKV_LAUNCH(map2_kernel, blocks_for(n), kThreads, 0, stream())
  (n, layout, static_cast<const A*>(a.raw_data()), static_cast<const B*>(b.raw_data()),
   static_cast<Out*>(out.raw_data()), f);
  QKV_CUDA_CHECK_LAUNCH();
}

// ---- functors
// -------------------------------------------------------------------------------------

template <typename From, typename To>
struct Convert {
  __device__ To operator()(From v) const { return convert<To>(v); }
};

template <typename T>
struct FloatUnary {
  UnaryOp op;
  T s;
  __device__ T operator()(T v) const {
    switch (op) {
      case UnaryOp::neg:
        return -v;
      case UnaryOp::exp:
        return std::exp(v);
      case UnaryOp::log:
        return std::log(v);
      case UnaryOp::sqrt:
        return std::sqrt(v);
      case UnaryOp::rsqrt:
        return T(1) / std::sqrt(v);
      case UnaryOp::abs:
        return std::abs(v);
      case UnaryOp::sign:
        return T((v > 0) - (v < 0));
      case UnaryOp::tanh:
        return std::tanh(v);
      case UnaryOp::sigmoid:  // two-sided: never exp of a large positive number
        return v >= 0 ? T(1) / (T(1) + std::exp(-v)) : std::exp(v) / (T(1) + std::exp(v));
      case UnaryOp::relu:  // as PyTorch: NaN and -0 pass
        return v < T(0) ? T(0) : v;
      case UnaryOp::gelu_erf:
        return gelu_erf(v);
      case UnaryOp::gelu_tanh:
        return gelu_tanh(v);
      case UnaryOp::gelu_erf_grad:
        return gelu_erf_grad(v);
      case UnaryOp::gelu_tanh_grad:
        return gelu_tanh_grad(v);
      case UnaryOp::square:
        return v * v;
      case UnaryOp::reciprocal:
        return T(1) / v;
      case UnaryOp::pow_scalar:
        return s == T(2) ? v * v : std::pow(v, s);
      case UnaryOp::add_scalar:
        return v + s;
      case UnaryOp::mul_scalar:
        return v * s;
      case UnaryOp::rsub_scalar:
        return s - v;
      default:
        return v;  // the host rejects every other op before launching
    }
  }
};

struct IntUnary {
  UnaryOp op;
  int64_t s;
  __device__ int64_t operator()(int64_t v) const {
    switch (op) {
      case UnaryOp::neg:
        return -v;
      case UnaryOp::abs:
        return v < 0 ? -v : v;
      case UnaryOp::add_scalar:
        return v + s;
      default:
        return v * s;  // mul_scalar
    }
  }
};

template <typename T>
struct CompareScalar {
  UnaryOp op;
  T s;
  __device__ uint8_t operator()(T v) const {
    return op == UnaryOp::eq_scalar ? v == s : op == UnaryOp::lt_scalar ? v < s : v > s;
  }
};

struct LogicalNot {
  __device__ uint8_t operator()(uint8_t v) const { return !v; }
};

template <typename T>
struct Arithmetic {
  BinaryOp op;
  __device__ T operator()(T x, T y) const {
    switch (op) {
      case BinaryOp::add:
        return x + y;
      case BinaryOp::sub:
        return x - y;
      case BinaryOp::mul:
        return x * y;
      case BinaryOp::div:
        return divide(x, y);
      case BinaryOp::maximum:
        return x > y ? x : y;
      case BinaryOp::minimum:
        return x < y ? x : y;
      case BinaryOp::add_relu:  // relu's rule on the rounded sum: NaN and -0 pass
        return x + y < T(0) ? T(0) : x + y;
      case BinaryOp::relu_backward:  // x is the gradient, y relu's input
        return y <= T(0) ? T(0) : x;
      case BinaryOp::gelu_erf_backward:  // x is the gradient, y gelu's input; floating only
        if constexpr (std::is_floating_point_v<T>) return x * gelu_erf_grad(y);
        return x;
      case BinaryOp::gelu_tanh_backward:
        if constexpr (std::is_floating_point_v<T>) return x * gelu_tanh_grad(y);
        return x;
      default:  // pow, floating only (checked on the host)
        if constexpr (std::is_floating_point_v<T>) return std::pow(x, y);
        return x;
    }
  }
};

template <typename T>
struct Compare {
  BinaryOp op;
  __device__ uint8_t operator()(T x, T y) const {
    switch (op) {
      case BinaryOp::eq:
        return x == y;
      case BinaryOp::ne:
        return x != y;
      case BinaryOp::lt:
        return x < y;
      case BinaryOp::le:
        return x <= y;
      case BinaryOp::gt:
        return x > y;
      default:
        return x >= y;
    }
  }
};

struct Logical {
  bool is_and;
  __device__ uint8_t operator()(uint8_t x, uint8_t y) const { return is_and ? x && y : x || y; }
};

template <typename T>
__global__ void fill_kernel(int64_t n, T* out, T value) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) out[i] = value;
}

template <typename T>
__global__ void where_kernel(int64_t n, StridedLayout<4> layout, const uint8_t* cond, const T* a,
                             const T* b, T* out) {
  for (int64_t i = grid_start(); i < n; i += grid_step()) {
    int64_t off[4];
    offsets_of(layout, i, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

}  // namespace

void CudaBackend::copy(const Tensor& src, const Tensor& dst) {
  // Same dtype and both contiguous: one memcpy on the stream.
  if (src.dtype() == dst.dtype() && src.is_contiguous() && dst.is_contiguous()) {
    const size_t bytes = size_t(dst.numel()) * dtype_size(dst.dtype());
    if (bytes)
      QKV_CUDA_CHECK(cudaMemcpyAsync(dst.raw_data(), src.raw_data(), bytes,
                                     cudaMemcpyDeviceToDevice, stream_));
    return;
  }
  dispatch_any_dtype(src.dtype(), "copy", [&](auto s) {
    using S = decltype(s);
    dispatch_any_dtype(dst.dtype(), "copy", [&](auto d) {
      using D = decltype(d);
      map1<S, D>(src, dst, Convert<S, D>{});
    });
  });
}

void CudaBackend::fill(const Tensor& dst, double value) {
  const int64_t n = dst.numel();
  if (n == 0) return;
  dispatch_any_dtype(dst.dtype(), "fill", [&](auto zero) {
    using T = decltype(zero);
    T v;
    if constexpr (std::is_same_v<T, bf16_t>)
      v = float_to_bf16(float(value));
    else
      v = T(value);
    QKV_LAUNCH(fill_kernel, blocks_for(n), kThreads, 0, stream_)
    (n, static_cast<T*>(dst.raw_data()), v);
    QKV_CUDA_CHECK_LAUNCH();
  });
}

void CudaBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) {
  if (op == UnaryOp::logical_not) return map1<uint8_t, uint8_t>(x, out, LogicalNot{});
  if (op == UnaryOp::eq_scalar || op == UnaryOp::lt_scalar || op == UnaryOp::gt_scalar) {
    QKV_DISPATCH_ALL(x.dtype(), "compare", [&] {
      map1<T, uint8_t>(x, out, CompareScalar<T>{op, T(scalar)});
    });
    return;
  }
  if (x.dtype() == DType::i64) {  // the integer ops indices need
    QKV_CHECK(op == UnaryOp::neg || op == UnaryOp::abs || op == UnaryOp::add_scalar ||
                  op == UnaryOp::mul_scalar,
              "unary", "this op needs a floating tensor, got int64");
    return map1<int64_t, int64_t>(x, out, IntUnary{op, int64_t(scalar)});
  }
  QKV_DISPATCH_FLOAT(x.dtype(), "unary", [&] { map1<T, T>(x, out, FloatUnary<T>{op, T(scalar)}); });
}

void CudaBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
    case BinaryOp::logical_and:
    case BinaryOp::logical_or:
      return map2<uint8_t, uint8_t, uint8_t>(a, b, out, Logical{op == BinaryOp::logical_and});
    case BinaryOp::eq:
    case BinaryOp::ne:
    case BinaryOp::lt:
    case BinaryOp::le:
    case BinaryOp::gt:
    case BinaryOp::ge:
      QKV_DISPATCH_ALL(a.dtype(), "compare",
                       [&] { map2<T, T, uint8_t>(a, b, out, Compare<T>{op}); });
      return;
    default:
      break;
  }
  QKV_DISPATCH_ARITHMETIC(a.dtype(), "binary", [&] {
    if constexpr (std::is_integral_v<T>)
      QKV_CHECK(op != BinaryOp::pow, "pow", "needs a floating tensor");
    map2<T, T, T>(a, b, out, Arithmetic<T>{op});
  });
}

void CudaBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t n = out.numel();
  if (n == 0) return;
  auto layout =
      make_layout<4>(out.shape(), {out.strides(), cond.strides(), a.strides(), b.strides()});
  QKV_DISPATCH_ALL(out.dtype(), "where", [&] {
    QKV_LAUNCH(where_kernel, blocks_for(n), kThreads, 0, stream_)
    (n, layout, static_cast<const uint8_t*>(cond.raw_data()), static_cast<const T*>(a.raw_data()),
     static_cast<const T*>(b.raw_data()), static_cast<T*>(out.raw_data()));
    QKV_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace qkv::cuda
