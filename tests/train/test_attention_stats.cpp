// Attention statistics (the --trace block and metrics.jsonl's attention_entropy) against values
// worked out by hand, and their place in a training run.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "engine/ops.h"
#include "tests/train/helpers.h"
#include "train/trainer/attention_stats.h"
#include "train/trainer/translation_trainer.h"

using namespace qkv;
using namespace qkv::train;

BOOST_AUTO_TEST_SUITE(attention_stats)

// One head, two queries, three keys of which the last is padding. q = (1, 0), (0, 1); keys
// (1, 0), (0, 1), (-2, -2): raw scores [[1, 0, -2], [0, 1, -2]], the padded column ignored.
BOOST_AUTO_TEST_CASE(ranges_and_entropy_match_a_hand_computation) {
  models::AttentionMap m;
  m.name = "encoder.0.self";
  m.q = tensor({1, 0, 0, 1}, {1, 1, 2, 2});
  m.k = tensor({1, 0, 0, 1, -2, -2}, {1, 1, 3, 2});
  m.v = zeros({1, 1, 3, 2});
  const double s = 1 / std::sqrt(2.0);
  // softmax over the two real keys of (1, 0) * s and (0, 1) * s; the padded key gets 0
  const double a = std::exp(s) / (std::exp(s) + 1), b = 1 - a;
  m.weights = tensor({a, b, 0, b, a, 0}, {1, 1, 2, 3});
  Tensor key_pad = tensor({0, 0, 1}, {1, 3}).to(DType::b8);
  AttentionLayerStats st = attention_layer_stats(m, Tensor(), key_pad);
  BOOST_TEST(st.raw_min == 0.0);  // not the padded key's -2
  BOOST_TEST(st.raw_max == 1.0);
  BOOST_TEST(st.scaled_max == s, boost::test_tools::tolerance(1e-12));
  const double h = -(a * std::log(a) + b * std::log(b));
  BOOST_TEST(st.entropy_mean == h, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(st.entropy_min == h, boost::test_tools::tolerance(1e-6));
  BOOST_TEST(st.uniform_entropy == std::log(2.0), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(st.row_sum_min == 1.0, boost::test_tools::tolerance(1e-6));
  BOOST_TEST((st.q == Shape{1, 1, 2, 2}));
  BOOST_TEST(describe_attention_stats(st).find("uniform would be 0.693") != std::string::npos);

  // A padded query row is left out: only row 0 remains, whose entropy is the same h, and a
  // uniform row would reach log(keys).
  m.weights = tensor({0.5, 0.5, 0, 1, 0, 0}, {1, 1, 2, 3});
  st = attention_layer_stats(m, tensor({0, 1}, {1, 2}).to(DType::b8), key_pad);
  BOOST_TEST(st.entropy_mean == std::log(2.0), boost::test_tools::tolerance(1e-12));
  BOOST_TEST(st.entropy_max == st.uniform_entropy, boost::test_tools::tolerance(1e-12));
}

BOOST_AUTO_TEST_CASE(a_map_without_recorded_weights_is_an_error) {
  models::AttentionMap m;
  m.name = "decoder.1.cross";
  BOOST_CHECK_EXCEPTION(attention_layer_stats(m, Tensor(), Tensor()), Error,
                        test::message_has("decoder.1.cross", "recorded no attention"));
}

// A padding mask that does not cover the map's positions (a model that prepends [CLS] has one
// more) is refused, never read past its end (found by make sanitize).
BOOST_AUTO_TEST_CASE(masks_must_cover_the_positions) {
  models::AttentionMap m;
  m.name = "encoder.0.self";
  m.q = m.k = m.v = zeros({1, 1, 3, 2});
  m.weights = full({1, 1, 3, 3}, 1.0 / 3);
  Tensor short_pad = zeros({1, 2}, {DType::b8});
  BOOST_CHECK_EXCEPTION(attention_layer_stats(m, short_pad, Tensor()), Error,
                        test::message_has("encoder.0.self", "query padding mask [1,2]"));
  BOOST_CHECK_EXCEPTION(attention_layer_stats(m, Tensor(), short_pad), Error,
                        test::message_has("key padding mask [1,2] is not [B, S] = [1,3]"));
  BOOST_TEST(attention_layer_stats(m, Tensor(), Tensor()).entropy_mean == std::log(3.0),
             boost::test_tools::tolerance(1e-6));  // float32 weights
}

// Every log line of a run carries each layer's mean entropy, between 0 and log(keys); --trace
// writes the first batch's block into log.txt.
BOOST_AUTO_TEST_CASE(training_logs_entropy_per_layer_and_traces_the_first_batch) {
  test::ScratchDir dir("attention_stats_run");
  Config c;
  c.task = "copy";
  c.train_size = 200, c.valid_size = 10, c.test_size = 10;
  c.min_length = 3, c.max_length = 5;
  c.d_model = 16, c.heads = 2, c.layers = 1, c.ff_dim = 32;
  c.batch_size = 16, c.steps = 6, c.eval_every = 6, c.log_every = 2, c.warmup = 1;
  c.threads = 1, c.pictures = false, c.trace = true;
  c.out = dir.file("run");
  train_translation(c);
  std::ifstream metrics(dir.file("run/metrics.jsonl"));
  std::string line;
  int logged = 0;
  while (std::getline(metrics, line)) {
    auto j = nlohmann::json::parse(line);
    if (!j.contains("loss")) continue;
    ++logged;
    BOOST_REQUIRE(j.contains("attention_entropy"));
    const auto& e = j["attention_entropy"];
    BOOST_TEST(e.size() == 3u);  // encoder.0.self, decoder.0.self, decoder.0.cross
    for (const auto& [name, value] : e.items()) {
      BOOST_TEST(value.get<double>() >= 0.0, name);
      BOOST_TEST(value.get<double>() <= std::log(7.0), name);  // at most 7 keys (5 + BOS/EOS)
    }
  }
  BOOST_TEST(logged == 4);  // steps 1, 2, 4, 6
  std::ifstream log(dir.file("run/log.txt"));
  std::string text((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  BOOST_TEST(text.find("attention trace, step 1") != std::string::npos);
  BOOST_TEST(text.find("decoder.0.cross") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
