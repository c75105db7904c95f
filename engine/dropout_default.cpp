// Backend's default dropout kernels, composed of its other kernels: the Bernoulli fill of the
// scaled mask, then a multiply by it, forward and backward. A backend without a fused kernel
// (CUDA) runs these; the CPU backend overrides both (engine/cpu/dropout_kernels.cpp), and its
// tests hold the fused kernels to these, bit for bit. The same for gelu then dropout, and for
// dropout then a residual's add.
#include "engine/backend.h"

namespace qkv {

Tensor Backend::dropout_forward(const Tensor& x, const DropoutDraws& draws, double p,
                                const Tensor& out) {
  Tensor mask = Tensor::empty(x.shape(), x.dtype(), x.device());
  if (draws.examples.defined())
    random_bernoulli_by_example(mask, draws.key, draws.examples, 1 - p, 1.0 / (1 - p));
  else
    random_bernoulli(mask, draws.seed, draws.offset, 1 - p, 1.0 / (1 - p));
  binary(BinaryOp::mul, x, mask, out);
  return mask;
}

void Backend::dropout_backward(const Tensor& gy, const Tensor& mask, double, const Tensor& gx) {
  binary(BinaryOp::mul, gy, mask, gx);
}

// gelu into a buffer, then dropout: the two kernels a backend without the fused one runs.
Tensor Backend::gelu_dropout_forward(const Tensor& x, UnaryOp gelu, const DropoutDraws& draws,
                                     double p, const Tensor& out) {
  Tensor activation = Tensor::empty(x.shape(), x.dtype(), x.device());
  unary(gelu, x, activation, 0);
  return dropout_forward(activation, draws, p, out);
}

void Backend::gelu_dropout_backward(const Tensor& gy, const Tensor& x, UnaryOp gelu,
                                    const Tensor& mask, double p, const Tensor& gx) {
  Tensor masked = Tensor::empty(gy.shape(), gy.dtype(), gy.device());
  dropout_backward(gy, mask, p, masked);
  binary(gelu == UnaryOp::gelu_tanh ? BinaryOp::gelu_tanh_backward : BinaryOp::gelu_erf_backward,
         masked, x, gx);
}

// dropout into a buffer, then the residual added.
Tensor Backend::dropout_add_forward(const Tensor& x, const Tensor& residual,
                                    const DropoutDraws& draws, double p, const Tensor& out) {
  Tensor dropped = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mask = dropout_forward(x, draws, p, dropped);
  binary(BinaryOp::add, residual, dropped, out);
  return mask;
}

}  // namespace qkv
