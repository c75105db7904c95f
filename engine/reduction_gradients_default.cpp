// Backend's default gradient kernels for reductions, and mean_amax's forward, composed from ops or
// from the backend's own reduce: what a backend without its own kernels (CUDA) runs. The CPU's
// are one pass each (engine/cpu/reduction_gradients.cpp, and reduce_kernels.cpp for mean_amax).
#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"

namespace qkv {

void Backend::extreme_backward(const Tensor& x, const Tensor& kept, const Tensor& gy,
                               const Tensor& gx) {
  NoGrad no_grad;
  const Shape keep = {x.size(0), 1, x.size(2)};
  copy_(gx, detail::extreme_gradient(x, kept.reshape(keep), gy.reshape(keep), {1}));
}

void Backend::mean_amax(const Tensor& x, const Tensor& out) {
  const int64_t outer = x.size(0), inner = x.size(2);
  Tensor sums = Tensor::empty({outer, inner}, x.dtype(), x.device());
  Tensor mean = Tensor::empty({outer, inner}, x.dtype(), x.device());
  reduce(ReduceOp::sum, x, sums);
  unary(UnaryOp::mul_scalar, sums, mean, 1.0 / double(x.size(1)));
  Tensor max = Tensor::empty({outer, inner}, x.dtype(), x.device());
  reduce(ReduceOp::max, x, max);
  copy(mean, select(out, 1, 0));
  copy(max, select(out, 1, 1));
}

void Backend::mean_amax_backward(const Tensor& x, const Tensor& out, const Tensor& gy,
                                 const Tensor& gx, bool accumulate) {
  NoGrad no_grad;
  const Tensor g = detail::mean_amax_gradient(x, out, gy, {1});
  if (accumulate)
    binary(BinaryOp::add, gx, g, gx);
  else
    copy_(gx, g);
}

void Backend::product_sum(const Tensor& a, const Tensor& b, const Tensor& out) {
  NoGrad no_grad;
  copy_(out, sum(mul(a, b), {1}));
}

void Backend::mul_gradients(const Tensor& gy, const Tensor& full, const Tensor& factor,
                            const Tensor& g_full, const Tensor& g_factor) {
  const int64_t inner = gy.size(2);
  // the contiguous factor [outer, inner] seen as [outer, reduced, inner], the middle axis a
  // stride of 0
  binary(BinaryOp::mul, gy, make_view(factor, gy.shape(), {inner, 0, 1}, factor.offset()), g_full);
  product_sum(gy, full, g_factor);
}

}  // namespace qkv
