// The defaults of Backend's optional kernels: a backend without them says so, and callers take
// another route.
#include "engine/backend.h"

#include "engine/error.h"

namespace qkv {

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
