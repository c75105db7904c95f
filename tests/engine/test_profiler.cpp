// The profiler: one event per op and per backward rule, costs from the shapes, worker chunks on
// their own tracks, nothing recorded when it is off.
#include <boost/test/unit_test.hpp>

#include "engine/autograd.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "engine/profiler.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::ThreadCount;

namespace {

std::vector<ProfileEvent> of(const std::vector<ProfileEvent>& events, const std::string& name,
                             ProfilePhase phase) {
  std::vector<ProfileEvent> found;
  for (const ProfileEvent& e : events)
    if (e.name == name && e.phase == phase && !e.scope && e.thread == 0) found.push_back(e);
  return found;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(profiler)

BOOST_AUTO_TEST_CASE(ops_and_backward_rules_are_events_with_their_costs) {
  ThreadCount one(1);
  Tensor a = uniform({64, 32}, -1, 1).requires_grad_();
  Tensor b = uniform({32, 16}, -1, 1).requires_grad_();
  Profiler profiler;
  Tensor y = relu(matmul(a, b));
  sum(y).backward();
  std::vector<ProfileEvent> events = profiler.events();

  auto mm = of(events, "matmul", ProfilePhase::forward);
  BOOST_REQUIRE_EQUAL(mm.size(), 1u);
  BOOST_CHECK_EQUAL(mm[0].flops, 2.0 * 64 * 16 * 32);
  BOOST_CHECK_EQUAL(mm[0].shapes, "[64,32] [32,16]");
  auto relu_fw = of(events, "relu", ProfilePhase::forward);
  BOOST_REQUIRE_EQUAL(relu_fw.size(), 1u);
  BOOST_CHECK_EQUAL(relu_fw[0].flops, 0);
  BOOST_CHECK_EQUAL(relu_fw[0].bytes, 2.0 * 64 * 16 * 4);  // reads and writes [64,16] floats

  // The rules: charged twice their forward's cost (two gradient products for a matmul).
  auto mm_bw = of(events, "matmul", ProfilePhase::backward);
  BOOST_REQUIRE_EQUAL(mm_bw.size(), 1u);
  BOOST_CHECK_EQUAL(mm_bw[0].flops, 2 * mm[0].flops);
  auto relu_bw = of(events, "relu", ProfilePhase::backward);
  BOOST_REQUIRE_EQUAL(relu_bw.size(), 1u);
  BOOST_CHECK_EQUAL(relu_bw[0].bytes, 2 * relu_fw[0].bytes);
  // sum's rule hands back its gradient expanded, a view: it moves nothing
  auto sum_bw = of(events, "sum", ProfilePhase::backward);
  BOOST_REQUIRE_EQUAL(sum_bw.size(), 1u);
  BOOST_CHECK_EQUAL(sum_bw[0].bytes, 0);
  // The ops a rule calls (relu's backward calls relu_backward) belong to the rule's event.
  for (const ProfileEvent& e : events)
    if (e.phase == ProfilePhase::backward && !e.scope && e.thread == 0)
      BOOST_CHECK_MESSAGE(e.name == "matmul" || e.name == "relu" || e.name == "sum",
                          "unexpected backward event '" << e.name << "'");
  // The backward pass is one scope enclosing its rules.
  int scopes = 0;
  for (const ProfileEvent& e : events)
    if (e.scope && e.name == "backward") {
      ++scopes;
      for (const ProfileEvent& r : mm_bw) {
        BOOST_CHECK_GE(r.start_ns, e.start_ns);
        BOOST_CHECK_LE(r.start_ns + r.duration_ns, e.start_ns + e.duration_ns);
      }
    }
  BOOST_CHECK_EQUAL(scopes, 1);
}

BOOST_AUTO_TEST_CASE(a_rule_that_hands_back_its_gradient_moves_no_bytes) {
  ThreadCount one(1);
  Tensor a = uniform({64, 32}, -1, 1).requires_grad_();
  Tensor b = uniform({64, 32}, -1, 1).requires_grad_();
  Tensor row = uniform({32}, -1, 1).requires_grad_();
  Profiler profiler;
  // exp between the adds, so that neither add's gradient is the backward's seed
  sum(exp(add(add(a, b), row))).backward();
  std::vector<ProfileEvent> events = profiler.events();
  auto adds = of(events, "add", ProfilePhase::forward);
  auto rules = of(events, "add", ProfilePhase::backward);
  BOOST_REQUIRE_EQUAL(adds.size(), 2u);
  BOOST_REQUIRE_EQUAL(rules.size(), 2u);
  // the sweep runs the outer add's rule first: it sums the gradient over the rows for `row`
  BOOST_CHECK_EQUAL(rules[0].bytes, 2 * adds[1].bytes);
  // a + b: both gradients are the incoming one
  BOOST_CHECK_EQUAL(rules[1].bytes, 0);
}

// add_relu's rule reads the gradient and the output and writes the one gradient both inputs get:
// the three tensors its forward moved, not twice that.
BOOST_AUTO_TEST_CASE(an_add_relu_rule_is_charged_its_forwards_bytes) {
  ThreadCount one(1);
  Tensor a = uniform({64, 32}, -1, 1).requires_grad_();
  Tensor b = uniform({64, 32}, -1, 1).requires_grad_();
  Profiler profiler;
  sum(exp(add_relu(a, b))).backward();
  std::vector<ProfileEvent> events = profiler.events();
  auto fw = of(events, "add_relu", ProfilePhase::forward);
  auto bw = of(events, "add_relu", ProfilePhase::backward);
  BOOST_REQUIRE_EQUAL(fw.size(), 1u);
  BOOST_REQUIRE_EQUAL(bw.size(), 1u);
  BOOST_CHECK_EQUAL(fw[0].bytes, 3.0 * 64 * 32 * 4);
  BOOST_CHECK_EQUAL(bw[0].bytes, fw[0].bytes);
}

BOOST_AUTO_TEST_CASE(an_op_is_timed_from_the_previous_one_so_events_do_not_overlap) {
  ThreadCount one(1);
  Tensor x = uniform({256, 256}, -1, 1);
  Profiler profiler;
  Tensor y = x;
  for (int i = 0; i < 5; ++i) y = tanh(matmul(y, x));
  std::vector<ProfileEvent> events = profiler.events();
  BOOST_REQUIRE_EQUAL(events.size(), 10u);
  for (size_t i = 1; i < events.size(); ++i)
    BOOST_CHECK_GE(events[i].start_ns, events[i - 1].start_ns + events[i - 1].duration_ns);
  for (const ProfileEvent& e : events) BOOST_CHECK_GT(e.duration_ns, 0);
}

// conv2d builds its forward from a matmul and a bias add on im2col columns: those are part of
// the one conv2d event, which carries the product's FLOPs once and all of its time.
BOOST_AUTO_TEST_CASE(an_op_built_from_ops_is_one_event) {
  ThreadCount one(1);
  Tensor img = uniform({2, 3, 8, 8}, -1, 1), kernel = uniform({4, 3, 3, 3}, -1, 1);
  Tensor bias = uniform({4}, -1, 1);
  Profiler profiler;
  Tensor y = tanh(conv2d(img, kernel, bias, 1, 1));
  std::vector<ProfileEvent> events = profiler.events();
  double forward_flops = 0;
  for (const ProfileEvent& e : events) {
    BOOST_CHECK_MESSAGE(e.name == "conv2d" || e.name == "tanh",
                        "unexpected forward event '" << e.name << "'");
    forward_flops += e.flops;
  }
  auto conv = of(events, "conv2d", ProfilePhase::forward);
  BOOST_REQUIRE_EQUAL(conv.size(), 1u);
  BOOST_CHECK_EQUAL(conv[0].flops, 2.0 * 2 * 4 * 64 * 27);  // N x O x Ho Wo outputs, 27 products
  BOOST_CHECK_EQUAL(forward_flops, conv[0].flops);
}

// A fused op that runs a product is charged its FLOPs like the op it fuses (a product counted as
// memory traffic would lower the step's MFU line without a sign).
BOOST_AUTO_TEST_CASE(a_linear_with_its_relu_is_charged_its_products) {
  ThreadCount one(1);
  Tensor x = uniform({6, 8}, -1, 1), w = uniform({5, 8}, -1, 1), b = uniform({5}, -1, 1);
  Profiler profiler;
  linear_relu(x, w, b);
  auto fused = of(profiler.events(), "linear_relu", ProfilePhase::forward);
  BOOST_REQUIRE_EQUAL(fused.size(), 1u);
  BOOST_CHECK_EQUAL(fused[0].flops, 2.0 * 6 * 5 * 8);
}

BOOST_AUTO_TEST_CASE(costs_of_products_and_views) {
  Tensor x = zeros({2, 5, 8}), w = zeros({3, 8}), bias = zeros({3});
  BOOST_CHECK_EQUAL(profile_cost("linear", {x, w, bias}, zeros({2, 5, 3})).flops, 2.0 * 30 * 8);
  BOOST_CHECK_EQUAL(profile_cost("linear_relu", {x, w, bias}, zeros({2, 5, 3})).flops,
                    2.0 * 30 * 8);
  Tensor img = zeros({1, 4, 6, 6}), kernel = zeros({8, 4, 3, 3});
  BOOST_CHECK_EQUAL(profile_cost("conv2d", {img, kernel}, zeros({1, 8, 4, 4})).flops,
                    2.0 * 8 * 16 * 36);
  // attention: q [B, T, d] = [2, 7, 4], k [2, 9, 4], v [2, 9, 6]: q k^T and P v
  Tensor q = zeros({2, 7, 4}), k = zeros({2, 9, 4}), v = zeros({2, 9, 6});
  BOOST_CHECK_EQUAL(profile_cost("efficient_attention", {q, k, v}, zeros({2, 7, 6})).flops,
                    2.0 * 14 * 9 * (4 + 6));
  // packed self-attention: qkv [2, 7, 3 * 3 * 4] as H = 3 heads of d = 4, 7 keys per query
  BOOST_CHECK_EQUAL(
      profile_cost("efficient_attention_packed", {zeros({2, 7, 36})}, zeros({2, 3, 7, 4})).flops,
      2.0 * (2 * 3 * 7) * 7 * (4 + 4));
  Tensor view = reshape(x, {10, 8});  // shares x's storage: moves nothing
  OpCost c = profile_cost("reshape", {x}, view);
  BOOST_CHECK_EQUAL(c.bytes, 0);
  BOOST_CHECK_EQUAL(profile_cost("exp", {x}, exp(x)).bytes, 2.0 * 80 * 4);
}

BOOST_AUTO_TEST_CASE(pool_workers_have_tracks_of_their_own) {
  ThreadCount two(2);
  Tensor x = uniform({1 << 21}, -1, 1);
  Profiler profiler;
  Tensor y = exp(x);  // large enough to be split over both threads
  std::vector<ProfileEvent> events = profiler.events();
  auto fw = of(events, "exp", ProfilePhase::forward);
  BOOST_REQUIRE_EQUAL(fw.size(), 1u);
  int chunks = 0;
  for (const ProfileEvent& e : events)
    if (e.thread == 1 && e.name == "chunk") {
      ++chunks;
      BOOST_CHECK_GE(e.start_ns, fw[0].start_ns);
      BOOST_CHECK_LE(e.start_ns + e.duration_ns, fw[0].start_ns + fw[0].duration_ns);
    }
  BOOST_CHECK_GE(chunks, 1);
}

BOOST_AUTO_TEST_CASE(nothing_is_recorded_outside_a_profiler_and_scopes_nest) {
  Tensor x = uniform({8}, -1, 1);
  { Tensor unseen = exp(x); }
  Profiler profiler;
  {
    ProfileScope step("optimizer step", ProfilePhase::optimizer);
    Tensor y = mul(x, 2.0);
  }
  Tensor z = exp(x);
  std::vector<ProfileEvent> events = profiler.events();
  BOOST_REQUIRE_EQUAL(events.size(), 3u);
  BOOST_CHECK_EQUAL(events[0].name, "optimizer step");
  BOOST_CHECK(events[0].scope);
  BOOST_CHECK_EQUAL(events[1].name, "mul_scalar");
  BOOST_CHECK(events[1].phase == ProfilePhase::optimizer);
  BOOST_CHECK_EQUAL(events[2].name, "exp");
  BOOST_CHECK(events[2].phase == ProfilePhase::forward);  // the scope's phase ended with it
  qkv::testing::check_error([] { Profiler second; }, {"Profiler", "already running"});
}

BOOST_AUTO_TEST_SUITE_END()
