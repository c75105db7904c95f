// The defaults of Backend's optional kernels: a backend without them says so, and callers take
// another route.
#include "engine/backend.h"

#include "engine/error.h"

namespace qkv {

void Backend::synchronize() {}

bool Backend::supports_matmul_with_two_batch_dims() const { return false; }

bool Backend::supports_matmul_rounding_to_bf16() const { return false; }

void Backend::matmul_rounding_to_bf16(const Tensor&, const Tensor&, const Tensor&, bool) {
  QKV_CHECK(false, "matmul", "the ", device().str(),
            " backend cannot round float32 operands to bfloat16 in its GEMM (ask "
            "supports_matmul_rounding_to_bf16 first)");
}

bool Backend::supports_fused_attention(DType, int64_t, int64_t) const { return false; }

void Backend::fused_attention_forward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      bool, double, const Tensor&, const Tensor&) {
  QKV_CHECK(false, "fused_attention_forward", "the ", device().str(),
            " backend has no fused attention (ask supports_fused_attention first)");
}

void Backend::fused_attention_backward(const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                       bool, double, const Tensor&, const Tensor&, const Tensor&,
                                       const Tensor&, const Tensor&, const Tensor&) {
  QKV_CHECK(false, "fused_attention_backward", "the ", device().str(),
            " backend has no fused attention (ask supports_fused_attention first)");
}

}  // namespace qkv
