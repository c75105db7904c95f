// The bad-input catalogue for the models: ids outside the vocabulary, sequences longer than the
// positions a learned encoding has, zero-length sequences (which work, as in PyTorch), batches
// that disagree, images of the wrong size.
#include <boost/test/unit_test.hpp>

#include "models/classifiers.h"
#include "models/seq2seq.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using namespace qkv::models;
using qkv::testing::message_has;

namespace {

Tensor ids(int64_t B, int64_t T, int64_t value) {
  return tensor_i64(std::vector<int64_t>(size_t(B * T), value), {B, T});
}

Seq2SeqConfig tiny_seq2seq(const std::string& positional) {
  Seq2SeqConfig c;
  c.src_vocab = 10, c.tgt_vocab = 12, c.d_model = 16, c.num_heads = 2;
  c.num_encoder_layers = 1, c.num_decoder_layers = 1, c.dim_feedforward = 32;
  c.max_len = 8, c.positional = positional;
  return c;
}

}  // namespace

BOOST_AUTO_TEST_SUITE(models_bad_input)

BOOST_AUTO_TEST_CASE(seq2seq_inputs) {
  Seq2SeqTransformer m(tiny_seq2seq("learned"));
  BOOST_CHECK_EXCEPTION(m.forward(ids(2, 20, 3), ids(2, 4, 3), Tensor(), Tensor()), Error,
                        message_has({"LearnedPositionalEncoding", "20", "exceed max_len 8"}));
  BOOST_CHECK_EXCEPTION(m.forward(ids(2, 5, 3), ids(2, 20, 3), Tensor(), Tensor()), Error,
                        message_has({"exceed max_len 8"}));
  BOOST_CHECK_EXCEPTION(m.forward(ids(2, 5, 10), ids(2, 4, 3), Tensor(), Tensor()), Error,
                        message_has({"embedding: index 10", "size 10"}));
  BOOST_CHECK_EXCEPTION(m.forward(ids(2, 5, 3), ids(3, 4, 3), Tensor(), Tensor()), Error,
                        message_has({"Seq2SeqTransformer", "[2,5]", "[3,4]"}));
  BOOST_CHECK_EXCEPTION(m.forward(ids(2, 5, 3), ids(2, 4, 3), gt(zeros({2, 4}), 0.0), Tensor()),
                        Error, message_has({"key_padding_mask", "[2,5]", "[2,4]"}));
  // Sinusoidal positions are computed past the table: a long input works.
  Seq2SeqTransformer sinusoidal(tiny_seq2seq("sinusoidal"));
  BOOST_CHECK(sinusoidal.forward(ids(2, 20, 3), ids(2, 4, 3), Tensor(), Tensor()).shape() ==
              Shape({2, 4, 12}));
  // Zero-length: an empty target gives no logits; an empty source is attended as nothing
  // (PyTorch's behaviour), leaving finite logits.
  BOOST_CHECK(m.forward(ids(2, 5, 3), ids(2, 0, 3), Tensor(), Tensor()).shape() ==
              Shape({2, 0, 12}));
  Tensor logits = m.forward(ids(2, 0, 3), ids(2, 4, 3), Tensor(), Tensor());
  BOOST_CHECK(logits.shape() == Shape({2, 4, 12}));
  for (double v : logits.to_vector<double>()) BOOST_REQUIRE(std::isfinite(v));
}

BOOST_AUTO_TEST_CASE(classifier_inputs) {
  TransformerClassifierConfig c;
  c.vocab = 10, c.num_classes = 3, c.d_model = 16, c.num_heads = 2, c.num_layers = 1;
  c.dim_feedforward = 32, c.max_len = 8, c.positional = "learned";
  TransformerClassifier k(c);
  BOOST_CHECK_EXCEPTION(k.forward(ids(2, 20, 3)), Error, message_has({"exceed max_len"}));
  BOOST_CHECK_EXCEPTION(k.forward(ids(2, 5, 10)), Error, message_has({"embedding: index 10"}));
  BOOST_CHECK(k.forward(ids(2, 0, 3)).shape() == Shape({2, 3}));  // the [CLS] state alone
  CnnClassifier cnn{CnnClassifierConfig{}};
  BOOST_CHECK_EXCEPTION(cnn.forward(zeros({2, 3, 28, 28})), Error,
                        message_has({"CnnClassifier", "[B, 1, H, W]", "[2,3,28,28]"}));
  VisionTransformer vit{VisionTransformerConfig{}};
  BOOST_CHECK_EXCEPTION(vit.forward(zeros({2, 1, 20, 20})), Error,
                        message_has({"VisionTransformer", "[B, 1, 28, 28]", "[2,1,20,20]"}));
}

BOOST_AUTO_TEST_SUITE_END()
