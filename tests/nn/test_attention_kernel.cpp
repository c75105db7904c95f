// choose_attention_kernel, the one place that picks how attention is computed: which kernel each
// kind of request gets, and that each kernel's output equals the composed attention's on the same
// operands; and MultiheadAttention's observer, against the weights and projections computed
// another way.
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <optional>

#include "engine/attention_problem.h"
#include "engine/backend.h"
#include "engine/cpu/small_attention.h"
#include "engine/example_draws.h"
#include "engine/profiler.h"
#include "nn/attention.h"
#include "nn/decode_attention.h"
#include "nn/efficient_attention.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using namespace qkv::nn;
using qkv::testing::bool_mask;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  BOOST_REQUIRE((a.shape() == b.shape()));
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

// The request's output from the composed kernel, for comparison.
Tensor composed_output(AttentionRequest r) {
  r.allow_memory_efficient = false;
  BOOST_REQUIRE((choose_attention_kernel(r) == AttentionKernel::composed));
  return compute_attention(r).output;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(attention_kernel)

BOOST_AUTO_TEST_CASE(each_request_gets_its_kernel_and_the_same_output) {
  manual_seed(21);
  const int64_t B = 2, H = 3, S = 7, d = 4;
  const Tensor pad = bool_mask({0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0, 0, 0, 1}, {B, 1, 1, S});
  const Tensor k = randn({B, H, S, d}, {DType::f64}), v = randn({B, H, S, d}, {DType::f64});

  // One query row, key padding, no graph: the single-query kernel.
  {
    NoGrad no_grad;
    AttentionRequest r{randn({B, H, 1, d}, {DType::f64}), k, v, {pad}};
    BOOST_TEST((choose_attention_kernel(r) == AttentionKernel::single_query));
    BOOST_TEST(max_abs_diff(compute_attention(r).output, composed_output(r)) <= 1e-12);
    // the same row with a causal pattern is no single-query step: the tiled kernel
    r.pattern.causal = true;
    BOOST_TEST((choose_attention_kernel(r) == AttentionKernel::fused));
    BOOST_TEST(max_abs_diff(compute_attention(r).output, composed_output(r)) <= 1e-12);
  }

  // Several queries, bool masks, a window: the fused kernel; with a graph, the same.
  const Tensor q = randn({B, H, 5, d}, {DType::f64}).requires_grad_();
  AttentionRequest r{q, k, v, {pad}};
  r.pattern.window = 1;
  BOOST_TEST((choose_attention_kernel(r) == AttentionKernel::fused));
  BOOST_TEST(max_abs_diff(compute_attention(r).output, composed_output(r)) <= 1e-12);
  // a graph wanted rules out the single-query kernel even for one row
  AttentionRequest one_row{q.narrow(2, 0, 1), k, v, {pad}};
  BOOST_TEST((choose_attention_kernel(one_row) == AttentionKernel::fused));

  // Weights wanted, or an additive mask: the composed kernel, which alone gives weights.
  r.need_weights = true;
  BOOST_TEST((choose_attention_kernel(r) == AttentionKernel::composed));
  BOOST_TEST(compute_attention(r).weights.defined());
  r.need_weights = false;
  const Tensor bias = randn({5, S}, {DType::f64});
  r.masks.push_back(bias);
  BOOST_TEST((choose_attention_kernel(r) == AttentionKernel::composed));
  // by hand: blocked keys at -inf (padding or outside the window), the bias added
  const Tensor blocked = logical_or(pad, pattern_mask(r.pattern, 5, S));
  const Tensor scores =
      add(masked_fill(mul(matmul(q, k.transpose(-2, -1)), 0.5), blocked, -INFINITY), bias);
  BOOST_TEST(max_abs_diff(compute_attention(r).output, matmul(softmax(scores, -1), v)) <= 1e-12);
}

BOOST_AUTO_TEST_CASE(observer_sees_the_weights_and_the_projections) {
  manual_seed(22);
  const int64_t B = 2, T = 3, S = 4, E = 6, H = 2;
  MultiheadAttention mha(E, H);
  const Tensor x = randn({B, T, E}), y = randn({B, S, E});
  std::vector<AttentionRecord> seen;
  mha.observer = [&](const AttentionRecord& r) { seen.push_back(r); };
  // need_weights = false: the observer still gets the weights (the composed kernel runs)
  mha.forward(x, y, y, Tensor(), Tensor(), /*need_weights=*/false);
  BOOST_REQUIRE(seen.size() == 1u);
  const AttentionRecord& r = seen[0];
  auto heads = [&](const Tensor& t, int64_t L) {
    return t.reshape({B, L, H, E / H}).transpose(1, 2);
  };
  BOOST_TEST(max_abs_diff(r.q, heads(mha.q_proj->forward(x), T)) <= 1e-6);
  BOOST_TEST(max_abs_diff(r.k, heads(mha.k_proj->forward(y), S)) <= 1e-6);
  BOOST_TEST(max_abs_diff(r.v, heads(mha.v_proj->forward(y), S)) <= 1e-6);
  const Tensor want =
      softmax(mul(matmul(r.q, r.k.transpose(-2, -1)), 1.0 / std::sqrt(double(E / H))), -1);
  BOOST_TEST(max_abs_diff(r.weights, want) <= 1e-6);
  BOOST_TEST(!r.weights.requires_grad());
  // without an observer nothing is handed out
  mha.observer = nullptr;
  mha.forward(x, y, y);
  BOOST_TEST(seen.size() == 1u);
}

// Self-attention (one tensor as query, key and value) projects q, k and v in one product and
// hands it to the fused kernel packed; with three tensors it runs the three projections apart.
// Both compute the same attention and the same gradients for the input and each projection's
// weight and bias, to float32 rounding; which path ran, the profile's op names say.
BOOST_AUTO_TEST_CASE(self_attention_projects_packed_and_computes_what_three_projections_do) {
  manual_seed(3);
  MultiheadAttention mha(32, 4);
  const Tensor x = randn({3, 7, 32}).requires_grad_();
  const Tensor pad =
      bool_mask({0, 0, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1}, {3, 7});
  const Tensor gy = randn({3, 7, 32});
  std::vector<Tensor> wrt{x};
  for (const auto& proj : {mha.q_proj, mha.k_proj, mha.v_proj})
    wrt.push_back(proj->weight), wrt.push_back(proj->bias);
  auto ran = [](const Profiler& p, const std::string& op) {
    const std::vector<ProfileEvent> events = p.events();
    return std::count_if(events.begin(), events.end(), [&](const ProfileEvent& e) {
      return e.name == op && e.phase != ProfilePhase::backward;
    });
  };

  std::vector<Tensor> packed;
  {
    Profiler profile;
    const Tensor y = mha.forward(x, x, x, pad, {}, false).output;
    packed = grad(sum(mul(y, gy)), wrt);
    packed.insert(packed.begin(), y.detach());
    BOOST_TEST(ran(profile, "efficient_attention_packed") == 1);
    BOOST_TEST(ran(profile, "linear") == 2);  // the packed projection and out_proj
  }
  const Tensor k_in = x.detach().clone().requires_grad_(),
               v_in = x.detach().clone().requires_grad_();
  std::vector<Tensor> apart_wrt = wrt;
  apart_wrt.push_back(k_in), apart_wrt.push_back(v_in);
  std::vector<Tensor> apart;
  {
    Profiler profile;
    const Tensor y = mha.forward(x, k_in, v_in, pad, {}, false).output;
    apart = grad(sum(mul(y, gy)), apart_wrt);
    apart[0] = add(add(apart[0], apart[7]), apart[8]);  // x's three readers
    apart.resize(7);
    apart.insert(apart.begin(), y.detach());
    BOOST_TEST(ran(profile, "efficient_attention") == 1);
    BOOST_TEST(ran(profile, "linear") == 4);
  }
  const char* names[] = {"output",   "x",      "q weight", "q bias",
                         "k weight", "k bias", "v weight", "v bias"};
  for (size_t i = 0; i < packed.size(); ++i) BOOST_TEST_CONTEXT(names[i]) {
      double scale = 1;
      for (double v : apart[i].to_vector<double>()) scale = std::max(scale, std::abs(v));
      BOOST_TEST(max_abs_diff(packed[i], apart[i]) / scale < 1e-5);
      // not trivially equal; k's bias moves every score of a query alike, so its gradient is 0
      if (i != 5) BOOST_TEST(max_abs_diff(apart[i], zeros_like(apart[i])) > 1e-3);
    }
}

// A problem no kernel of the backend takes is refused naming the op, the backend and the dtype.
BOOST_AUTO_TEST_CASE(problems_the_backend_refuses) {
  const Tensor q = zeros({1, 2, 1, 4}, {DType::i64}), k = zeros({1, 2, 3, 4}, {DType::i64});
  BOOST_TEST(!efficient_attention_supported(q, k, k, {}));
  qkv::testing::check_error(
      [&] { efficient_attention(q, k, k); },
      {"efficient_attention", "cpu backend has no fused attention for int64"});
  qkv::testing::check_error(
      [&] { decode_attention(q, k, k); },
      {"decode_attention", "cpu backend has no single-query attention kernel for int64"});
  AttentionRequest r{q, k, k};
  BOOST_TEST((choose_attention_kernel(r) == AttentionKernel::composed));
}

BOOST_AUTO_TEST_SUITE_END()

// The CPU kernel's small-problem path (engine/cpu/small_attention.h: float32, T, S, d, dv <= 64,
// on AVX-512) against the composed attention and against the generic tiled path, on sizes either
// side of each of its limits: 16 and 64 keys or features (its vectors), 4 queries (its register
// blocks), and 65 (the generic path again).
namespace {

// Turns the small path off for its lifetime, so the generic path takes every problem.
struct GenericPathOnly {
  GenericPathOnly() { cpu::set_small_attention_enabled(false); }
  ~GenericPathOnly() { cpu::set_small_attention_enabled(true); }
};

// Heads as a model has them: [B, L, H, width] viewed as [B, H, L, width] (rows H * width apart).
Tensor heads(int64_t B, int64_t H, int64_t L, int64_t width) {
  return randn({B, L, H, width}).transpose(1, 2).requires_grad_();
}

// Key padding for B = 2 sequences of S keys: sequence 0 pads key 0 (so with causal its query 0
// sees no key at all), sequence 1 its last third.
Tensor key_padding(int64_t S) {
  std::vector<double> pad(size_t(2 * S), 0.0);
  pad[0] = 1;
  for (int64_t s = S - S / 3; s < S; ++s) pad[size_t(S + s)] = 1;
  return bool_mask(pad, {2, 1, 1, S});
}

struct Result {
  std::vector<Tensor> values;  // output, dq, dk, dv
};

Result efficient(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& pad,
                 const AttentionPattern& pattern, double drop, const Tensor& gy) {
  manual_seed(77);
  Tensor o = efficient_attention(q, k, v, {pad}, pattern, -1, drop);
  std::vector<Tensor> g = grad(sum(mul(o, gy)), {q, k, v});
  g.insert(g.begin(), o.detach());
  return {g};
}

// The composed attention (softmax(q k^T * scale) v on engine ops, its gradients by autograd),
// with the same blocked keys and, from the same generator state, dropout's own mask.
Result naive(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& blocked, double drop,
             const Tensor& gy) {
  manual_seed(77);
  Tensor o = scaled_dot_product_attention(q, k, v, blocked, false, drop).output;
  std::vector<Tensor> g = grad(sum(mul(o, gy)), {q, k, v});
  g.insert(g.begin(), o.detach());
  return {g};
}

// Largest difference over the output and the three gradients, each against its scale.
double worst_relative(const Result& a, const Result& b) {
  double worst = 0;
  for (size_t i = 0; i < 4; ++i) {
    std::vector<double> ref = b.values[i].to_vector<double>();
    double scale = 1;
    for (double x : ref) scale = std::max(scale, std::abs(x));
    worst = std::max(worst, max_abs_diff(a.values[i], b.values[i]) / scale);
  }
  return worst;
}

}  // namespace

namespace {

// The backend's forward and backward on one problem, as nn::efficient_attention calls them, the
// forward told whether a backward follows; with generic_forward the forward runs on the generic
// path, so the small path's backward finds nothing kept and recomputes. Output, then dq, dk, dv.
Result through_backend(AttentionProblem problem, bool backward_expected, bool generic_forward,
                       const Tensor& gy, AttentionForward* kept = nullptr) {
  Backend& cpu = backend_for(Device::cpu());
  problem.backward_expected = backward_expected;
  AttentionForward f;
  if (generic_forward) {
    GenericPathOnly off;
    f = cpu.attention_forward(problem);
  } else {
    f = cpu.attention_forward(problem);
  }
  const AttentionGradients g = cpu.attention_backward(problem, f, gy, {});
  if (kept) *kept = f;
  return {{f.out, g.q, g.k, g.v}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(small_attention_path)

BOOST_AUTO_TEST_CASE(equals_the_composed_attention_either_side_of_each_size) {
  manual_seed(31);
  const std::vector<int64_t> lengths = {1, 5, 16, 17, 20, 31, 32, 33, 64, 65},
                             widths = {8, 32, 33, 64};
  const int64_t B = 2, H = 2;
  AttentionPattern causal;
  causal.causal = true;
  for (size_t i = 0; i < lengths.size(); ++i)
    for (size_t j = 0; j < lengths.size(); ++j) {
      const int64_t T = lengths[i], S = lengths[j];
      const int64_t d = widths[(i + j) % 4], dv = widths[(i + 2 * j + 1) % 4];
      const Tensor q = heads(B, H, T, d), k = heads(B, H, S, d), v = heads(B, H, S, dv);
      const Tensor gy = randn({B, H, T, dv}), pad = key_padding(S);
      const Tensor blocked = logical_or(pad, pattern_mask(causal, T, S));
      const Result small = efficient(q, k, v, pad, causal, 0, gy);
      const Result composed = naive(q, k, v, blocked, 0, gy);
      Result generic;
      {
        GenericPathOnly off;
        generic = efficient(q, k, v, pad, causal, 0, gy);
      }
      BOOST_TEST_CONTEXT("T " << T << " S " << S << " d " << d << " dv " << dv) {
        BOOST_TEST(worst_relative(small, composed) < 2e-5);
        BOOST_TEST(worst_relative(small, generic) < 2e-5);
        // sequence 0's query 0 sees no key: zeros, and no gradient through it
        const std::vector<double> row0 =
            small.values[0].narrow(0, 0, 1).narrow(2, 0, 1).to_vector<double>();
        BOOST_TEST(*std::max_element(row0.begin(), row0.end()) == 0.0);
        BOOST_TEST(*std::min_element(row0.begin(), row0.end()) == 0.0);
      }
    }
}

BOOST_AUTO_TEST_CASE(drops_what_the_generic_path_and_the_composed_attention_drop) {
  manual_seed(32);
  const int64_t B = 2, H = 3;
  const double p = 0.25;
  struct Case {
    int64_t T, S, d;
    bool causal;
    int64_t window;
  };
  for (const Case c :
       {Case{5, 5, 8, false, -1}, Case{20, 20, 32, true, -1}, Case{17, 33, 33, true, -1},
        Case{64, 64, 64, false, 3}, Case{33, 16, 32, false, 2}, Case{65, 20, 32, true, -1}}) {
    AttentionPattern pattern;
    pattern.causal = c.causal;
    pattern.window = c.window;
    const Tensor q = heads(B, H, c.T, c.d), k = heads(B, H, c.S, c.d), v = heads(B, H, c.S, c.d);
    const Tensor gy = randn({B, H, c.T, c.d}), pad = key_padding(c.S);
    const Tensor blocked = logical_or(pad, pattern_mask(pattern, c.T, c.S));
    const Result small = efficient(q, k, v, pad, pattern, p, gy);
    const Result composed = naive(q, k, v, blocked, p, gy);
    const Result undropped = efficient(q, k, v, pad, pattern, 0, gy);
    Result generic;
    {
      GenericPathOnly off;
      generic = efficient(q, k, v, pad, pattern, p, gy);
    }
    BOOST_TEST_CONTEXT("T " << c.T << " S " << c.S << " d " << c.d << " causal " << c.causal
                            << " window " << c.window) {
      BOOST_TEST(worst_relative(small, composed) < 2e-5);
      BOOST_TEST(worst_relative(small, generic) < 2e-5);
      BOOST_TEST(max_abs_diff(small.values[0], undropped.values[0]) > 0.1);  // dropout did act
    }
  }
}

// Dropout drawn by example (engine/example_draws.h), as the trainer's steps draw it: the fused
// kernel takes the request, and its small and generic paths drop what dropout() by example drops
// on the composed weights (the output and the three gradients), not what the sequential stream
// drops. 80 keys: the generic path's second tile of keys starts inside the weights' lines.
BOOST_AUTO_TEST_CASE(drops_by_example_what_the_composed_attention_drops) {
  manual_seed(33);
  const int64_t B = 2, H = 3;
  const double p = 0.25;
  struct Case {
    int64_t T, S, d;
    bool causal;
  };
  for (const Case c : {Case{5, 5, 8, false}, Case{20, 20, 32, true}, Case{17, 33, 33, true},
                       Case{65, 20, 32, true}, Case{20, 80, 16, false}}) {
    AttentionPattern pattern;
    pattern.causal = c.causal;
    const Tensor q = heads(B, H, c.T, c.d), k = heads(B, H, c.S, c.d), v = heads(B, H, c.S, c.d);
    const Tensor gy = randn({B, H, c.T, c.d}), pad = key_padding(c.S);
    const Tensor blocked = logical_or(pad, pattern_mask(pattern, c.T, c.S));
    const Result sequential = efficient(q, k, v, pad, pattern, p, gy);
    const ExampleDraws draws(default_generator(), {12, 5});
    AttentionRequest request{q, k, v, {pad}};
    request.pattern = pattern;
    request.dropout_p = p;
    const Result fused = efficient(q, k, v, pad, pattern, p, gy);
    const Result composed = naive(q, k, v, blocked, p, gy);
    Result generic;
    {
      GenericPathOnly off;
      generic = efficient(q, k, v, pad, pattern, p, gy);
    }
    BOOST_TEST_CONTEXT("T " << c.T << " S " << c.S << " d " << c.d << " causal " << c.causal) {
      BOOST_TEST((choose_attention_kernel(request) == AttentionKernel::fused));
      BOOST_TEST(worst_relative(fused, composed) < 2e-5);
      BOOST_TEST(worst_relative(generic, composed) < 2e-5);
      BOOST_TEST(max_abs_diff(fused.values[0], sequential.values[0]) > 0.1);
    }
  }
}

// The small path's backward reads the weights (and dropout's kept words) the forward kept when
// a backward was expected, and recomputes them from the log-sum-exps otherwise, or when the
// generic path ran the forward: all three give the generic path's numbers, with and without
// dropout, masks and d != dv, on sizes either side of 16, 32 and 64 keys. The kept weights are
// the softmax of the masked scores.
BOOST_AUTO_TEST_CASE(keeps_the_weights_for_the_backward_or_recomputes_them) {
  manual_seed(33);
  const int64_t B = 2, H = 2;
  struct Case {
    int64_t T, S, d, dv;
    bool causal;
    double p;
  };
  for (const Case c : {Case{20, 20, 32, 32, true, 0.1}, Case{20, 20, 32, 32, false, 0},
                       Case{15, 16, 8, 33, true, 0.3}, Case{17, 17, 33, 8, false, 0.2},
                       Case{33, 31, 16, 64, true, 0}, Case{32, 33, 64, 17, false, 0.1},
                       Case{64, 63, 20, 20, false, 0.5}, Case{63, 64, 32, 16, true, 0.1},
                       Case{1, 64, 8, 8, false, 0.1}, Case{64, 1, 8, 8, false, 0}}) {
    AttentionProblem problem;
    problem.q = heads(B, H, c.T, c.d).detach();
    problem.k = heads(B, H, c.S, c.d).detach();
    problem.v = heads(B, H, c.S, c.dv).detach();
    problem.masks = {key_padding(c.S)};
    problem.pattern.causal = c.causal;
    problem.scale = 1 / std::sqrt(double(c.d));
    problem.dropout.p = c.p, problem.dropout.seed = 91, problem.dropout.offset = 1000;
    const Tensor gy = randn({B, H, c.T, c.dv});
    AttentionForward kept;
    const Result kept_path = through_backend(problem, true, false, gy, &kept);
    const Result recomputed = through_backend(problem, false, false, gy);
    const Result generic_forward = through_backend(problem, true, true, gy);
    Result generic;
    AttentionForward generic_forward_pass;
    {
      GenericPathOnly off;
      generic = through_backend(problem, true, false, gy, &generic_forward_pass);
    }
    BOOST_TEST_CONTEXT("T " << c.T << " S " << c.S << " d " << c.d << " dv " << c.dv << " causal "
                            << c.causal << " p " << c.p) {
      BOOST_TEST(worst_relative(kept_path, generic) < 2e-5);
      BOOST_TEST(worst_relative(recomputed, generic) < 2e-5);
      BOOST_TEST(worst_relative(generic_forward, generic) < 2e-5);
      // the rows' log-sum-exps (-inf where no key is visible) as the tiles compute them
      const std::vector<double> lse = kept.lse.to_vector<double>(),
                                lse_generic = generic_forward_pass.lse.to_vector<double>();
      BOOST_REQUIRE(lse.size() == lse_generic.size());
      double lse_worst = 0;
      for (size_t i = 0; i < lse.size(); ++i) {
        BOOST_TEST(std::isinf(lse[i]) == std::isinf(lse_generic[i]));
        if (!std::isinf(lse[i]))
          lse_worst = std::max(lse_worst, std::abs(lse[i] - lse_generic[i]) /
                                              std::max(1.0, std::abs(lse_generic[i])));
      }
      BOOST_TEST(lse_worst < 1e-6);
      // what the forward kept: the weights [B H T S] and, with dropout, a word per query row
      BOOST_REQUIRE(kept.saved.size() == 5u);
      BOOST_REQUIRE(kept.saved[3].defined());
      BOOST_TEST(kept.saved[4].defined() == (c.p > 0));
      const Tensor blocked = expand(
          logical_or(problem.masks[0], pattern_mask(problem.pattern, c.T, c.S)), {B, H, c.T, c.S});
      const Tensor scores = masked_fill(
          mul(matmul(problem.q, problem.k.transpose(-2, -1)), problem.scale), blocked, -1e30);
      // a row with no visible key: uniform in this softmax, zeros in the kernel
      const std::vector<double> want = softmax(scores, -1).to_vector<double>(),
                                got = kept.saved[3].to_vector<double>(),
                                hidden = blocked.to(DType::f32).to_vector<double>();
      BOOST_REQUIRE(got.size() == want.size());
      double worst = 0;
      for (size_t row = 0; row < want.size() / size_t(c.S); ++row) {
        bool none = true;
        for (size_t s = 0; s < size_t(c.S); ++s) none = none && hidden[row * size_t(c.S) + s] != 0;
        for (size_t s = 0; s < size_t(c.S); ++s) {
          const size_t i = row * size_t(c.S) + s;
          worst = std::max(worst, std::abs(got[i] - (none ? 0.0 : want[i])));
        }
      }
      BOOST_TEST(worst < 2e-6);
    }
  }
  // Without a backward expected the forward keeps nothing.
  AttentionProblem problem;
  problem.q = randn({2, 3, 5, 8}), problem.k = randn({2, 3, 6, 8}), problem.v = randn({2, 3, 6, 8});
  problem.dropout.p = 0.1, problem.dropout.seed = 1;
  const AttentionForward f = backend_for(Device::cpu()).attention_forward(problem);
  BOOST_TEST(!f.saved.at(3).defined());
  BOOST_TEST(!f.saved.at(4).defined());
}

// Self-attention's packed operands: the kernel on qkv [B, T, 3E] as a whole gives the output and
// the gradients it gives on the three views of qkv taken apart, bit for bit (the same rows read
// and written, the gradients landing in one tensor), on the small path and on the generic one,
// with a key-padding mask and dropout.
BOOST_AUTO_TEST_CASE(packed_qkv_gives_what_its_three_views_give) {
  manual_seed(5);
  const int64_t B = 2, T = 13, H = 4, d = 32;
  const Tensor qkv = randn({B, T, 3 * H * d}).requires_grad_();
  const Tensor gy = randn({B, H, T, d}), pad = key_padding(T);
  for (const bool small : {true, false}) {
    std::optional<GenericPathOnly> generic;
    if (!small) generic.emplace();
    BOOST_TEST_CONTEXT((small ? "small path" : "generic path")) {
      manual_seed(77);
      const Tensor packed = efficient_attention_packed(qkv, H, {pad}, {}, -1, 0.2);
      const Tensor g_packed = grad(sum(mul(packed, gy)), {qkv})[0];
      const Tensor apart = qkv.detach().clone().requires_grad_();
      const auto [q, k, v] = packed_heads(apart, H);
      manual_seed(77);
      const Tensor separate = efficient_attention(q, k, v, {pad}, {}, -1, 0.2);
      const Tensor g_separate = grad(sum(mul(separate, gy)), {apart})[0];
      BOOST_TEST(max_abs_diff(packed, separate) == 0.0);
      BOOST_TEST(max_abs_diff(g_packed, g_separate) == 0.0);
      BOOST_TEST(max_abs_diff(g_packed, zeros_like(g_packed)) > 0.1);  // the gradient reached qkv
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
