// The dropout op on the GPU (Backend's composed default: the Bernoulli fill, then a multiply)
// against the CPU's fused kernels: the same output and gradient, exactly, from the same generator
// state, drawn sequentially and by example.
#include "engine/example_draws.h"
#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

BOOST_AUTO_TEST_SUITE(dropout_op)

BOOST_AUTO_TEST_CASE(dropout_forward_and_backward_equal_the_cpu_bit_for_bit,
                     *utf::precondition(gpu_present)) {
  for (DType t : {DType::f32, DType::f64})
    for (bool by_example : {false, true}) {
      const std::string what =
          std::string("dropout ") + dtype_name(t) + (by_example ? " by example" : " sequential");
      // a last dim of whole AVX-512 groups and a remainder on the CPU side
      Tensor x = random_tensor({4, 5, 133}, t, -2, 2, 91);
      Tensor gy = random_tensor({4, 5, 133}, t, -1, 1, 92);
      std::vector<Tensor> results[2];
      uint64_t offsets[2];
      for (int side = 0; side < 2; ++side) {
        const bool gpu_side = side == 1;
        Generator gen(43);
        gen.set_offset(7);
        std::optional<ExampleDraws> draws;
        if (by_example) draws.emplace(gen, std::vector<uint64_t>{3, uint64_t(1) << 40, 0, 17});
        Tensor xs = (gpu_side ? on_gpu(x) : x.detach().clone()).requires_grad_();
        Tensor y = dropout(xs, 0.3, true, &gen);
        y.backward(gpu_side ? on_gpu(gy) : gy);
        results[side] = {y, xs.grad()};
        offsets[side] = gen.offset();
      }
      check_equal(results[1][0], results[0][0], what + " y");
      check_equal(results[1][1], results[0][1], what + " grad x");
      BOOST_TEST(offsets[0] == offsets[1], what);
    }
}

BOOST_AUTO_TEST_SUITE_END()
