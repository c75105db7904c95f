// The dropout ops on the GPU (Backend's composed defaults: the Bernoulli fill, then a multiply;
// gelu_dropout's gelu, then that; dropout_add's that, then the add) against the CPU's fused
// kernels: the same decisions and generator offsets from the same generator state, drawn
// sequentially and by example.
#include <functional>

#include "engine/example_draws.h"
#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

namespace {

// One side's output, x's gradient and the generator's offset after it.
struct Side {
  Tensor y, gx;
  uint64_t offset = 0;
};

// Runs op forward and backward on the CPU ([0]) and on the GPU ([1]), each from a generator in
// the same state, drawing by example when asked.
std::array<Side, 2> run_on_both(const Tensor& x, const Tensor& gy, bool by_example,
                                const std::function<Tensor(const Tensor&, Generator&)>& op) {
  std::array<Side, 2> sides;
  for (int side = 0; side < 2; ++side) {
    const bool gpu_side = side == 1;
    Generator gen(43);
    gen.set_offset(7);
    std::optional<ExampleDraws> draws;
    if (by_example) draws.emplace(gen, std::vector<uint64_t>{3, uint64_t(1) << 40, 0, 17});
    Tensor xs = (gpu_side ? on_gpu(x) : x.detach().clone()).requires_grad_();
    Tensor y = op(xs, gen);
    y.backward(gpu_side ? on_gpu(gy) : gy);
    sides[side] = {y, xs.grad(), gen.offset()};
  }
  return sides;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(dropout_op)

BOOST_AUTO_TEST_CASE(dropout_forward_and_backward_equal_the_cpu_bit_for_bit,
                     *utf::precondition(gpu_present)) {
  for (DType t : {DType::f32, DType::f64})
    for (bool by_example : {false, true}) {
      const std::string what =
          std::string("dropout ") + dtype_name(t) + (by_example ? " by example" : " sequential");
      // a last dim of whole AVX-512 groups and a remainder on the CPU side
      const Tensor x = random_tensor({4, 5, 133}, t, -2, 2, 91);
      const Tensor gy = random_tensor({4, 5, 133}, t, -1, 1, 92);
      const auto [cpu, gpu] = run_on_both(x, gy, by_example, [](const Tensor& xs, Generator& g) {
        return dropout(xs, 0.3, true, &g);
      });
      check_equal(gpu.y, cpu.y, what + " y");
      check_equal(gpu.gx, cpu.gx, what + " grad x");
      BOOST_TEST(gpu.offset == cpu.offset, what);
    }
}

// gelu_dropout: the same decisions, the values within the GELU kernels' own tolerance
// (elementwise_test.cpp: libdevice's erf against the CPU's).
BOOST_AUTO_TEST_CASE(gelu_dropout_equals_the_cpus_fused_kernel, *utf::precondition(gpu_present)) {
  for (DType t : {DType::f32, DType::f64})
    for (bool by_example : {false, true}) {
      const std::string what = std::string("gelu_dropout ") + dtype_name(t) +
                               (by_example ? " by example" : " sequential");
      const Tensor x = random_tensor({4, 5, 133}, t, -3, 3, 93);
      const Tensor gy = random_tensor({4, 5, 133}, t, -1, 1, 94);
      const auto [cpu, gpu] = run_on_both(x, gy, by_example, [](const Tensor& xs, Generator& g) {
        return gelu_dropout(xs, 0.3, true, &g);
      });
      const double tol = t == DType::f32 ? 5e-5 : 5e-12;
      check_close(gpu.y, cpu.y, tol, what + " y");
      check_close(gpu.gx, cpu.gx, tol, what + " grad x");
      check_equal(eq(gpu.y, 0.0), eq(cpu.y, 0.0), what + " dropped");
      BOOST_TEST(gpu.offset == cpu.offset, what);
    }
}

// dropout_add: the GPU's dropout then add against the CPU's one pass, bit for bit (the residual
// is -x / 2, exact, so x's gradient is the mask's plus the residual's).
BOOST_AUTO_TEST_CASE(dropout_add_equals_the_cpus_fused_kernel, *utf::precondition(gpu_present)) {
  for (DType t : {DType::f32, DType::f64})
    for (bool by_example : {false, true}) {
      const std::string what = std::string("dropout_add ") + dtype_name(t) +
                               (by_example ? " by example" : " sequential");
      const Tensor x = random_tensor({4, 5, 133}, t, -2, 2, 95);
      const Tensor gy = random_tensor({4, 5, 133}, t, -1, 1, 96);
      const auto [cpu, gpu] = run_on_both(x, gy, by_example, [](const Tensor& xs, Generator& g) {
        return dropout_add(xs, mul(xs, -0.5), 0.3, true, &g);
      });
      check_equal(gpu.y, cpu.y, what + " y");
      check_equal(gpu.gx, cpu.gx, what + " grad x");
      BOOST_TEST(gpu.offset == cpu.offset, what);
    }
}

BOOST_AUTO_TEST_SUITE_END()
