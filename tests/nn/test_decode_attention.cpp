// decode_attention (one query row per batch and head, inference only) against the tiled
// efficient_attention on the same operands: without a mask, with key padding, with a row whose
// keys are all padding (zeros, as the tiled kernel gives), in float64 and float32, on strided
// inputs; and its refusals.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/error.h"
#include "engine/ops.h"
#include "nn/decode_attention.h"
#include "nn/efficient_attention.h"

using namespace qkv;

namespace {

double max_abs_diff(const Tensor& a, const Tensor& b) {
  std::vector<double> x = a.to_vector<double>(), y = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) worst = std::max(worst, std::abs(x[i] - y[i]));
  return worst;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(decode_attention)

BOOST_AUTO_TEST_CASE(equals_the_tiled_kernel_with_and_without_padding) {
  manual_seed(9);
  NoGrad no_grad;
  for (DType dt : {DType::f64, DType::f32}) {
    const double tol = dt == DType::f64 ? 1e-12 : 1e-6;
    Tensor q = randn({2, 3, 1, 5}, {dt}), k = randn({2, 3, 7, 5}, {dt});
    // v as a transposed view: the kernel must read strided operands correctly
    Tensor v = randn({2, 3, 4, 7}, {dt}).transpose(2, 3);
    BOOST_TEST(max_abs_diff(nn::decode_attention(q, k, v), nn::efficient_attention(q, k, v)) <=
               tol);
    // batch 0 pads its last three keys, batch 1 pads every key
    Tensor pad = tensor({0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1}, {2, 7}).to(DType::b8);
    Tensor got = nn::decode_attention(q, k, v, pad);
    Tensor want = nn::efficient_attention(q, k, v, {pad.reshape({2, 1, 1, 7})});
    BOOST_TEST(max_abs_diff(got, want) <= tol);
    BOOST_TEST(max_abs_diff(got.narrow(0, 1, 1), zeros({1, 3, 1, 4}, {dt})) == 0.0);
  }
}

// The KV cache hands over views of the first S positions of longer buffers: read in place, with
// the batch and head strides of the buffer, they must give what contiguous copies give.
BOOST_AUTO_TEST_CASE(reads_views_of_a_longer_cache_buffer) {
  manual_seed(10);
  NoGrad no_grad;
  Tensor q = randn({2, 3, 1, 5}), k_buffer = randn({2, 3, 16, 5}), v_buffer = randn({2, 3, 16, 6});
  Tensor k = k_buffer.narrow(2, 0, 9), v = v_buffer.narrow(2, 0, 9);
  BOOST_REQUIRE(!k.is_contiguous());
  BOOST_TEST(max_abs_diff(nn::decode_attention(q, k, v),
                          nn::decode_attention(q, k.contiguous(), v.contiguous())) == 0.0);
  BOOST_TEST(max_abs_diff(nn::decode_attention(q, k, v), nn::efficient_attention(q, k, v)) <= 1e-6);
}

BOOST_AUTO_TEST_CASE(refuses_gradients_and_wrong_shapes) {
  Tensor q = randn({1, 2, 1, 4}).requires_grad_(), k = randn({1, 2, 3, 4}), v = randn({1, 2, 3, 4});
  BOOST_CHECK_EXCEPTION(nn::decode_attention(q, k, v), Error, [](const Error& e) {
    return std::string(e.what()).find("efficient_attention when one is needed") !=
           std::string::npos;
  });
  NoGrad no_grad;
  BOOST_CHECK_THROW(nn::decode_attention(randn({1, 2, 2, 4}), k, v), Error);  // two query rows
  BOOST_CHECK_THROW(nn::decode_attention(randn({1, 2, 1, 4}), k, v, zeros({1, 2}, {DType::b8})),
                    Error);  // mask [B, 2] for 3 keys
}

BOOST_AUTO_TEST_SUITE_END()
