// dropout_add: a residual block's residual + dropout(x) as one op, held to the two ops it
// replaces bit for bit (outputs, both gradients, the generator's offset) on both streams of keep
// decisions; the Backend's default against the CPU's fused kernel; the cases where it is the two
// ops; the second derivative; the one profiler row each way.
#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/example_draws.h"
#include "engine/ops.h"
#include "tests/engine/dropout_checks.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::awkward_input;
using qkv::testing::check_error;
using qkv::testing::check_one_row_each_way;
using qkv::testing::differing;
using qkv::testing::ThreadCount;

namespace {

// dropout_add against add(residual, dropout(x)), from two generators in the same state.
void check_against_the_two_ops(const Tensor& x, const Tensor& residual, double p,
                               Generator& fused_gen, Generator& composed_gen,
                               const std::string& what) {
  BOOST_TEST_CONTEXT(what) {
    Tensor xf = x.detach().clone().requires_grad_(), xc = x.detach().clone().requires_grad_();
    Tensor rf = residual.detach().clone().requires_grad_();
    Tensor rc = residual.detach().clone().requires_grad_();
    Tensor yf = dropout_add(xf, rf, p, true, &fused_gen);
    Tensor yc = add(rc, dropout(xc, p, true, &composed_gen));
    BOOST_TEST(differing(yf, yc) == 0);
    BOOST_TEST(fused_gen.offset() == composed_gen.offset());
    Tensor g = awkward_input(x.shape(), x.dtype(), 19);
    yf.backward(g);
    yc.backward(g);
    BOOST_TEST(differing(xf.grad(), xc.grad()) == 0);
    BOOST_TEST(differing(rf.grad(), rc.grad()) == 0);
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(dropout_add_op)

BOOST_AUTO_TEST_CASE(dropout_add_is_dropout_then_add_bit_for_bit) {
  // Both streams, sizes that split a stretch and a parallel range, lines by example narrower and
  // wider than a group, both dtypes, one and two threads; NaN, infinities and -0 in x and in the
  // residual (-0 + -0 is -0, 0 + -0 is 0: the add's own rules).
  const std::vector<uint64_t> ids{5, (uint64_t(1) << 40) + 2, 0, 9};
  for (int threads : {1, 2})
    for (DType dtype : {DType::f32, DType::f64}) {
      ThreadCount count(threads);
      const std::string where = std::to_string(threads) + " threads, " + dtype_name(dtype);
      for (int64_t n : {17, 1025, 100003}) {
        Generator a(77), b(77);
        a.set_offset(3), b.set_offset(3);
        check_against_the_two_ops(awkward_input({n}, dtype, uint64_t(n)),
                                  awkward_input({n}, dtype, uint64_t(n) + 1), 0.3, a, b,
                                  where + ", " + std::to_string(n) + " elements");
      }
      for (const Shape& shape : {Shape{4, 3}, Shape{4, 17}, Shape{4, 11, 128}}) {
        Generator a(91), b(91);
        const ExampleDraws da(a, ids), db(b, ids);
        check_against_the_two_ops(awkward_input(shape, dtype, 5), awkward_input(shape, dtype, 6),
                                  0.25, a, b, where + ", by example " + shape_str(shape));
      }
    }
}

BOOST_AUTO_TEST_CASE(the_fused_kernel_equals_the_backend_default) {
  // The Backend method itself (the default is what CUDA runs): the output and the mask, whose
  // backward is dropout's.
  Backend& cpu = backend_for(Device::cpu());
  for (DType dtype : {DType::f32, DType::f64})
    for (bool by_example : {false, true}) {
      const Tensor x = awkward_input({3, 7, 33}, dtype, 3);
      const Tensor residual = awkward_input({3, 7, 33}, dtype, 4);
      DropoutDraws draws{.seed = 5, .offset = 11, .key = 0, .examples = Tensor()};
      if (by_example) draws = {.key = 0x1234567890ull, .examples = tensor_i64({8, 1, 3}, {3})};
      Tensor yf = Tensor::empty(x.shape(), dtype), yd = Tensor::empty(x.shape(), dtype);
      const Tensor fused_mask = cpu.dropout_add_forward(x, residual, draws, 0.4, yf);
      const Tensor default_mask = cpu.Backend::dropout_add_forward(x, residual, draws, 0.4, yd);
      BOOST_TEST_CONTEXT(dtype_name(dtype) << (by_example ? " by example" : " sequential")) {
        BOOST_TEST(differing(yf, yd) == 0);
        BOOST_TEST(differing(fused_mask, gt(default_mask, 0.0)) == 0);
      }
    }
}

BOOST_AUTO_TEST_CASE(where_it_cannot_fuse_it_is_the_two_ops) {
  Generator g(4), h(4);
  const Tensor x = tensor({1, -2, 3, 4, -5, 6}, {2, 3});
  const Tensor residual = tensor({0.5, 0.25, -1, 2, 3, -4}, {2, 3});
  // not training, or p = 0: residual + x, nothing drawn; p = 1: residual + x * 0
  BOOST_TEST(differing(dropout_add(x, residual, 0.5, false, &g), add(residual, x)) == 0);
  BOOST_TEST(differing(dropout_add(x, residual, 0.0, true, &g), add(residual, x)) == 0);
  BOOST_TEST(differing(dropout_add(x, residual, 1.0, true, &g), add(residual, mul(x, 0.0))) == 0);
  BOOST_TEST(g.offset() == 0u);
  // a residual that broadcasts: the two ops, with their draws
  const Tensor row = tensor({7, 8, 9});
  BOOST_TEST(differing(dropout_add(x, row, 0.5, true, &g), add(row, dropout(x, 0.5, true, &h))) ==
             0);
  BOOST_TEST(g.offset() == h.offset());
  // a strided residual is read as its values
  const Tensor strided = transpose(tensor({0.5, 0.25, -1, 2, 3, -4}, {3, 2}), 0, 1);
  BOOST_TEST(differing(dropout_add(x, strided, 0.5, true, &g),
                       add(strided, dropout(x, 0.5, true, &h))) == 0);
  check_error([&] { dropout_add(x, residual, 1.5, true, &g); }, {"dropout_add", "1.5", "[0, 1]"});
  check_error([&] { dropout_add(x, residual.to(DType::f64), 0.5, true, &g); },
              {"dropout_add", "float32", "float64"});
}

BOOST_AUTO_TEST_CASE(the_gradient_is_differentiable_again_as_the_two_ops_are) {
  // d/d(x, c) sum(w * dL/dx), L = sum(c * dropout_add(x, r)): the create_graph gradient is
  // dropout's recorded op, so its derivative in c is the mask applied to w, as the two ops give.
  Generator a(6), b(6);
  Tensor x = randn({5, 8}, {DType::f64}).requires_grad_();
  Tensor r = randn({5, 8}, {DType::f64}).requires_grad_();
  Tensor c = randn({5, 8}, {DType::f64}).requires_grad_();
  Tensor w = randn({5, 8}, {DType::f64});
  std::vector<Tensor> gf =
      grad(sum(mul(dropout_add(x, r, 0.5, true, &a), c)), {x, r}, Tensor(), false, true);
  std::vector<Tensor> gc =
      grad(sum(mul(add(r, dropout(x, 0.5, true, &b)), c)), {x, r}, Tensor(), false, true);
  BOOST_TEST(differing(gf[0], gc[0]) == 0);
  BOOST_TEST(differing(gf[1], gc[1]) == 0);
  const Tensor second_f = grad(sum(mul(add(gf[0], gf[1]), w)), {c})[0];
  const Tensor second_c = grad(sum(mul(add(gc[0], gc[1]), w)), {c})[0];
  BOOST_TEST(differing(second_f, second_c) == 0);
}

BOOST_AUTO_TEST_CASE(the_profiler_shows_one_row_each_way_and_its_bytes) {
  // forward: x and the residual read, y and the mask written; backward: gy and the mask read, x's
  // gradient written (the residual's is gy itself)
  check_one_row_each_way(
      [](const Tensor& x, Generator& g) { return dropout_add(x, mul(x, 2.0), 0.1, true, &g); },
      "dropout_add", {"dropout", "add"}, 4 + 4 + 4 + 1, 4 + 1 + 4);
}

BOOST_AUTO_TEST_SUITE_END()
