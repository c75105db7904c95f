// Mixed precision, as torch.autocast(dtype=torch.bfloat16) does it.
//
// Inside an `Autocast scope(DType::bf16)`, matmul and linear (and so every Linear layer, the
// composed attention's two products and the composed convolution's GEMM) round their float32
// operands to bfloat16 and multiply them with float32 accumulation, returning float32; the CPU's
// own conv2d kernels do the same for their products (engine/cpu/conv2d_kernels.cpp). Their backward
// runs the same way: the gradient products are bfloat16 as well (each matmul node remembers the
// precision it ran in, so backward() need not be called inside the scope).
//
// Everything else stays float32: the parameters (the "master weights" the optimizer updates),
// softmax and layer_norm statistics, the loss, the gradients that reach the parameters. This is
// the recipe of the seeds and of Micikevicius et al. 2018 for bf16: no loss scaling is needed,
// since bfloat16 has float32's exponent range.
//
// float64 operands are never touched (gradcheck runs in float64 inside any scope), nor are
// operands that are already bfloat16. The state is per thread.
#pragma once

#include "engine/dtype.h"

namespace qkv {

// The dtype float32 products are computed in on this thread: float32 (off) or bfloat16.
DType autocast_dtype();

class Autocast {
 public:
  // dtype: DType::bf16 to turn mixed precision on, DType::f32 to turn it off within the scope.
  explicit Autocast(DType dtype);
  ~Autocast();
  Autocast(const Autocast&) = delete;
  Autocast& operator=(const Autocast&) = delete;

 private:
  DType previous_;
};

}  // namespace qkv
