// The defaults of Backend's optional kernels: a backend without them says so, and callers take
// another route.
#include "engine/backend.h"

#include "engine/error.h"
#include "engine/fused_attention_plan.h"

namespace qkv {

void Backend::synchronize() {}

bool Backend::supports_matmul_with_two_batch_dims() const { return false; }

void Backend::matmul_plus_bias(const Tensor& a, const Tensor& b, const Tensor& bias,
                               const Tensor& out, bool relu) {
  const Shape& s = out.shape();  // [B, M, N] (or [B1, B2, M, N]): the bias repeated on each row
  Strides repeat(s.size(), 0);
  repeat.back() = bias.strides()[0];
  copy(make_view(bias, s, repeat, bias.offset()), out);
  matmul(a, b, out, /*accumulate=*/true);
  if (relu) unary(UnaryOp::relu, out, out, 0);
}

bool Backend::supports_matmul_rounding_to_bf16() const { return false; }

void Backend::matmul_rounding_to_bf16(const Tensor&, const Tensor&, const Tensor&, bool) {
  QKV_CHECK(false, "matmul", "the ", device().str(),
            " backend cannot round float32 operands to bfloat16 in its GEMM (ask "
            "supports_matmul_rounding_to_bf16 first)");
}

int64_t AttentionProblem::batch() const {
  int64_t n = 1;
  for (int i = 0; i < q.dim() - 2; ++i) n *= q.size(i);
  return n;
}

bool Backend::supports_attention(const AttentionProblem& problem) const {
  return fits_fused_kernel(*this, problem);
}

AttentionForward Backend::attention_forward(const AttentionProblem& problem) {
  return fused_kernel_forward(*this, problem);
}

AttentionGradients Backend::attention_backward(const AttentionProblem& problem,
                                               const AttentionForward& forward,
                                               const Tensor& grad_out,
                                               const AttentionGradients& into) {
  AttentionGradients g = fused_kernel_backward(*this, problem, forward, grad_out);
  if (!into.q.defined()) return g;
  copy(g.q, into.q), copy(g.k, into.k), copy(g.v, into.v);
  return into;
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

bool Backend::supports_decode_attention(DType) const { return false; }

void Backend::decode_attention(const Tensor&, const Tensor&, const Tensor&, const Tensor&, double,
                               const Tensor&) {
  QKV_CHECK(false, "decode_attention", "the ", device().str(),
            " backend has no single-query attention kernel (ask supports_decode_attention first)");
}

}  // namespace qkv
