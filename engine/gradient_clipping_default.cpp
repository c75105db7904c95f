// Backend's default gradient-clipping kernels, composed from ops: what a backend without its own
// (CUDA) runs. The CPU's are one pass over the list each (engine/cpu/gradient_clipping.cpp).
#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/ops.h"

namespace qkv {

double Backend::sum_of_squares(const std::vector<Tensor>& xs) {
  NoGrad no_grad;
  double total = 0;
  for (const Tensor& x : xs) total += sum(square(x)).item();
  return total;
}

void Backend::scale_(const std::vector<Tensor>& xs, double scale) {
  NoGrad no_grad;
  for (const Tensor& x : xs) copy_(x, mul(x, scale));
}

}  // namespace qkv
