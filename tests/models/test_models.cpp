// Each model learns a handful of examples by heart (the loss falls near zero), its config
// round-trips through JSON into an identical model, and its visualization hooks have the promised
// shapes. Sizes are tiny so the whole suite runs in seconds on two cores.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "models/classifiers.h"
#include "models/seq2seq.h"
#include "nn/optim.h"
#include "tests/engine/helpers.h"

using namespace qkv;
using namespace qkv::models;
using qkv::testing::check_error;
using qkv::testing::check_values;

namespace {

// Trains with Adam for `steps` and returns the last loss.
template <typename LossFn>
double overfit(nn::Module& model, int steps, double lr, LossFn&& loss_fn) {
  nn::Adam opt(model.parameters(), lr);
  double last = 0;
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    Tensor loss = loss_fn();
    loss.backward();
    opt.step();
    last = loss.item();
  }
  return last;
}

Tensor ids(std::vector<int64_t> v, Shape s) { return tensor_i64(v, s); }

// A Seq2Seq small enough to overfit in a second: one encoder and one decoder layer of width 16,
// two heads, no dropout, PAD 0. Tests change the fields they are about.
Seq2SeqConfig tiny_seq2seq(int64_t vocab, const std::string& positional) {
  return Seq2SeqConfig{.src_vocab = vocab,
                       .tgt_vocab = vocab,
                       .d_model = 16,
                       .num_heads = 2,
                       .num_encoder_layers = 1,
                       .num_decoder_layers = 1,
                       .dim_feedforward = 32,
                       .dropout = 0.0,
                       .max_len = 16,
                       .positional = positional,
                       .norm_first = false,
                       .tie_embeddings = false,
                       .pad_id = 0};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(models_suite)

// Copy task: the target is the source. BOS = 1, EOS = 2, PAD = 0, tokens 3..7.
BOOST_AUTO_TEST_CASE(seq2seq_overfits_and_decodes_every_positional_kind) {
  for (std::string kind : {"sinusoidal", "learned", "relative", "rope", "alibi"}) {
    manual_seed(21);
    Seq2SeqConfig c = tiny_seq2seq(8, kind);
    c.norm_first = kind == "rope";
    c.tie_embeddings = kind == "sinusoidal";
    Seq2SeqTransformer model(c);
    Tensor src = ids({3, 4, 5, 6, 7, 3, 5, 0}, {2, 4});
    Tensor src_pad = eq(src, 0.0);
    Tensor tgt_in = ids({1, 3, 4, 5, 6, 1, 7, 3, 5, 0}, {2, 5});
    Tensor tgt_out = ids({3, 4, 5, 6, 2, 7, 3, 5, 2, 0}, {2, 5});
    Tensor tgt_pad = eq(tgt_in, 0.0);
    double loss = overfit(model, 120, 0.01, [&] {
      Tensor logits = model.forward(src, tgt_in, src_pad, tgt_pad);
      return cross_entropy(logits.reshape({10, 8}), tgt_out.reshape({10}), 0);
    });
    BOOST_TEST_MESSAGE("seq2seq " << kind << " final loss " << loss);
    BOOST_CHECK_MESSAGE(loss < 0.05, kind << ": final loss " << loss);
    model.eval();
    Tensor greedy = model.greedy_decode(src, src_pad, 1, 2, 6);
    std::vector<int64_t> g = greedy.to_vector<int64_t>();
    std::vector<int64_t> row0(g.begin(), g.begin() + 6);
    BOOST_CHECK_MESSAGE(row0 == (std::vector<int64_t>{1, 3, 4, 5, 6, 2}), kind << " greedy row 0");
    Tensor beam = model.beam_search(src, src_pad, 1, 2, 6, 3);
    std::vector<int64_t> b = beam.to_vector<int64_t>();
    BOOST_CHECK_MESSAGE(std::vector<int64_t>(b.begin(), b.begin() + 6) == row0, kind << " beam");
    BOOST_CHECK_EQUAL(b[size_t(beam.size(1))], 1);  // row 1 starts with bos
    BOOST_CHECK_EQUAL(b[size_t(beam.size(1)) + 1], 7);
  }
}

BOOST_AUTO_TEST_CASE(seq2seq_attention_maps_and_tied_weights) {
  Seq2SeqConfig c = tiny_seq2seq(6, "sinusoidal");
  c.tgt_vocab = 7, c.d_model = 8, c.num_encoder_layers = 2, c.dim_feedforward = 16, c.max_len = 8;
  c.tie_embeddings = true;
  Seq2SeqTransformer model(c);
  BOOST_CHECK(model.generator->weight.same_storage(model.tgt_embed->weight));
  auto sd = model.state_dict();
  BOOST_CHECK(sd.count("tgt_embed.weight") && !sd.count("generator.weight"));
  model.set_record_attention(true);
  model.forward(ids({1, 2, 3, 4, 5, 0}, {2, 3}), ids({1, 2, 3, 4}, {2, 2}), Tensor(), Tensor());
  auto maps = model.attention_maps();
  BOOST_REQUIRE_EQUAL(maps.size(), 4u);
  BOOST_CHECK_EQUAL(maps[0].name, "encoder.0.self");
  BOOST_CHECK(maps[0].weights.shape() == (Shape{2, 2, 3, 3}));
  BOOST_CHECK_EQUAL(maps[3].name, "decoder.0.cross");
  BOOST_CHECK(maps[3].weights.shape() == (Shape{2, 2, 2, 3}));
  // config -> JSON -> config rebuilds a model that loads this one's weights and agrees
  nlohmann::json j = c;
  Seq2SeqConfig back = j.get<Seq2SeqConfig>();
  BOOST_CHECK_EQUAL(back.tgt_vocab, 7);
  BOOST_CHECK(back.tie_embeddings);
  Seq2SeqTransformer twin(back);
  twin.load_state_dict(model.state_dict());
  Tensor s = ids({1, 2, 3}, {1, 3}), t = ids({1, 4}, {1, 2});
  check_values(twin.forward(s, t, {}, {}), model.forward(s, t, {}, {}).to_vector<double>(), 1e-6);
}

BOOST_AUTO_TEST_CASE(beam_of_one_is_greedy_on_an_untrained_model) {
  manual_seed(25);
  Seq2SeqConfig c = tiny_seq2seq(9, "rope");
  c.norm_first = true;
  Seq2SeqTransformer model(c);
  model.eval();
  Tensor src = ids({3, 4, 5, 6, 7, 8, 5, 0, 4, 4, 4, 4}, {3, 4});
  Tensor pad = eq(src, 0.0);
  Tensor greedy = model.greedy_decode(src, pad, 1, 2, 7);
  Tensor beam = model.beam_search(src, pad, 1, 2, 7, 1);
  BOOST_REQUIRE(greedy.shape() == beam.shape());
  BOOST_CHECK(greedy.to_vector<int64_t>() == beam.to_vector<int64_t>());
  // a wider beam still returns well-formed rows: bos first, every token in the vocabulary
  Tensor wide = model.beam_search(src, pad, 1, 2, 7, 4);
  for (int64_t b = 0; b < 3; ++b)
    BOOST_CHECK_EQUAL(wide.to_vector<int64_t>()[size_t(b * wide.size(1))], 1);
  for (int64_t v : wide.to_vector<int64_t>()) BOOST_CHECK(v >= 0 && v < 9);
}

BOOST_AUTO_TEST_CASE(transformer_classifier_overfits_cls_and_mean) {
  for (std::string pooling : {"cls", "mean"}) {
    manual_seed(22);
    TransformerClassifierConfig c{.vocab = 10,
                                  .num_classes = 3,
                                  .d_model = 16,
                                  .num_heads = 2,
                                  .num_layers = 1,
                                  .dim_feedforward = 32,
                                  .dropout = 0.0,
                                  .max_len = 8,
                                  .positional = "sinusoidal",
                                  .norm_first = false,
                                  .pooling = pooling};
    TransformerClassifier model(c);
    Tensor x = ids({1, 2, 3, 0, 4, 5, 6, 7, 8, 9, 0, 0, 3, 3, 2, 1}, {4, 4});
    Tensor y = ids({0, 1, 2, 1}, {4});
    double loss =
        overfit(model, 60, 0.01, [&] { return cross_entropy(model.forward(x, eq(x, 0.0)), y); });
    BOOST_TEST_MESSAGE("classifier " << pooling << " final loss " << loss);
    BOOST_CHECK_MESSAGE(loss < 0.05, pooling << ": final loss " << loss);
    nlohmann::json j = c;
    BOOST_CHECK_EQUAL(j.get<TransformerClassifierConfig>().pooling, pooling);
  }
}

BOOST_AUTO_TEST_CASE(cnn_classifier_overfits_with_each_attention) {
  for (std::string attention : {"none", "se", "cbam"}) {
    for (int64_t size : {28, 32}) {
      if (attention != "none" && size == 32) continue;  // one size per attention kind suffices
      manual_seed(23);
      CnnClassifierConfig c{.in_channels = size == 28 ? 1 : 3,
                            .image_size = size,
                            .num_classes = 4,
                            .channels = {4, 8},
                            .attention = attention,
                            .reduction = 2};
      CnnClassifier model(c);
      Tensor x = randn({4, c.in_channels, size, size});
      Tensor y = ids({0, 1, 2, 3}, {4});
      double loss = overfit(model, 40, 0.02, [&] { return cross_entropy(model.forward(x), y); });
      BOOST_TEST_MESSAGE("cnn " << attention << " " << size << " final loss " << loss);
      BOOST_CHECK_MESSAGE(loss < 0.05, attention << " " << size << ": final loss " << loss);
      if (attention == "se") BOOST_CHECK(model.se_weights()[1].shape() == (Shape{4, 8}));
      if (attention == "cbam")
        BOOST_CHECK(model.cbam_spatial_maps()[1].shape() == (Shape{4, size / 2, size / 2}));
    }
  }
  CnnClassifierConfig small;
  small.channels = {3, 5};
  small.attention = "cbam";
  nlohmann::json j = small;
  CnnClassifierConfig back = j.get<CnnClassifierConfig>();
  BOOST_CHECK(back.channels == (std::vector<int64_t>{3, 5}));
  BOOST_CHECK_EQUAL(back.attention, "cbam");
  CnnClassifierConfig eca;
  eca.attention = "eca";
  check_error([&] { CnnClassifier{eca}; }, {"unknown attention 'eca'"});
}

BOOST_AUTO_TEST_CASE(vision_transformer_overfits) {
  manual_seed(24);
  VisionTransformerConfig c{.in_channels = 1,
                            .image_size = 28,
                            .patch_size = 7,
                            .num_classes = 4,
                            .d_model = 16,
                            .num_heads = 2,
                            .num_layers = 1,
                            .dim_feedforward = 32,
                            .dropout = 0.0};
  VisionTransformer model(c);
  Tensor x = randn({4, 1, 28, 28});
  Tensor y = ids({3, 2, 1, 0}, {4});
  double loss = overfit(model, 60, 0.01, [&] { return cross_entropy(model.forward(x), y); });
  BOOST_TEST_MESSAGE("vit final loss " << loss);
  BOOST_CHECK_MESSAGE(loss < 0.05, "final loss " << loss);
  nlohmann::json j = c;
  BOOST_CHECK_EQUAL(j.get<VisionTransformerConfig>().patch_size, 7);
  model.set_record_attention(true);
  model.forward(x);
  auto maps = model.attention_maps();
  BOOST_REQUIRE_EQUAL(maps.size(), 1u);
  BOOST_CHECK(maps[0].weights.shape() == (Shape{4, 2, 17, 17}));  // [CLS] + 16 patches
  check_values(sum(maps[0].weights, {3}), std::vector<double>(4 * 2 * 17, 1.0), 1e-5);
  VisionTransformerConfig odd;
  odd.patch_size = 5;
  check_error([&] { VisionTransformer{odd}; }, {"not a multiple of patch_size 5"});
}

BOOST_AUTO_TEST_SUITE_END()
