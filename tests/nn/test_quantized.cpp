// INT8 quantization of Linear: close to fp32, the VNNI and portable kernels bit-identical, and
// quantize_linear_layers switching a whole model's inference to int8.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <cstdio>

#include "engine/error.h"
#include "nn/int8_gemm.h"
#include "nn/quantized.h"
#include "nn/safetensors.h"
#include "nn/transformer.h"

using namespace qkv;
using namespace qkv::nn;

BOOST_AUTO_TEST_SUITE(quantized)

// The two int8 kernels agree exactly; both are close to, but not equal to, float32.
void check_int8_against_fp32(Linear& fp, QuantizedLinear& q, const Tensor& x) {
  NoGrad no_grad;
  std::vector<float> ref = fp.forward(x).to_vector<float>();
  q.use_vnni = true;
  std::vector<float> vnni = q.forward(x).to_vector<float>();
  q.use_vnni = false;
  std::vector<float> portable = q.forward(x).to_vector<float>();
  BOOST_CHECK_EQUAL_COLLECTIONS(vnni.begin(), vnni.end(), portable.begin(), portable.end());
  double err = 0, norm = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    err += std::pow(ref[i] - vnni[i], 2);
    norm += std::pow(ref[i], 2);
  }
  BOOST_TEST_MESSAGE("int8 relative error " << std::sqrt(err / norm)
                                            << (cpu_has_vnni() ? " (vnni)" : " (portable)"));
  BOOST_CHECK_LT(std::sqrt(err / norm), 0.02);  // ~1/254 per operand, summed over 200 terms
  BOOST_CHECK_GT(std::sqrt(err / norm), 1e-5);  // and it really is quantized
}

BOOST_AUTO_TEST_CASE(int8_linear_is_close_to_fp32_and_kernels_agree) {
  manual_seed(2);
  Linear fp(200, 70);  // 200 is not a multiple of 64: exercises the zero padding
  QuantizedLinear q(fp);
  // 5 rows take the channel-split path, 23 the row-blocked one (4 + 3 rows left over); 70
  // channels end in a partial block of four.
  for (int64_t rows : {5, 23}) {
    Tensor x = randn({rows, 200});
    check_int8_against_fp32(fp, q, x);
  }
}

BOOST_AUTO_TEST_CASE(int8_matmul_integers_are_exact) {
  // Extreme values: -127 x 127 everywhere; the shift by 128 must cancel exactly.
  std::vector<int8_t> x(128, -127), w(2 * 128, 127);
  w[5] = -127;
  std::vector<int32_t> sums{0, 127 * 128}, acc(2);
  for (int k = 0; k < 128; ++k) sums[0] += w[size_t(k)];
  for (bool vnni : {true, false}) {
    int8_matmul(x.data(), 1, w.data(), sums.data(), 2, 128, acc.data(), vnni);
    BOOST_CHECK_EQUAL(acc[0], -127 * 127 * 126);
    BOOST_CHECK_EQUAL(acc[1], -127 * 127 * 128);
  }
}

BOOST_AUTO_TEST_CASE(quantizing_a_transformer_changes_inference_only) {
  manual_seed(4);
  TransformerLayerOptions o;
  o.d_model = 64, o.num_heads = 4, o.dim_feedforward = 128, o.dropout = 0;
  TransformerEncoder enc(o, 2);
  enc.eval();
  Tensor x = randn({2, 10, 64});
  Tensor ref, q8;
  {
    NoGrad no_grad;
    ref = enc.forward(x);
    BOOST_CHECK_EQUAL(quantize_linear_layers(enc), 2 * 6);  // 4 attention + 2 feed-forward each
    q8 = enc.forward(x);
  }
  std::vector<double> a = ref.to_vector<double>(), b = q8.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  BOOST_CHECK_GT(worst, 0);
  BOOST_CHECK_LT(worst, 0.1);  // post-norm outputs are O(1)
  // With a graph recorded (training) the fp32 weights are used.
  Tensor trained = enc.forward(x);
  std::vector<double> c = trained.to_vector<double>();
  double same = 0;
  for (size_t i = 0; i < a.size(); ++i) same = std::max(same, std::abs(a[i] - c[i]));
  BOOST_CHECK_LT(same, 1e-5);
}

// The int8 checkpoint: int8 weights and scales instead of float32 Linear weights; a fresh model
// loaded from it computes exactly what the quantized original computed, and a checkpoint of a
// different shape or a plain float32 one is refused with the key named.
BOOST_AUTO_TEST_CASE(quantized_checkpoints_round_trip_exactly) {
  manual_seed(5);
  TransformerLayerOptions o;
  o.d_model = 32, o.num_heads = 4, o.dim_feedforward = 96, o.dropout = 0;
  TransformerEncoder enc(o, 2);
  enc.eval();
  Tensor x = randn({2, 7, 32});
  NoGrad no_grad;
  quantize_linear_layers(enc);
  Tensor want = enc.forward(x);
  StateDict state = quantized_state_dict(enc);
  BOOST_CHECK(state.count("layers.0.self_attn.q_proj.weight_int8"));
  BOOST_CHECK(!state.count("layers.0.self_attn.q_proj.weight"));
  BOOST_CHECK(state.at("layers.1.feed_forward.linear1.weight_int8").dtype() == DType::i8);

  const std::string path = "quantized_round_trip.safetensors";
  save_safetensors(path, state);
  manual_seed(6);  // different initial weights: everything must come from the file
  TransformerEncoder fresh(o, 2);
  fresh.eval();
  load_quantized_state_dict(fresh, load_safetensors(path).tensors);
  std::remove(path.c_str());
  BOOST_CHECK(fresh.forward(x).to_vector<float>() == want.to_vector<float>());

  // The float32 weights were set to the dequantized values: float32 inference stays close.
  dequantize_linear_layers(fresh);
  std::vector<double> a = fresh.forward(x).to_vector<double>(), b = want.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  BOOST_CHECK_LT(worst, 0.1);

  TransformerEncoder plain(o, 2);
  BOOST_CHECK_EXCEPTION(load_quantized_state_dict(plain, plain.state_dict()), Error,
                        [](const Error& e) {
                          return std::string(e.what()).find("weight_int8") != std::string::npos;
                        });
  TransformerLayerOptions wider = o;
  wider.dim_feedforward = 64;
  TransformerEncoder other(wider, 2);
  BOOST_CHECK_THROW(load_quantized_state_dict(other, state), Error);
}

BOOST_AUTO_TEST_SUITE_END()
