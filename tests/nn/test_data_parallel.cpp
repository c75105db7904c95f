// nn::DataParallel in a group of one (any run without mpirun): the buckets' layout, the reduced
// gradient equal to plain backward's bit for bit, overlap really starting buckets during backward,
// and its bad inputs. Across processes: tests/mpi/test_data_parallel.cpp.
#include <boost/test/unit_test.hpp>

#include "nn/data_parallel.h"
#include "nn/linear.h"
#include "nn/sequential.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using qkv::testing::check_error;

namespace {

std::vector<Tensor> params_of_sizes(const std::vector<int64_t>& sizes) {
  std::vector<Tensor> params;
  Generator gen(3);
  for (int64_t n : sizes) params.push_back(uniform({n}, -1, 1, {}, &gen).requires_grad_());
  return params;
}

// sum over i of (i + 1) * sum(params[i]^2): each parameter's gradient is 2 (i + 1) params[i]
Tensor weighted_loss(const std::vector<Tensor>& params) {
  Tensor loss = scalar_tensor(0, {params[0].dtype()});
  for (size_t i = 0; i < params.size(); ++i)
    loss = add(loss, mul(sum(square(params[i])), double(i + 1)));
  return loss;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(data_parallel)

BOOST_AUTO_TEST_CASE(buckets_hold_the_parameters_in_reverse_order) {
  // float32: 100 elements = 400 bytes; a 1000-byte bucket closes once it holds 1000 bytes or more
  auto params = params_of_sizes({100, 100, 100, 100, 50, 100});
  nn::DataParallel dp(params, single_process_group(), {.bucket_bytes = 1000});
  BOOST_TEST(dp.buckets().size() == 2u);
  BOOST_TEST(dp.buckets()[0].parameters == (std::vector<size_t>{5, 4, 3}),
             boost::test_tools::per_element());
  BOOST_TEST(dp.buckets()[0].numel == 250);
  BOOST_TEST(dp.buckets()[1].parameters == (std::vector<size_t>{2, 1, 0}),
             boost::test_tools::per_element());
  nn::DataParallel one_each(params, single_process_group(), {.bucket_bytes = 0});
  BOOST_TEST(one_each.buckets().size() == params.size());
}

BOOST_AUTO_TEST_CASE(one_process_gets_plain_backwards_gradients_bit_for_bit) {
  nn::Sequential model;
  model.push_back(std::make_shared<nn::Linear>(5, 7));
  model.push_back(std::make_shared<nn::Linear>(7, 3));
  Tensor x = uniform({4, 5}, -1, 1);
  auto loss = [&] { return sum(square(model.forward(x))); };
  loss().backward();
  std::vector<std::vector<float>> expected;
  for (const Tensor& p : model.parameters()) expected.push_back(p.grad().to_vector<float>());
  for (bool overlap : {true, false}) {
    nn::DataParallel dp(model.parameters(), single_process_group(),
                        {.bucket_bytes = 0, .overlap = overlap});
    model.zero_grad();
    dp.backward(loss());
    auto params = model.parameters();
    for (size_t i = 0; i < params.size(); ++i)
      BOOST_TEST(params[i].grad().to_vector<float>() == expected[i],
                 boost::test_tools::per_element());
    // with overlap every bucket is started from inside backward, as its last gradient is done
    BOOST_TEST(dp.buckets_started_during_backward() == (overlap ? 4u : 0u));
  }
}

BOOST_AUTO_TEST_CASE(unreached_parameters_get_zero_gradients) {
  auto params = params_of_sizes({3, 4, 2});
  nn::DataParallel dp(params, single_process_group(), {.bucket_bytes = 0});
  dp.backward(sum(square(params[1])));
  BOOST_TEST(params[0].grad().to_vector<float>() == std::vector<float>(3, 0.0f),
             boost::test_tools::per_element());
  BOOST_TEST(params[2].grad().to_vector<float>() == std::vector<float>(2, 0.0f),
             boost::test_tools::per_element());
  // an unreached parameter does not hold back the buckets after it: all three started early
  BOOST_TEST(dp.buckets_started_during_backward() == 3u);
  auto expected = mul(params[1], 2.0).to_vector<float>();
  BOOST_TEST(params[1].grad().to_vector<float>() == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(float64_parameters) {
  auto params = params_of_sizes({6, 2});
  for (Tensor& p : params) p = p.detach().to(DType::f64).requires_grad_();
  nn::DataParallel dp(params, single_process_group());
  dp.backward(weighted_loss(params));
  for (size_t i = 0; i < params.size(); ++i)
    BOOST_TEST(params[i].grad().to_vector<double>() ==
                   mul(params[i], 2.0 * double(i + 1)).to_vector<double>(),
               boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(bad_parameters) {
  auto params = params_of_sizes({3, 4});
  check_error([&] { nn::DataParallel({}, single_process_group()); },
              {"DataParallel: has no parameters to reduce"});
  check_error([&] { nn::DataParallel(params, nullptr); }, {"DataParallel: needs a process group"});
  check_error(
      [&] {
        nn::DataParallel({params[0], zeros({2})}, single_process_group());
      },
      {"DataParallel: parameter 1 is not a leaf tensor that requires grad"});
  check_error(
      [&] {
        nn::DataParallel({params[0], params[1], params[0]}, single_process_group());
      },
      {"DataParallel: parameter 2 is listed twice"});
  check_error(
      [&] {
        nn::DataParallel({tensor_i64({1, 2})}, single_process_group());
      },
      {"DataParallel: parameter 0 is not a leaf tensor that requires grad"});
  check_error(
      [&] {
        nn::DataParallel({zeros({2}).to(DType::bf16).requires_grad_()}, single_process_group());
      },
      {"DataParallel: parameter 0 is bfloat16; gradients are reduced in float32 or float64"});
}

BOOST_AUTO_TEST_SUITE_END()
