// Elementwise CPU kernels: copy/cast, fill, unary, binary and where over strided operands.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "engine/convert.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/prefetch.h"
#include "engine/cpu/strided_loop.h"
#include "engine/cpu/vec_math.h"
#include "engine/dispatch.h"
#include "engine/gelu.h"
#include "engine/scalar_math.h"

namespace qkv::cpu {

namespace {

template <typename T>
T* ptr(const Tensor& t) {
  return static_cast<T*>(t.raw_data());
}

// block(j0, j1) over [0, n) in blocks of kStreamBlock elements: each contiguous loop below asks
// for its operands' lines ahead of a block (prefetch.h), then runs it as a plain loop the compiler
// vectorizes.
template <typename Block>
inline void for_each_stream_block(int64_t n, Block&& block) {
  for (int64_t j0 = 0; j0 < n; j0 += kStreamBlock) block(j0, std::min(n, j0 + kStreamBlock));
}

}  // namespace

// An empty tensor may have no storage: memcpy's pointers must not be null even for 0 bytes.
void CpuBackend::copy_to_host(const void* src, void* dst, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}
void CpuBackend::copy_from_host(const void* src, void* dst, size_t bytes) {
  if (bytes > 0) std::memcpy(dst, src, bytes);
}

void CpuBackend::copy(const Tensor& src, const Tensor& dst) {
  dispatch_any_dtype(src.dtype(), "copy", [&](auto s) {
    using S = decltype(s);
    dispatch_any_dtype(dst.dtype(), "copy", [&](auto d) {
      using D = decltype(d);
      const S* sp = ptr<S>(src);
      D* dp = ptr<D>(dst);
      strided_loop<2>(
          dst.shape(), {dst.strides(), src.strides()},
          [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
            D* o = dp + off[0];
            const S* i = sp + off[1];
            if (st[0] == 1 && st[1] == 1 && std::is_same_v<S, D>) {
              std::memcpy(static_cast<void*>(o), i, n * sizeof(D));
            } else {
              for (int64_t j = 0; j < n; ++j) o[j * st[0]] = convert<D>(i[j * st[1]]);
            }
          });
    });
  });
}

void CpuBackend::fill(const Tensor& dst, double value) {
  QKV_DISPATCH_ALL(dst.dtype(), "fill", [&] {
    T v = T(value);
    T* p = ptr<T>(dst);
    parallel_for(0, dst.numel(), 65536, [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) p[i] = v;
    });
  });
}

namespace {

// Applies out = f(x) elementwise; out contiguous, x strided.
template <typename In, typename Out, typename F>
void map1(const Tensor& x, const Tensor& out, F f) {
  const In* xp = ptr<In>(x);
  Out* op = ptr<Out>(out);
  strided_loop<2>(
      out.shape(), {out.strides(), x.strides()},
      [&](const std::array<int64_t, 2>& off, int64_t n, const std::array<int64_t, 2>& st) {
        Out* o = op + off[0];
        const In* i = xp + off[1];
        if (st[0] == 1 && st[1] == 1) {
          // o may equal i (in place) but never partly overlaps it, so lanes are independent
          for_each_stream_block(n, [&](int64_t j0, int64_t j1) {
            prefetch_stream_block<0>(i, j0, j1);
            prefetch_stream_block<1>(o, j0, j1);
            _Pragma("omp simd") for (int64_t j = j0; j < j1; ++j) o[j] = f(i[j]);
          });
        } else {
          for (int64_t j = 0; j < n; ++j) o[j * st[0]] = f(i[j * st[1]]);
        }
      });
}

template <typename A, typename B, typename Out, typename F>
void map2(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const A* ap = ptr<A>(a);
  const B* bp = ptr<B>(b);
  Out* op = ptr<Out>(out);
  strided_loop<3>(
      out.shape(), {out.strides(), a.strides(), b.strides()},
      [&](const std::array<int64_t, 3>& off, int64_t n, const std::array<int64_t, 3>& st) {
        Out* o = op + off[0];
        const A* x = ap + off[1];
        const B* y = bp + off[2];
        if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
          for_each_stream_block(n, [&](int64_t j0, int64_t j1) {
            prefetch_stream_block<0>(x, j0, j1);
            prefetch_stream_block<0>(y, j0, j1);
            prefetch_stream_block<1>(o, j0, j1);
            for (int64_t j = j0; j < j1; ++j) o[j] = f(x[j], y[j]);
          });
        } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
          const B yv = *y;
          for_each_stream_block(n, [&](int64_t j0, int64_t j1) {
            prefetch_stream_block<0>(x, j0, j1);
            prefetch_stream_block<1>(o, j0, j1);
            for (int64_t j = j0; j < j1; ++j) o[j] = f(x[j], yv);
          });
        } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {
          // e.g. relu_backward of a mean's expanded gradient; the strided loop below is scalar
          // with a mispredicted branch per element for the comparing ops
          const A xv = *x;
          for_each_stream_block(n, [&](int64_t j0, int64_t j1) {
            prefetch_stream_block<0>(y, j0, j1);
            prefetch_stream_block<1>(o, j0, j1);
            for (int64_t j = j0; j < j1; ++j) o[j] = f(xv, y[j]);
          });
        } else {
          for (int64_t j = 0; j < n; ++j) o[j * st[0]] = f(x[j * st[1]], y[j * st[2]]);
        }
      });
}

}  // namespace

void CpuBackend::unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) {
  if (op == UnaryOp::logical_not) {
    map1<uint8_t, uint8_t>(x, out, [](uint8_t v) -> uint8_t { return !v; });
    return;
  }
  if (op == UnaryOp::eq_scalar || op == UnaryOp::lt_scalar || op == UnaryOp::gt_scalar) {
    QKV_DISPATCH_ALL(x.dtype(), "compare", [&] {
      T s = T(scalar);
      if (op == UnaryOp::eq_scalar)
        map1<T, uint8_t>(x, out, [=](T v) -> uint8_t { return v == s; });
      if (op == UnaryOp::lt_scalar) map1<T, uint8_t>(x, out, [=](T v) -> uint8_t { return v < s; });
      if (op == UnaryOp::gt_scalar) map1<T, uint8_t>(x, out, [=](T v) -> uint8_t { return v > s; });
    });
    return;
  }
  if (x.dtype() == DType::i64) {  // the integer ops indices need
    int64_t s = int64_t(scalar);
    switch (op) {
      case UnaryOp::neg:
        return map1<int64_t, int64_t>(x, out, [](int64_t v) { return -v; });
      case UnaryOp::abs:
        return map1<int64_t, int64_t>(x, out, [](int64_t v) { return v < 0 ? -v : v; });
      case UnaryOp::add_scalar:
        return map1<int64_t, int64_t>(x, out, [=](int64_t v) { return v + s; });
      case UnaryOp::mul_scalar:
        return map1<int64_t, int64_t>(x, out, [=](int64_t v) { return v * s; });
      default:
        throw Error("unary: this op needs a floating tensor, got int64");
    }
  }
  QKV_DISPATCH_FLOAT(x.dtype(), "unary", [&] {
    T s = T(scalar);
    switch (op) {
      case UnaryOp::neg:
        return map1<T, T>(x, out, [](T v) { return -v; });
      case UnaryOp::exp:
        return map1<T, T>(x, out, [](T v) { return std::exp(v); });
      case UnaryOp::log:
        return map1<T, T>(x, out, [](T v) { return std::log(v); });
      case UnaryOp::sqrt:
        return map1<T, T>(x, out, [](T v) { return std::sqrt(v); });
      case UnaryOp::rsqrt:
        return map1<T, T>(x, out, [](T v) { return T(1) / std::sqrt(v); });
      case UnaryOp::abs:
        return map1<T, T>(x, out, [](T v) { return std::abs(v); });
      case UnaryOp::sign:
        return map1<T, T>(x, out, [](T v) { return T((v > 0) - (v < 0)); });
      case UnaryOp::tanh:
        return map1<T, T>(x, out, [](T v) { return std::tanh(v); });
      case UnaryOp::sigmoid:
        if constexpr (std::is_same_v<T, float>)  // vectorized: libm's exp is a call per element
          return map1<T, T>(x, out, [](T v) { return fast_sigmoid(v); });
        return map1<T, T>(x, out, [](T v) {
          // the two-sided form never evaluates exp of a large positive number
          return v >= 0 ? T(1) / (T(1) + std::exp(-v)) : std::exp(v) / (T(1) + std::exp(v));
        });
      case UnaryOp::relu:  // as PyTorch: NaN and -0 pass
        return map1<T, T>(x, out, [](T v) { return v < T(0) ? T(0) : v; });
      case UnaryOp::gelu_erf:
        return map1<T, T>(x, out, [](T v) { return gelu_erf<CpuMath>(v); });
      case UnaryOp::gelu_tanh:
        return map1<T, T>(x, out, [](T v) { return gelu_tanh(v); });
      case UnaryOp::gelu_erf_grad:
        return map1<T, T>(x, out, [](T v) { return gelu_erf_grad<CpuMath>(v); });
      case UnaryOp::gelu_tanh_grad:
        return map1<T, T>(x, out, [](T v) { return gelu_tanh_grad(v); });
      case UnaryOp::square:
        return map1<T, T>(x, out, [](T v) { return v * v; });
      case UnaryOp::reciprocal:
        return map1<T, T>(x, out, [](T v) { return T(1) / v; });
      case UnaryOp::pow_scalar:
        if (s == T(2)) return map1<T, T>(x, out, [](T v) { return v * v; });
        return map1<T, T>(x, out, [=](T v) { return std::pow(v, s); });
      case UnaryOp::add_scalar:
        return map1<T, T>(x, out, [=](T v) { return v + s; });
      case UnaryOp::mul_scalar:
        return map1<T, T>(x, out, [=](T v) { return v * s; });
      case UnaryOp::rsub_scalar:
        return map1<T, T>(x, out, [=](T v) { return s - v; });
      default:
        throw Error("unary: unsupported op");
    }
  });
}

void CpuBackend::binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  switch (op) {
    case BinaryOp::logical_and:
      return map2<uint8_t, uint8_t, uint8_t>(
          a, b, out, [](uint8_t x, uint8_t y) -> uint8_t { return x && y; });
    case BinaryOp::logical_or:
      return map2<uint8_t, uint8_t, uint8_t>(
          a, b, out, [](uint8_t x, uint8_t y) -> uint8_t { return x || y; });
    case BinaryOp::eq:
    case BinaryOp::ne:
    case BinaryOp::lt:
    case BinaryOp::le:
    case BinaryOp::gt:
    case BinaryOp::ge:
      return QKV_DISPATCH_ALL(a.dtype(), "compare", [&] {
        switch (op) {
          case BinaryOp::eq:
            return map2<T, T, uint8_t>(a, b, out, [](T x, T y) -> uint8_t { return x == y; });
          case BinaryOp::ne:
            return map2<T, T, uint8_t>(a, b, out, [](T x, T y) -> uint8_t { return x != y; });
          case BinaryOp::lt:
            return map2<T, T, uint8_t>(a, b, out, [](T x, T y) -> uint8_t { return x < y; });
          case BinaryOp::le:
            return map2<T, T, uint8_t>(a, b, out, [](T x, T y) -> uint8_t { return x <= y; });
          case BinaryOp::gt:
            return map2<T, T, uint8_t>(a, b, out, [](T x, T y) -> uint8_t { return x > y; });
          default:
            return map2<T, T, uint8_t>(a, b, out, [](T x, T y) -> uint8_t { return x >= y; });
        }
      });
    default:
      break;
  }
  QKV_DISPATCH_ARITHMETIC(a.dtype(), "binary", [&] {
    switch (op) {
      case BinaryOp::add:
        return map2<T, T, T>(a, b, out, [](T x, T y) { return x + y; });
      case BinaryOp::sub:
        return map2<T, T, T>(a, b, out, [](T x, T y) { return x - y; });
      case BinaryOp::mul:
        return map2<T, T, T>(a, b, out, [](T x, T y) { return x * y; });
      case BinaryOp::div:
        return map2<T, T, T>(a, b, out, [](T x, T y) { return divide(x, y); });
      case BinaryOp::maximum:
        return map2<T, T, T>(a, b, out, [](T x, T y) { return x > y ? x : y; });
      case BinaryOp::minimum:
        return map2<T, T, T>(a, b, out, [](T x, T y) { return x < y ? x : y; });
      case BinaryOp::pow:
        if constexpr (std::is_floating_point_v<T>)
          return map2<T, T, T>(a, b, out, [](T x, T y) { return std::pow(x, y); });
        throw Error("pow: needs a floating tensor");
      case BinaryOp::add_relu:  // relu's rule on the rounded sum: NaN and -0 pass
        return map2<T, T, T>(a, b, out, [](T x, T y) {
          const T v = x + y;
          return v < T(0) ? T(0) : v;
        });
      case BinaryOp::relu_backward:  // a NaN input passes the gradient, as in PyTorch
        return map2<T, T, T>(a, b, out, [](T g, T x) { return x <= T(0) ? T(0) : g; });
      case BinaryOp::gelu_erf_backward:  // the unary gelu_erf_grad's value times g, as mul
        if constexpr (std::is_floating_point_v<T>)
          return map2<T, T, T>(a, b, out, [](T g, T x) { return g * gelu_erf_grad<CpuMath>(x); });
        throw Error("gelu_backward: needs a floating tensor");
      case BinaryOp::gelu_tanh_backward:
        if constexpr (std::is_floating_point_v<T>)
          return map2<T, T, T>(a, b, out, [](T g, T x) { return g * gelu_tanh_grad(x); });
        throw Error("gelu_backward: needs a floating tensor");
      default:
        throw Error("binary: unsupported op");
    }
  });
}

void CpuBackend::where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) {
  QKV_DISPATCH_ALL(out.dtype(), "where", [&] {
    const uint8_t* cp = ptr<uint8_t>(cond);
    const T* ap = ptr<T>(a);
    const T* bp = ptr<T>(b);
    T* op = ptr<T>(out);
    strided_loop<4>(
        out.shape(), {out.strides(), cond.strides(), a.strides(), b.strides()},
        [&](const std::array<int64_t, 4>& off, int64_t n, const std::array<int64_t, 4>& st) {
          for (int64_t j = 0; j < n; ++j)
            op[off[0] + j * st[0]] =
                cp[off[1] + j * st[1]] ? ap[off[2] + j * st[2]] : bp[off[3] + j * st[3]];
        });
  });
}

}  // namespace qkv::cpu
