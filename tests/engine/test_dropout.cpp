// dropout as one recorded op: the CPU's fused kernels against the composed path they replace
// (the Bernoulli fill of the scaled mask, then a multiply, forward and backward), bit for bit, on
// both streams of keep decisions, ragged sizes, two thread counts, float32 and float64; the edge
// cases PyTorch's F.dropout defines; the one profiler row. And gelu_dropout against gelu then
// dropout, the same way.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <optional>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/example_draws.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "tests/engine/dropout_checks.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::awkward_input;
using qkv::testing::check_error;
using qkv::testing::check_one_row_each_way;
using qkv::testing::differing;
using qkv::testing::ThreadCount;

namespace {

// What dropout computed before it was an op of its own: the mask a Bernoulli fill draws from the
// generator (sequentially, or by example while an ExampleDraws lives), multiplied in by mul.
Tensor composed_dropout(const Tensor& x, double p, Generator& g) {
  if (g.example_ids().empty())
    return mul(x, bernoulli(x.shape(), 1 - p, {x.dtype(), x.device()}, &g, 1.0 / (1 - p)));
  const std::vector<uint64_t>& ids = g.example_ids();
  Tensor mask = Tensor::empty(x.shape(), x.dtype(), x.device());
  mask.backend().random_bernoulli_by_example(
      mask, philox::call_key(g.seed(), g.take(1)),
      tensor_i64(std::vector<int64_t>(ids.begin(), ids.end()), {int64_t(ids.size())}), 1 - p,
      1.0 / (1 - p));
  return mul(x, mask);
}

// dropout and the composed path from two generators in the same state, forward and backward:
// outputs, gradients and the generators' offsets must agree exactly.
void check_against_composed(const Tensor& x, double p, Generator& fused_gen,
                            Generator& composed_gen, const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    Tensor xf = x.detach().clone().requires_grad_(), xc = x.detach().clone().requires_grad_();
    Tensor yf = dropout(xf, p, true, &fused_gen), yc = composed_dropout(xc, p, composed_gen);
    BOOST_TEST(differing(yf, yc) == 0);
    BOOST_TEST(fused_gen.offset() == composed_gen.offset());
    Tensor g = awkward_input(x.shape(), x.dtype(), 17);
    yf.backward(g);
    yc.backward(g);
    BOOST_TEST(differing(xf.grad(), xc.grad()) == 0);
  }
}

// gelu_dropout against gelu then dropout, from two generators in the same state: outputs, the
// generators' offsets and gradients must agree exactly.
void check_gelu_dropout(const Tensor& x, double p, GeluApprox form, Generator& fused_gen,
                        Generator& composed_gen, const std::string& what) {
  BOOST_TEST_CONTEXT(what << (form == GeluApprox::tanh ? ", tanh" : ", erf")) {
    Tensor xf = x.detach().clone().requires_grad_(), xc = x.detach().clone().requires_grad_();
    Tensor yf = gelu_dropout(xf, p, true, &fused_gen, form);
    Tensor yc = dropout(gelu(xc, form), p, true, &composed_gen);
    BOOST_TEST(differing(yf, yc) == 0);
    BOOST_TEST(fused_gen.offset() == composed_gen.offset());
    Tensor g = awkward_input(x.shape(), x.dtype(), 18);
    yf.backward(g);
    yc.backward(g);
    BOOST_TEST(differing(xf.grad(), xc.grad()) == 0);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(dropout_op)

BOOST_AUTO_TEST_CASE(fused_dropout_is_the_composed_multiply_bit_for_bit_sequentially) {
  // Ragged sizes (a block of four, a group of sixteen blocks, a parallel range split mid-block),
  // offsets that start inside a block and one whose low word wraps inside a group.
  const uint64_t wraps = (uint64_t(1) << 32) - 37;
  for (int threads : {1, 2})
    for (DType dtype : {DType::f32, DType::f64})
      for (int64_t n : {1, 15, 16, 17, 1000003})
        for (uint64_t offset : {uint64_t(0), uint64_t(3), wraps}) {
          ThreadCount count(threads);
          Generator a(77), b(77);
          a.set_offset(offset), b.set_offset(offset);
          check_against_composed(awkward_input({n}, dtype, uint64_t(n)), 0.3, a, b,
                                 std::to_string(threads) + " threads, " + dtype_name(dtype) + ", " +
                                     std::to_string(n) + " elements, offset " +
                                     std::to_string(offset));
        }
}

BOOST_AUTO_TEST_CASE(fused_dropout_is_the_composed_multiply_bit_for_bit_by_example) {
  // Lines of the last dim of every width class (1, under a block, a block and one, not a whole
  // group, many groups and a remainder), every trailing slot, an id above 2^32.
  const std::vector<uint64_t> ids{5, (uint64_t(1) << 40) + 2, 0, 9};
  for (int threads : {1, 2})
    for (DType dtype : {DType::f32, DType::f64})
      for (const Shape& shape :
           {Shape{4}, Shape{4, 1}, Shape{4, 3}, Shape{4, 5}, Shape{4, 15}, Shape{4, 17},
            Shape{4, 3, 2, 7, 9}, Shape{4, 20, 128}, Shape{4, 250003 / 4 - 1}}) {
        ThreadCount count(threads);
        Generator a(91), b(91);
        a.set_offset(12), b.set_offset(12);
        const ExampleDraws da(a, ids), db(b, ids);
        check_against_composed(
            awkward_input(shape, dtype, 5), 0.25, a, b,
            std::to_string(threads) + " threads, " + dtype_name(dtype) + ", " + shape_str(shape));
      }
}

BOOST_AUTO_TEST_CASE(the_fused_kernels_equal_the_backend_default) {
  // The Backend methods themselves (the default is what CUDA runs): outputs and gradients, of
  // dropout (no activation) and of gelu_dropout in both GELU forms.
  Backend& cpu = backend_for(Device::cpu());
  for (DType dtype : {DType::f32, DType::f64})
    for (std::optional<UnaryOp> gelu : {std::optional<UnaryOp>(), std::optional(UnaryOp::gelu_erf),
                                        std::optional(UnaryOp::gelu_tanh)})
      for (bool by_example : {false, true}) {
        const Tensor x = awkward_input({3, 7, 33}, dtype, 3),
                     gy = awkward_input({3, 7, 33}, dtype, 4);
        DropoutDraws draws{.seed = 5, .offset = 11, .key = 0, .examples = Tensor()};
        if (by_example) draws = {.key = 0x1234567890ull, .examples = tensor_i64({8, 1, 3}, {3})};
        const bool plain = !gelu;
        const UnaryOp form = gelu.value_or(UnaryOp::gelu_erf);
        Tensor yf = Tensor::empty(x.shape(), dtype), yd = Tensor::empty(x.shape(), dtype);
        const Tensor fused_mask = plain ? cpu.dropout_forward(x, draws, 0.4, yf)
                                        : cpu.gelu_dropout_forward(x, form, draws, 0.4, yf);
        const Tensor default_mask =
            plain ? cpu.Backend::dropout_forward(x, draws, 0.4, yd)
                  : cpu.Backend::gelu_dropout_forward(x, form, draws, 0.4, yd);
        BOOST_TEST_CONTEXT(dtype_name(dtype) << (plain                        ? " dropout"
                                                 : form == UnaryOp::gelu_tanh ? " gelu tanh"
                                                                              : " gelu erf")
                                             << (by_example ? " by example" : " sequential")) {
          BOOST_TEST((fused_mask.dtype() == DType::b8));  // one byte per element
          BOOST_TEST(differing(yf, yd) == 0);
          Tensor gf = Tensor::empty(x.shape(), dtype), gd = Tensor::empty(x.shape(), dtype);
          if (plain) {
            cpu.dropout_backward(gy, fused_mask, 0.4, gf);
            cpu.Backend::dropout_backward(gy, default_mask, 0.4, gd);
            // and the mask holds the decisions: kept where the default's scaled mask is not 0
            BOOST_TEST(differing(fused_mask, gt(default_mask, 0.0)) == 0);
          } else {
            cpu.gelu_dropout_backward(gy, x, form, fused_mask, 0.4, gf);
            cpu.Backend::gelu_dropout_backward(gy, x, form, default_mask, 0.4, gd);
          }
          BOOST_TEST(differing(gf, gd) == 0);
        }
      }
}

BOOST_AUTO_TEST_CASE(strided_inputs_and_gradients_give_the_composed_values) {
  Tensor base = awkward_input({33, 20}, DType::f32, 8);
  Tensor x = transpose(base, 0, 1).requires_grad_();  // [20, 33], not contiguous
  Tensor xc = transpose(base.detach().clone(), 0, 1).requires_grad_();
  Generator a(3), b(3);
  Tensor yf = dropout(x, 0.5, true, &a), yc = composed_dropout(xc, 0.5, b);
  BOOST_TEST(differing(yf, yc) == 0);
  // a gradient that is itself a transposed view
  Tensor g = transpose(awkward_input({33, 20}, DType::f32, 9), 0, 1);
  yf.backward(g);
  yc.backward(g);
  BOOST_TEST(differing(x.grad(), xc.grad()) == 0);
}

BOOST_AUTO_TEST_CASE(edge_cases_keep_pytorchs_semantics) {
  Generator g(4);
  Tensor x = tensor({1, -2, 3});
  // F.dropout(x, 0, True) and F.dropout(x, p, False) return x itself, drawing nothing
  BOOST_TEST(dropout(x, 0.0, true, &g).same_storage(x));
  BOOST_TEST(dropout(x, 0.5, false, &g).same_storage(x));
  BOOST_TEST(g.offset() == 0u);
  // p = 1: x * 0 (torch 1.13: [0, -0, nan] for [1, -2, nan]), no draws
  Tensor with_nan = tensor({1, -2, std::nan("")});
  Tensor zeroed = dropout(with_nan, 1.0, true, &g);
  BOOST_TEST(differing(zeroed, mul(with_nan, 0.0)) == 0);
  BOOST_TEST(std::signbit(zeroed.to_vector<double>()[1]));
  BOOST_TEST(g.offset() == 0u);
  // empty tensors: an empty result, no counters taken (none needed), also by example
  BOOST_TEST((dropout(zeros({0, 3}), 0.5, true, &g).shape() == Shape{0, 3}));
  BOOST_TEST(g.offset() == 0u);
  {
    const ExampleDraws draws(g, {1, 2});
    BOOST_TEST((dropout(zeros({2, 0, 4}), 0.5, true, &g).shape() == Shape{2, 0, 4}));
    BOOST_TEST(g.offset() == 1u);  // one counter per call, as any call by example
  }
  // integer tensors: refused by name (PyTorch cannot cast the float mask into them either)
  check_error(
      [&] {
        dropout(tensor_i64({1, 2}), 0.5, true, &g);
      },
      {"dropout", "float32 or float64", "int64"});
}

BOOST_AUTO_TEST_CASE(the_backward_is_differentiable_again) {
  // d/dx of sum(w * dL/dx) with L = sum(c * dropout(x)): the mask applied to c, then to w:
  // create_graph records the backward as dropout again (the same mask), not as a kernel.
  Generator g(6);
  Tensor x = randn({5, 8}, {DType::f64}).requires_grad_();
  Tensor c = randn({5, 8}, {DType::f64}).requires_grad_();
  Tensor y = dropout(x, 0.5, true, &g);
  Tensor gx = grad(sum(mul(y, c)), {x}, Tensor(), false, true)[0];
  Tensor gc = grad(sum(mul(gx, ones_like(gx))), {c})[0];
  // d/dc sum(mask * c) = mask, the dropout of ones with the same mask
  Tensor mask = div(y.detach(), x.detach());  // scale or 0 (x has no zeros)
  qkv::testing::check_values(gc, mask.to_vector<double>(), 1e-12);
}

BOOST_AUTO_TEST_CASE(the_profiler_shows_one_dropout_row_each_way) {
  // x read, y written, one byte of mask per element; the backward moves as much
  check_one_row_each_way([](const Tensor& x, Generator& g) { return dropout(x, 0.1, true, &g); },
                         "dropout", {"bernoulli", "mul"}, 4 + 4 + 1, 4 + 4 + 1);
}

BOOST_AUTO_TEST_SUITE_END()

// gelu_dropout: dropout of gelu(x) in one pass each way, held to the two ops it replaces.
BOOST_AUTO_TEST_SUITE(gelu_dropout_op)

BOOST_AUTO_TEST_CASE(gelu_dropout_is_gelu_then_dropout_bit_for_bit) {
  // Both streams of decisions, sizes that split a block and a parallel range, wide and narrow
  // lines by example, both GELU forms, both dtypes, one and two threads.
  const std::vector<uint64_t> ids{5, (uint64_t(1) << 40) + 2, 0, 9};
  for (int threads : {1, 2})
    for (DType dtype : {DType::f32, DType::f64})
      for (GeluApprox form : {GeluApprox::none, GeluApprox::tanh}) {
        ThreadCount count(threads);
        const std::string where = std::to_string(threads) + " threads, " + dtype_name(dtype);
        for (int64_t n : {17, 100003}) {
          Generator a(77), b(77);
          a.set_offset(3), b.set_offset(3);
          check_gelu_dropout(awkward_input({n}, dtype, uint64_t(n)), 0.3, form, a, b,
                             where + ", " + std::to_string(n) + " elements");
        }
        for (const Shape& shape : {Shape{4, 3}, Shape{4, 17}, Shape{4, 11, 512}}) {
          Generator a(91), b(91);
          const ExampleDraws da(a, ids), db(b, ids);
          check_gelu_dropout(awkward_input(shape, dtype, 5), 0.25, form, a, b,
                             where + ", by example " + shape_str(shape));
        }
      }
}

BOOST_AUTO_TEST_CASE(edge_cases_are_gelu_then_dropouts) {
  Generator g(4);
  Tensor x = tensor({1, -2, 3});
  // not training, or p = 0: gelu(x), nothing drawn; p = 1: gelu(x) * 0
  BOOST_TEST(differing(gelu_dropout(x, 0.5, false, &g), gelu(x)) == 0);
  BOOST_TEST(
      differing(gelu_dropout(x, 0.0, true, &g, GeluApprox::tanh), gelu(x, GeluApprox::tanh)) == 0);
  BOOST_TEST(differing(gelu_dropout(x, 1.0, true, &g), mul(gelu(x), 0.0)) == 0);
  BOOST_TEST(g.offset() == 0u);
  check_error([&] { gelu_dropout(x, 1.5, true, &g); }, {"gelu_dropout", "1.5", "[0, 1]"});
}

BOOST_AUTO_TEST_CASE(the_gradient_is_differentiable_again_as_the_two_ops_are) {
  // d/dx sum(w * dL/dx), L = sum(c * gelu_dropout(x)): the create_graph gradient is the composed
  // ops', and its derivative in x (through gelu'') and in c match gelu then dropout's.
  for (GeluApprox form : {GeluApprox::none, GeluApprox::tanh}) {
    Generator a(6), b(6);
    Tensor x = randn({5, 8}, {DType::f64}).requires_grad_();
    Tensor c = randn({5, 8}, {DType::f64}).requires_grad_();
    Tensor w = randn({5, 8}, {DType::f64});
    Tensor gf =
        grad(sum(mul(gelu_dropout(x, 0.5, true, &a, form), c)), {x}, Tensor(), false, true)[0];
    Tensor gc =
        grad(sum(mul(dropout(gelu(x, form), 0.5, true, &b), c)), {x}, Tensor(), false, true)[0];
    BOOST_TEST(differing(gf, gc) == 0);
    std::vector<Tensor> second_f = grad(sum(mul(gf, w)), {x, c});
    std::vector<Tensor> second_c = grad(sum(mul(gc, w)), {x, c});
    BOOST_TEST(differing(second_f[0], second_c[0]) == 0);
    BOOST_TEST(differing(second_f[1], second_c[1]) == 0);
  }
}

BOOST_AUTO_TEST_CASE(the_profiler_shows_one_row_each_way_and_its_bytes) {
  // forward: x read, y and the mask written; backward: gy, x and the mask read, gx written
  check_one_row_each_way(
      [](const Tensor& x, Generator& g) { return gelu_dropout(x, 0.1, true, &g); }, "gelu_dropout",
      {"gelu", "dropout", "gelu_backward"}, 4 + 4 + 1, 4 + 4 + 1 + 4);
}

BOOST_AUTO_TEST_SUITE_END()
