// CBAM's passes with the channel weights folded in: the CPU's kernels for mean_amax_scaled,
// mul3 (and mul3_add_relu, a residual block's end) and their gradients
// (engine/cpu/cbam_kernels.cpp) against Backend's defaults (the ops' own sequence, which CUDA
// runs), bit for bit, over the shapes CBAM has and the edges the kernels hand to the defaults, with
// ties, NaN and infinities, at one and two threads; then the ops against the ops they replace, and
// CBAM against its three-op form.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/profiler.h"
#include "nn/channel_attention.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_error;
using qkv::testing::equal_values;

namespace {

using Layout = qkv::testing::BlockLayout;
// CBAM's 7 x 7 and 28 x 28 planes, one channel, a plane longer than the kernels' block and a
// single image with many channels (both to the defaults), a run of one value (to the defaults)
const Layout kLayouts[] = {{3, 5, 49},   {2, 16, 784}, {4, 1, 9},
                           {2, 3, 1100}, {1, 64, 16},  {6, 4, 1}};

// x on a coarse grid (ties), with -inf, +inf and a NaN; the scales mostly -1 and 2 (products tie
// across channels too, exactly), some zero, some whose products round; the rest uniform.
struct Operands {
  Tensor x, scale, spatial, gy, gy_pair, sum;
};
Operands operands(const Layout& l, DType dtype) {
  std::vector<double> s(size_t(l.outer * l.reduced));
  for (size_t i = 0; i < s.size(); ++i)
    s[i] = i % 5 == 3 ? 0.0 : i % 5 == 4 ? 0.3 + 0.07 * double(i) : i % 2 ? -1.0 : 2.0;
  const TensorOptions o{.dtype = dtype};
  return {qkv::testing::tied_values(l, dtype), tensor(s, {l.outer, l.reduced}, o),
          rand({l.outer, l.inner}, o),         randn({l.outer, l.reduced, l.inner}, o),
          randn({l.outer, 2, l.inner}, o),     randn({l.outer, l.reduced, l.inner}, o)};
}

template <typename Check>
void for_each_case(Check check) {
  qkv::testing::for_each_layout_dtype_and_thread_count(kLayouts, check);
}

Tensor empty_like(const Tensor& t) { return Tensor::empty(t.shape(), t.dtype(), t.device()); }

}  // namespace

BOOST_AUTO_TEST_SUITE(cbam_kernels)

BOOST_AUTO_TEST_CASE(kernels_give_the_defaults_bits) {
  manual_seed(41);
  Backend& cpu = backend_for(Device::cpu());
  for_each_case([&](const Layout& l, DType dtype) {
    const Operands in = operands(l, dtype);
    const Tensor pair = Tensor::empty({l.outer, 2, l.inner}, dtype);
    Tensor kernel = empty_like(pair), composed = empty_like(pair);
    cpu.mean_amax_scaled(in.x, in.scale, kernel);
    cpu.Backend::mean_amax_scaled(in.x, in.scale, composed);
    BOOST_TEST(equal_values(kernel, composed));
    // not trivially: the means are not the maxima, and the pool is of the products, not of x
    BOOST_TEST(!equal_values(select(kernel, 1, 0), select(kernel, 1, 1)));
    Tensor of_x = empty_like(pair);
    cpu.mean_amax(in.x, of_x);
    BOOST_TEST(!equal_values(kernel, of_x));

    for (bool accumulate : {false, true}) {
      Tensor gx = in.sum.clone(), gx_composed = in.sum.clone();
      Tensor gs = empty_like(in.scale), gs_composed = empty_like(in.scale);
      cpu.mean_amax_scaled_backward(in.x, in.scale, kernel, in.gy_pair, gx, gs, accumulate);
      cpu.Backend::mean_amax_scaled_backward(in.x, in.scale, kernel, in.gy_pair, gx_composed,
                                             gs_composed, accumulate);
      BOOST_TEST(equal_values(gx, gx_composed));
      BOOST_TEST(equal_values(gs, gs_composed));
    }

    Tensor out = empty_like(in.x), out_composed = empty_like(in.x);
    cpu.mul3(in.x, in.scale, in.spatial, out);
    cpu.Backend::mul3(in.x, in.scale, in.spatial, out_composed);
    BOOST_TEST(equal_values(out, out_composed));
    Tensor gx = empty_like(in.x), gx_composed = empty_like(in.x);
    Tensor gs = empty_like(in.scale), gs_composed = empty_like(in.scale);
    Tensor gp = empty_like(in.spatial), gp_composed = empty_like(in.spatial);
    cpu.mul3_backward(in.gy, in.x, in.scale, in.spatial, gx, gs, gp);
    cpu.Backend::mul3_backward(in.gy, in.x, in.scale, in.spatial, gx_composed, gs_composed,
                               gp_composed);
    BOOST_TEST(equal_values(gx, gx_composed));
    BOOST_TEST(equal_values(gs, gs_composed));
    BOOST_TEST(equal_values(gp, gp_composed));

    // with a residual added and the ReLU: in.sum's signs mixed, so some sums clip (NaN and the
    // infinities of the products pass through the add)
    Tensor added = empty_like(in.x), added_composed = empty_like(in.x);
    cpu.mul3_add_relu(in.sum, in.x, in.scale, in.spatial, added);
    cpu.Backend::mul3_add_relu(in.sum, in.x, in.scale, in.spatial, added_composed);
    BOOST_TEST(equal_values(added, added_composed));
    BOOST_TEST(!equal_values(added, out));
  });
}

// Each op against the ops it stands for, through autograd: the values, and every input's gradient
// by the kernels (a plain backward) and by the composed rule (create_graph), bit for bit.
BOOST_AUTO_TEST_CASE(the_ops_give_the_ops_they_replace_bits) {
  manual_seed(42);
  for (DType dtype : {DType::f32, DType::f64}) {
    BOOST_TEST_CONTEXT(dtype_name(dtype)) {
      const TensorOptions o{.dtype = dtype, .requires_grad = true};
      Tensor x = randn({3, 16, 7, 7}, o), cw = rand({3, 16, 1, 1}, o), sw = rand({3, 1, 7, 7}, o);
      const Tensor r_pool = randn({3, 2, 7, 7}, {.dtype = dtype}),
                   r_out = randn({3, 16, 7, 7}, {.dtype = dtype});
      const Tensor pool = mean_amax_scaled(x, cw), pool_ops = mean_amax(mul(x, cw), {1});
      BOOST_TEST(equal_values(pool, pool_ops));
      const Tensor out = mul3(x, cw, sw), out_ops = mul(mul(x, cw), sw);
      BOOST_TEST(equal_values(out, out_ops));
      Tensor res = randn({3, 16, 7, 7}, o);
      const Tensor added = mul3_add_relu(res, x, cw, sw), added_ops = add_relu(res, out_ops);
      BOOST_TEST(equal_values(added, added_ops));
      BOOST_TEST(amin(added).item() == 0.0);  // some sums clipped
      for (bool create_graph : {false, true}) {
        BOOST_TEST_CONTEXT("create_graph " << create_graph) {
          auto grads_of = [&](const Tensor& y, const Tensor& r, const std::vector<Tensor>& in) {
            return grad(sum(mul(y, r)), in, Tensor(), /*retain_graph=*/true, create_graph);
          };
          const auto g = grads_of(pool, r_pool, {x, cw}),
                     g_ops = grads_of(pool_ops, r_pool, {x, cw});
          for (int i = 0; i < 2; ++i)
            BOOST_CHECK_MESSAGE(equal_values(g[i], g_ops[i]), "input " << i);
          const auto h = grads_of(out, r_out, {x, cw, sw}),
                     h_ops = grads_of(out_ops, r_out, {x, cw, sw});
          for (int i = 0; i < 3; ++i)
            BOOST_CHECK_MESSAGE(equal_values(h[i], h_ops[i]), "input " << i);
          const auto a = grads_of(added, r_out, {res, x, cw, sw}),
                     a_ops = grads_of(added_ops, r_out, {res, x, cw, sw});
          for (int i = 0; i < 4; ++i)
            BOOST_CHECK_MESSAGE(equal_values(a[i], a_ops[i]), "mul3_add_relu's input " << i);
        }
      }
    }
  }
}

// CBAM as it was written, y = x * cw and y * sw(y): its output bit for bit. Its gradients are the
// same sums in another grouping: the ops add y's two gradients and multiply the sum by cw, the
// fused ops multiply each by cw and add the products, so they agree to rounding. CBAM's input is
// an intermediate here, as in a network: the sweep then offers its gradient sum, and
// mean_amax_scaled's rule (which runs after mul3's) adds into it.
BOOST_AUTO_TEST_CASE(cbam_matches_its_three_op_form) {
  manual_seed(43);
  nn::CBAM cbam(16, 4, 7);
  Tensor x0 = randn({2, 16, 14, 14}, {.requires_grad = true});
  const Tensor r = randn({2, 16, 14, 14});
  auto three_ops = [&](const Tensor& in) {
    const Tensor cw = cbam.channel->weights(in);
    const Tensor y = mul(in, cw);
    return mul(y, cbam.spatial->weights(y));
  };
  // the gradients of x0 and of every parameter after one backward through `block`, and how many
  // gradient sums of CBAM's input's shape the sweep added apart (accumulate_grad)
  auto gradients = [&](auto block) {
    x0.zero_grad();
    cbam.zero_grad();
    Profiler profiler;
    const Tensor out = block(mul(x0, 1.5));
    sum(mul(out, r)).backward();
    std::vector<Tensor> g{x0.grad()};
    for (const Tensor& p : cbam.parameters()) g.push_back(p.grad());
    int sums = 0;
    for (const ProfileEvent& e : profiler.events())
      sums += e.name == "accumulate_grad" && e.shapes == shape_str(x0.shape());
    return std::tuple{out, g, sums};
  };
  const auto [fused, g, fused_sums] = gradients([&](const Tensor& in) { return cbam.forward(in); });
  const auto [ops, g_ops, ops_sums] = gradients(three_ops);
  BOOST_TEST(equal_values(fused, ops));
  // the input's three gradients (the output's product, then the two pools) in one sum, each
  // pool's rule adding into it, as the three ops' pools add into y's and x's
  BOOST_TEST(fused_sums == 0);
  BOOST_TEST(ops_sums == 0);
  BOOST_REQUIRE_EQUAL(g.size(), g_ops.size());
  for (size_t i = 0; i < g.size(); ++i) {
    const double scale = amax(abs(g_ops[i])).item();
    BOOST_CHECK_MESSAGE(scale > 0 && amax(abs(sub(g[i], g_ops[i]))).item() <= 1e-5 * scale,
                        "gradient " << i);
  }
}

// A residual block's end, relu(identity + CBAM(y)) in CBAM's output pass: the values and every
// gradient (the identity's, y's, CBAM's parameters') bit for bit against add_relu after forward.
BOOST_AUTO_TEST_CASE(cbam_with_the_residual_add_gives_add_relu_after_it_bits) {
  manual_seed(44);
  nn::CBAM cbam(16, 4, 7);
  Tensor y = randn({2, 16, 14, 14}, {.requires_grad = true});
  Tensor identity = randn({2, 16, 14, 14}, {.requires_grad = true});
  const Tensor r = randn({2, 16, 14, 14});
  auto gradients = [&](auto block) {
    y.zero_grad();
    identity.zero_grad();
    cbam.zero_grad();
    const Tensor out = block(mul(y, 1.5), mul(identity, 1.5));
    sum(mul(out, r)).backward();
    std::vector<Tensor> g{y.grad(), identity.grad()};
    for (const Tensor& p : cbam.parameters()) g.push_back(p.grad());
    return std::pair{out, g};
  };
  const auto [fused, g] = gradients(
      [&](const Tensor& in, const Tensor& res) { return cbam.forward_add_relu(in, res); });
  const auto [ops, g_ops] = gradients(
      [&](const Tensor& in, const Tensor& res) { return add_relu(res, cbam.forward(in)); });
  BOOST_TEST(equal_values(fused, ops));
  BOOST_REQUIRE_EQUAL(g.size(), g_ops.size());
  for (size_t i = 0; i < g.size(); ++i)
    BOOST_CHECK_MESSAGE(equal_values(g[i], g_ops[i]), "gradient " << i);
}

BOOST_AUTO_TEST_CASE(shapes_that_are_not_a_factor_per_channel_or_position_are_errors) {
  const Tensor x = randn({2, 3, 4, 4});
  check_error(
      [&] {
        mean_amax_scaled(x, randn({2, 3, 4, 1}));
      },
      {"mean_amax_scaled", "scale must be [2,3,1,1]", "got [2,3,4,1]"});
  check_error(
      [&] {
        mul3(x, randn({1, 3, 1, 1}), randn({2, 1, 4, 4}));
      },
      {"mul3", "scale must be [2,3,1,1]"});
  check_error(
      [&] {
        mul3(x, randn({2, 3, 1, 1}), randn({2, 3, 4, 4}));
      },
      {"mul3", "spatial must be [2,1,4,4]", "got [2,3,4,4]"});
  check_error([&] { mean_amax_scaled(randn({3}), randn({3})); },
              {"mean_amax_scaled", "x must be [N, C, ...]"});
  check_error(
      [&] {
        mul3_add_relu(randn({2, 3, 4, 1}), x, randn({2, 3, 1, 1}), randn({2, 1, 4, 4}));
      },
      {"mul3_add_relu", "residual must be [2,3,4,4]", "got [2,3,4,1]"});
  check_error(
      [&] {
        mul3_add_relu(x, x, randn({2, 3, 1, 1}), randn({2, 2, 4, 4}));
      },
      {"mul3_add_relu", "spatial must be [2,1,4,4]"});
}

BOOST_AUTO_TEST_SUITE_END()
