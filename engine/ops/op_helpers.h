// Helpers shared by the op implementations in engine/ops/ (not part of the public API).
#pragma once

#include <optional>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/error.h"
#include "engine/ops.h"
#include "engine/split_at.h"

namespace qkv::detail {

inline void check_defined(const Tensor& t, const char* op, const char* what = "input") {
  QKV_CHECK(t.defined(), op, what, " is an undefined tensor");
}

inline void check_same_device(const Tensor& a, const Tensor& b, const char* op) {
  QKV_CHECK(a.device() == b.device(), op, "tensors are on different devices: ", a.device().str(),
            " and ", b.device().str());
}

inline void check_same_dtype(const Tensor& a, const Tensor& b, const char* op) {
  QKV_CHECK(a.dtype() == b.dtype(), op, "dtypes differ: ", dtype_name(a.dtype()), " and ",
            dtype_name(b.dtype()));
}

// Ops whose kernels exist only for float32 and float64 (bf16 is a storage dtype for them, unlike
// is_floating in engine/dtype.h which counts bf16 as floating).
inline void check_f32_or_f64(const Tensor& t, const char* op) {
  QKV_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64, op,
            "expected a float32 or float64 tensor, got ", dtype_name(t.dtype()));
}

inline void check_index(const Tensor& t, const char* op) {
  QKV_CHECK(t.dtype() == DType::i64, op, "indices must be int64, got ", dtype_name(t.dtype()));
}

inline Tensor empty(const Shape& shape, DType dtype, Device device) {
  return Tensor::empty(shape, dtype, device);
}

// The input as a contiguous tensor (itself when already contiguous), without autograd.
inline Tensor contiguous_data(const Tensor& t) {
  if (t.is_contiguous()) return t.detach();
  Tensor out = Tensor::empty(t.shape(), t.dtype(), t.device());
  t.backend().copy(t, out);
  return out;
}

// Runs a unary kernel into a new tensor (no autograd), of x's dtype unless out_dtype is given.
inline Tensor unary_kernel(UnaryOp op, const Tensor& x, double scalar = 0,
                           std::optional<DType> out_dtype = std::nullopt) {
  Tensor out = Tensor::empty(x.shape(), out_dtype.value_or(x.dtype()), x.device());
  x.backend().unary(op, x, out, scalar);
  return out;
}

// A broadcast view of t with the given shape (stride 0 along broadcast dims).
Tensor broadcast_view(const Tensor& t, const Shape& shape);

// Contiguous t seen as the [outer, mid, inner] block of s (split_at), and a tensor of that
// block's reduced shape seen as [outer, inner]: how the reductions and their gradients hand
// tensors to the backend.
inline Tensor block_view(const Tensor& t, const Split3& s) {
  return make_view(t, {s.outer, s.mid, s.inner}, {s.mid * s.inner, s.inner, 1}, t.offset());
}
inline Tensor reduced_block_view(const Tensor& t, const Split3& s) {
  return make_view(t, {s.outer, s.inner}, {s.inner, 1}, t.offset());
}

// amax/amin's gradient composed from ops, hit * (gy / count) with hit = (x == kept) and count its
// sum over `dims` (kept and gy have x's shape with those dims 1): differentiable again, so a
// create_graph backward records it; Backend::extreme_backward's default is this formula.
Tensor extreme_gradient(const Tensor& x, const Tensor& kept, const Tensor& gy,
                        const std::vector<int>& dims);

// mean_amax's gradient composed from ops, for out = mean_amax(x, dims) and its gradient gy (both
// with the pair's axis at dims.front()): the mean's gradient, gy_mean * (1 / count) broadcast,
// plus amax's, extreme_gradient. Differentiable again (a create_graph backward records it);
// Backend::mean_amax_backward's default is this formula.
Tensor mean_amax_gradient(const Tensor& x, const Tensor& out, const Tensor& gy,
                          const std::vector<int>& dims);

// While a backward rule runs: the sum of input i's gradients so far that the sweep offers
// (gradient_sum_so_far) where a gradient like `like` (its dtype, device and shape) can be added
// into it in place; undefined otherwise.
inline Tensor offered_gradient_sum(size_t input, const Tensor& like) {
  const Tensor* sum = gradient_sum_so_far(input);
  const bool fits = sum && sum->dtype() == like.dtype() && sum->device() == like.device() &&
                    sum->shape() == like.shape();
  return fits ? *sum : Tensor();
}

// Checks that every index lies in [0, size) and throws "<op>: index 7 is out of range for
// <what> of size 5" otherwise. Runs the min/max on the index's device.
void check_index_range(const Tensor& index, int64_t size, const char* op, const char* what);

}  // namespace qkv::detail
