// model.json and trainer_state.json of a run folder: what a damaged or hand-edited file gets.
// Each case has a regression input in tests/fuzz/corpus/run_dir/ that the fuzz target replays.
#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "train/run_dir.h"
#include "train/trainer/checkpoint.h"
#include "train/trainer/model_files.h"

using namespace qkv::train;
using nlohmann::json;
using qkv::train::test::message_has;

namespace {

json translator_json() {
  qkv::models::Seq2SeqConfig c;
  c.src_vocab = 20, c.tgt_vocab = 16;
  return {{"architecture", "Seq2SeqTransformer"}, {"config", c}, {"decode_max_len", 20}};
}

json cnn_json() {
  qkv::models::CnnClassifierConfig c;
  c.num_classes = 3;
  return {{"architecture", "CnnClassifier"}, {"config", c}, {"labels", {"a", "b", "c"}}};
}

}  // namespace

BOOST_AUTO_TEST_SUITE(model_files)

BOOST_AUTO_TEST_CASE(valid_files_round_trip) {
  TranslatorModelJson t = parse_translator_model_json(translator_json().dump(), "model.json");
  BOOST_TEST(t.config.src_vocab == 20);
  BOOST_TEST(t.decode_max_len == 20);
  ClassifierModelJson c = parse_classifier_model_json(cnn_json().dump(), "model.json");
  BOOST_TEST(c.architecture == "CnnClassifier");
  BOOST_TEST((c.cnn && !c.text && !c.vit));
  BOOST_TEST(c.labels.size() == 3u);
}

// nlohmann's get<int64_t>() of 1e300 is an out-of-range float-to-integer conversion (UBSan's
// float-cast-overflow); the kind of each field is checked before it is read.
BOOST_AUTO_TEST_CASE(a_float_where_an_integer_belongs_is_an_error) {
  json j = translator_json();
  j["config"]["d_model"] = 1e300;
  BOOST_CHECK_EXCEPTION(parse_translator_model_json(j.dump(), "runs/x/model.json"), qkv::Error,
                        message_has("runs/x/model.json", "\"d_model\"", "must be an integer"));
  j = translator_json();
  j["decode_max_len"] = -1e300;
  BOOST_CHECK_EXCEPTION(parse_translator_model_json(j.dump(), "model.json"), qkv::Error,
                        message_has("model.json", "decode_max_len"));
}

BOOST_AUTO_TEST_CASE(sizes_are_checked_before_a_model_is_built) {
  json j = translator_json();
  j["config"]["num_heads"] = 0;
  BOOST_CHECK_EXCEPTION(parse_translator_model_json(j.dump(), "model.json"), qkv::Error,
                        message_has("model.json", "num_heads", "1..64"));
  j["config"]["num_heads"] = 3;
  BOOST_CHECK_EXCEPTION(parse_translator_model_json(j.dump(), "model.json"), qkv::Error,
                        message_has("does not divide d_model 64"));
  j = translator_json();
  j["config"]["src_vocab"] = 1 << 24;
  j["config"]["d_model"] = 1 << 16;
  j["config"]["num_heads"] = 1;
  BOOST_CHECK_EXCEPTION(parse_translator_model_json(j.dump(), "model.json"), qkv::Error,
                        message_has("model.json", "parameters", "damaged"));
  j = translator_json();
  j["config"]["positional"] = "rope";  // found by fuzz_run_dir: the model constructor threw
  j["config"]["num_heads"] = 64;       // head size 1
  BOOST_CHECK_EXCEPTION(parse_translator_model_json(j.dump(), "model.json"), qkv::Error,
                        message_has("model.json", "rope needs an even head size"));
  j["config"]["positional"] = "spiral";
  BOOST_CHECK_EXCEPTION(parse_translator_model_json(j.dump(), "model.json"), qkv::Error,
                        message_has("\"positional\" must be one of"));
}

// Predictions index the label names: a model.json with fewer labels than classes would be read
// past the end of the list.
BOOST_AUTO_TEST_CASE(labels_must_match_the_classes) {
  json j = cnn_json();
  j["labels"] = {"only", "two"};
  BOOST_CHECK_EXCEPTION(parse_classifier_model_json(j.dump(), "model.json"), qkv::Error,
                        message_has("model.json", "2 labels for 3 classes"));
  j = cnn_json();
  j["config"]["channels"] = json::array();
  BOOST_CHECK_EXCEPTION(parse_classifier_model_json(j.dump(), "model.json"), qkv::Error,
                        message_has("channels"));
  j["architecture"] = "Seq2SeqTransformer";
  BOOST_CHECK_EXCEPTION(parse_classifier_model_json(j.dump(), "model.json"), qkv::Error,
                        message_has("is not a classifier"));
}

// Before, a mistyped field escaped as nlohmann::json::type_error (not qkv::Error), so `qkv train
// --resume` printed a message that named neither the file nor the key.
BOOST_AUTO_TEST_CASE(trainer_state_fields_are_checked) {
  TrainerState s = parse_trainer_state(R"({"step": 7, "generator_offset": 9})", "state.json");
  BOOST_TEST(s.step == 7);
  BOOST_TEST(s.generator_offset == 9u);
  BOOST_TEST(s.best_metric == -1.0);
  BOOST_CHECK_EXCEPTION(
      parse_trainer_state(R"({"step": "7", "generator_offset": 9})", "state.json"), qkv::Error,
      message_has("state.json", "\"step\""));
  BOOST_CHECK_EXCEPTION(parse_trainer_state(R"({"step": 7, "generator_offset": -1})", "state.json"),
                        qkv::Error, message_has("state.json", "\"generator_offset\""));
  BOOST_CHECK_EXCEPTION(parse_trainer_state("{", "state.json"), qkv::Error,
                        message_has("state.json", "not a JSON object"));
}

BOOST_AUTO_TEST_CASE(metric_series_from_text) {
  auto series =
      parse_metric_series("{\"step\": 1, \"loss\": 2}\n\n{\"step\": 2}\n", "m.jsonl", {"loss"});
  BOOST_TEST(series[0].y == std::vector<double>{2.0});
  BOOST_CHECK_EXCEPTION(parse_metric_series("[1]\n", "m.jsonl", {"loss"}), qkv::Error,
                        message_has("m.jsonl:1", "not a JSON object"));
}

BOOST_AUTO_TEST_SUITE_END()

// A model.json may pass every range check and still describe a model far larger than the weights
// beside it (edited, or copied from another run). Loading refuses it before building the model.
// The estimate must stay close enough to the true count that real runs are never refused.
BOOST_AUTO_TEST_SUITE(model_against_its_weights)

// `grow` edits the config the way a damaged or foreign model.json would: far wider.
template <typename Model, typename Config, typename Grow>
void check_estimate_and_refusal(Config c, Grow grow, const char* what) {
  Model model(c);
  const qkv::nn::StateDict own = model.state_dict();
  const int64_t actual = model.num_parameters();
  const int64_t estimate = estimated_parameters(c);
  BOOST_TEST_MESSAGE(what << ": " << actual << " parameters, estimated " << estimate);
  BOOST_CHECK_GE(estimate, actual / 2);
  BOOST_CHECK_LE(estimate, 4 * actual);  // so no real run is refused
  BOOST_CHECK_NO_THROW(
      check_model_fits_weights(estimate, own, "runs/x/model.json", "runs/x/model.safetensors"));
  grow(c);
  BOOST_CHECK_EXCEPTION(
      check_model_fits_weights(estimated_parameters(c), own, "runs/x/model.json",
                               "runs/x/model.safetensors"),
      qkv::Error,
      message_has("runs/x/model.json", "runs/x/model.safetensors", "do not belong together"));
}

BOOST_AUTO_TEST_CASE(each_architecture) {
  using namespace qkv::models;
  Seq2SeqConfig s{.src_vocab = 30,
                  .tgt_vocab = 30,
                  .d_model = 64,
                  .num_heads = 4,
                  .dim_feedforward = 256,
                  .max_len = 64};
  auto wider = [](auto& config) { config.d_model *= 64; };
  check_estimate_and_refusal<Seq2SeqTransformer>(s, wider, "seq2seq");
  TransformerClassifierConfig t;
  t.vocab = 50, t.num_classes = 4, t.d_model = 64, t.num_heads = 4, t.dim_feedforward = 128;
  check_estimate_and_refusal<TransformerClassifier>(t, wider, "text classifier");
  VisionTransformerConfig v;
  v.num_classes = 10, v.d_model = 64, v.num_heads = 4, v.dim_feedforward = 128;
  check_estimate_and_refusal<VisionTransformer>(v, wider, "vit");
  CnnClassifierConfig n;
  n.num_classes = 10;
  check_estimate_and_refusal<CnnClassifier>(
      n,
      [](CnnClassifierConfig& config) {
        config.channels = {1024, 2048};
      },
      "cnn");
}

BOOST_AUTO_TEST_SUITE_END()
