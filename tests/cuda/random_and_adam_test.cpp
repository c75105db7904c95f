// Philox random fills (the same numbers as the CPU for the same seed and offset) and the fused
// Adam/AdamW step on the GPU against the CPU.
#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

BOOST_AUTO_TEST_SUITE(random_and_adam)

BOOST_AUTO_TEST_CASE(uniform_and_bernoulli_fills_equal_the_cpu_bit_for_bit,
                     *utf::precondition(gpu_present)) {
  for (DType t : {DType::f32, DType::f64}) {
    for (uint64_t offset : {uint64_t(0), uint64_t(12345), (uint64_t(1) << 33) + 7}) {
      Tensor want = Tensor::empty({100003}, t), got = Tensor::empty({100003}, t, Device::cuda());
      host().random_uniform(want, 42, offset, -2, 3);
      gpu().random_uniform(got, 42, offset, -2, 3);
      check_equal(got, want, std::string("uniform ") + dtype_name(t));
      host().random_bernoulli(want, 43, offset, 0.3, 1 / 0.7);  // dropout's scaled mask
      gpu().random_bernoulli(got, 43, offset, 0.3, 1 / 0.7);
      check_equal(got, want, std::string("bernoulli ") + dtype_name(t));
    }
  }
}

BOOST_AUTO_TEST_CASE(bernoulli_by_example_equals_the_cpu_bit_for_bit,
                     *utf::precondition(gpu_present)) {
  // dropout's masks by example (engine/example_draws.h): rows keyed by example ids, elements by
  // their coordinates, every trailing slot used and a last dim not a multiple of 4
  const std::vector<int64_t> ids{3, int64_t(1) << 40, 0, 17};
  for (DType t : {DType::f32, DType::f64})
    for (const Shape& shape : {Shape{4, 5, 7, 3, 9}, Shape{4, 301}, Shape{4}}) {
      Tensor want = Tensor::empty(shape, t), got = Tensor::empty(shape, t, Device::cuda());
      const uint64_t key = philox::call_key(43, 7);
      host().random_bernoulli_by_example(want, key, tensor_i64(ids, {4}), 0.3, 1 / 0.7);
      gpu().random_bernoulli_by_example(got, key, tensor_i64(ids, {4}, Device::cuda()), 0.3,
                                        1 / 0.7);
      check_equal(got, want,
                  std::string("bernoulli by example ") + dtype_name(t) + " " + shape_str(shape));
    }
}

BOOST_AUTO_TEST_CASE(normal_fills_equal_the_cpu_to_the_last_bits, *utf::precondition(gpu_present)) {
  // Box-Muller goes through log and cos, whose device versions are within an ulp or two of
  // glibc's in double; after rounding to float the values almost always agree exactly.
  for (DType t : {DType::f32, DType::f64}) {
    Tensor want = Tensor::empty({100003}, t), got = Tensor::empty({100003}, t, Device::cuda());
    host().random_normal(want, 44, 99, 1.5, 2);
    gpu().random_normal(got, 44, 99, 1.5, 2);
    check_close(got, want, t == DType::f32 ? 2e-7 : 1e-14, std::string("normal ") + dtype_name(t));
  }
}

BOOST_AUTO_TEST_CASE(the_factories_use_the_generator_the_same_way,
                     *utf::precondition(gpu_present)) {
  Generator a(7), b(7);
  Tensor on_host = randn({3, 50}, {}, &a);
  Tensor on_device = randn({3, 50}, TensorOptions{.device = Device::cuda()}, &b);
  check_close(on_device, on_host, 2e-7, "randn through the factory");
  BOOST_TEST(a.offset() == b.offset());
}

BOOST_AUTO_TEST_CASE(adam_and_adamw_steps_match_the_cpu, *utf::precondition(gpu_present)) {
  for (DType t : {DType::f32, DType::f64}) {
    for (bool decoupled : {false, true}) {
      Tensor p = random_tensor({1000}, t, -1, 1, 131), g = random_tensor({1000}, t, -1, 1, 132);
      Tensor m = random_tensor({1000}, t, -0.1, 0.1, 133),
             v = random_tensor({1000}, t, 0, 0.01, 134);
      Tensor pg = on_gpu(p), gg = on_gpu(g), mg = on_gpu(m), vg = on_gpu(v);
      for (int64_t step = 1; step <= 3; ++step) {
        host().adam_step(p, g, m, v, 1e-3, 0.9, 0.999, 1e-8, 0.01, decoupled, step);
        gpu().adam_step(pg, gg, mg, vg, 1e-3, 0.9, 0.999, 1e-8, 0.01, decoupled, step);
      }
      const std::string what = std::string(decoupled ? "adamw " : "adam ") + dtype_name(t);
      check_close(pg, p, 4 * tolerance(t), what + " param");
      check_close(mg, m, 4 * tolerance(t), what + " exp_avg");
      check_close(vg, v, 4 * tolerance(t), what + " exp_avg_sq");
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
