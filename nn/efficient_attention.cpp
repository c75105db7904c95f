#include "nn/efficient_attention.h"

#include <cmath>

#include "engine/attention_problem.h"
#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/error.h"
#include "engine/op_declaration.h"
#include "engine/ops.h"

namespace qkv::nn {

namespace {

// The operands' form, which every backend needs; what else a backend's kernel takes it says in
// supports_attention.
bool operands_fit(const Tensor& q, const Tensor& k, const Tensor& v) {
  if (!q.defined() || !k.defined() || !v.defined()) return false;
  if (q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim()) return false;
  if (k.device() != q.device() || v.device() != q.device()) return false;
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype()) return false;
  for (int i = 0; i < q.dim() - 2; ++i)
    if (k.size(i) != q.size(i) || v.size(i) != q.size(i)) return false;
  return q.size(-1) == k.size(-1) && k.size(-2) == v.size(-2);
}

// The problem without its dropout counters (drawn only when the kernel runs); with `gen`'s
// examples when it draws by example (engine/example_draws.h), whose layout a backend checks.
AttentionProblem problem_of(const Tensor& q, const Tensor& k, const Tensor& v,
                            const std::vector<Tensor>& masks, const AttentionPattern& pattern,
                            double scale, double dropout_p, const Generator& gen) {
  AttentionProblem p;
  p.q = q.detach(), p.k = k.detach(), p.v = v.detach();
  for (const Tensor& m : masks)
    if (m.defined()) p.masks.push_back(m);
  p.pattern = pattern;
  p.scale = scale > 0 ? scale : 1.0 / std::sqrt(double(q.size(-1)));
  p.dropout.p = dropout_p;
  if (dropout_p > 0 && !gen.example_ids().empty()) {
    const std::vector<uint64_t>& ids = gen.example_ids();
    p.dropout.examples =
        tensor_i64(std::vector<int64_t>(ids.begin(), ids.end()), {int64_t(ids.size())}, q.device());
  }
  return p;
}

}  // namespace

bool efficient_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const std::vector<Tensor>& masks,
                                   const AttentionPattern& pattern, double dropout_p) {
  if (!(dropout_p >= 0 && dropout_p < 1) || !operands_fit(q, k, v)) return false;
  return q.backend().supports_attention(
      problem_of(q, k, v, masks, pattern, -1, dropout_p, default_generator()));
}

namespace {

// The kernel's forward on q, k, v: the problem it ran (with its dropout counters) and what the
// backward keeps. `op` names the caller in errors; `backward_expected`: a graph is recorded.
std::pair<AttentionProblem, AttentionForward> run_forward(const char* op, const Tensor& q,
                                                          const Tensor& k, const Tensor& v,
                                                          const std::vector<Tensor>& masks,
                                                          const AttentionPattern& pattern,
                                                          double scale, double dropout_p,
                                                          Generator* gen, bool backward_expected) {
  QKV_CHECK(dropout_p >= 0 && dropout_p < 1, op, "dropout_p ", dropout_p, " is outside [0, 1)");
  QKV_CHECK(operands_fit(q, k, v), op,
            "needs q [..., T, d], k [..., S, d], v [..., S, dv] of one dtype and device with "
            "equal leading dims, got ",
            shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  Generator& g = gen ? *gen : default_generator();
  AttentionProblem problem = problem_of(q, k, v, masks, pattern, scale, dropout_p, g);
  Backend& backend = q.backend();
  QKV_CHECK(backend.supports_attention(problem), op, "the ", q.device().str(),
            " backend has no fused attention for ", dtype_name(q.dtype()), " q, k, v ",
            shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()),
            dropout_p > 0 ? " with dropout" : "", " and these masks");
  if (dropout_p > 0) {  // the counters dropout() on the [..., T, S] weights would take
    problem.dropout.seed = g.seed();
    if (problem.dropout.examples.defined())
      problem.dropout.key = philox::call_key(g.seed(), g.take(1));
    else
      problem.dropout.offset = g.take(uint64_t(problem.batch() * q.size(-2) * k.size(-2)));
  }
  problem.backward_expected = backward_expected;
  AttentionForward forward = backend.attention_forward(problem);
  return {std::move(problem), std::move(forward)};
}

}  // namespace

// The backward is the fused attention kernel (recomputed scores).
QKV_RECORDED_OP("efficient_attention", "nn", kernel);
Tensor efficient_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const std::vector<Tensor>& masks, const AttentionPattern& pattern,
                           double scale, double dropout_p, Generator* gen) {
  auto [problem, forward] =
      run_forward("efficient_attention", q, k, v, masks, pattern, scale, dropout_p, gen,
                  grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad()));
  const Tensor out = forward.out;
  // Detached: the backward keeps the output, and the output keeps the backward (a cycle
  // otherwise).
  forward.out = out.detach();
  return record(
      "efficient_attention", {q, k, v}, out, [problem, forward](const Tensor& gy) -> grads {
        AttentionGradients g = problem.q.backend().attention_backward(problem, forward, gy, {});
        return grads{g.q, g.k, g.v};
      });
}

std::array<Tensor, 3> packed_heads(const Tensor& qkv, int64_t heads) {
  const char* op = "efficient_attention_packed";
  QKV_CHECK(qkv.dim() == 3 && heads > 0 && qkv.size(2) % (3 * heads) == 0, op,
            "needs qkv [B, T, 3 * H * d] and H > 0, got ", shape_str(qkv.shape()), " and H ",
            heads);
  const Tensor heads_view =
      qkv.reshape({qkv.size(0), qkv.size(1), 3, heads, qkv.size(2) / (3 * heads)});
  // [B, T, H, d] of each third, viewed as [B, H, T, d]: no copy.
  auto third = [&](int64_t i) { return select(heads_view, 2, i).transpose(1, 2); };
  return {third(0), third(1), third(2)};
}

// The backward is the fused kernel writing the three gradients into one packed tensor.
QKV_RECORDED_OP("efficient_attention_packed", "nn", kernel);
Tensor efficient_attention_packed(const Tensor& qkv, int64_t heads,
                                  const std::vector<Tensor>& masks, const AttentionPattern& pattern,
                                  double scale, double dropout_p, Generator* gen) {
  // Views of the detached qkv, which the kernel reads; the graph holds qkv alone.
  const std::array<Tensor, 3> views = packed_heads(qkv.detach(), heads);
  auto [problem, forward] =
      run_forward("efficient_attention_packed", views[0], views[1], views[2], masks, pattern, scale,
                  dropout_p, gen, grad_enabled() && qkv.requires_grad());
  const Tensor out = forward.out;
  forward.out = out.detach();  // as in efficient_attention: no cycle
  return record("efficient_attention_packed", {qkv}, out,
                [problem, forward, heads](const Tensor& gy) -> grads {
                  const Tensor& q = problem.q;
                  const Shape shape{q.size(0), q.size(2), 3 * q.size(1) * q.size(3)};
                  Tensor g = Tensor::empty(shape, q.dtype(), q.device());
                  const auto [gq, gk, gv] = packed_heads(g, heads);
                  q.backend().attention_backward(problem, forward, gy, {gq, gk, gv});
                  return grads{g};
                });
}

}  // namespace qkv::nn
