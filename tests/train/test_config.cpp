#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <nlohmann/json.hpp>
#include <tuple>

#include "helpers.h"
#include "models/classifier_names.h"
#include "nn/linear.h"
#include "nn/optim.h"
#include "nn/positional.h"
#include "nn/positional_names.h"
#include "nn/residual_block.h"
#include "nn/residual_block_names.h"
#include "train/atomic_file.h"
#include "train/config.h"
#include "train/trainer/classifier.h"
#include "train/trainer/optimizer_setup.h"
#include "train/trainer/precision.h"
#include "train/trainer/run_choices.h"

using namespace qkv::train;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;

BOOST_AUTO_TEST_SUITE(config)

BOOST_AUTO_TEST_CASE(edit_distance_and_closest_key) {
  BOOST_TEST(edit_distance("kitten", "sitting") == 3u);
  BOOST_TEST(edit_distance("", "abc") == 3u);
  BOOST_TEST(closest_config_key("dmodel") == "d_model");
  BOOST_TEST(closest_config_key("warmpu") == "warmup");
}

const ConfigField& field_named(const std::string& key) {
  return *std::find_if(config_fields().begin(), config_fields().end(),
                       [&](const ConfigField& f) { return f.key == key; });
}

BOOST_AUTO_TEST_CASE(choices_come_from_the_layer_that_implements_them) {
  BOOST_TEST(field_named("positional").choices == qkv::nn::positional_encoding_names(),
             boost::test_tools::per_element());
  BOOST_TEST(field_named("schedule").choices == schedule_names(), boost::test_tools::per_element());
  BOOST_TEST(field_named("optimizer").choices == optimizer_names(),
             boost::test_tools::per_element());
  BOOST_TEST(field_named("precision").choices == precision_names(),
             boost::test_tools::per_element());
  // and each listed name is one the layer makes: an input-level encoding or an in-attention one
  for (const std::string& kind : qkv::nn::positional_encoding_names())
    BOOST_TEST((qkv::nn::make_positional_encoding(kind, 8, 16) != nullptr ||
                qkv::nn::make_attention_position(kind, 2, 4) != nullptr),
               kind);
  Config c;
  c.steps = 3000;  // as the trainers set it from the data (train/scaled_defaults.h)
  for (const std::string& name : schedule_names()) {
    c.schedule = name;
    BOOST_TEST(make_schedule(c).at(1) > 0.0, name);
  }
  qkv::nn::Linear model(2, 2);
  c.optimizer = "sgd";
  BOOST_TEST(dynamic_cast<qkv::nn::SGD*>(make_optimizer(c, model).get()) != nullptr);
  c.optimizer = "adamw";
  BOOST_TEST(dynamic_cast<qkv::nn::AdamW*>(make_optimizer(c, model).get()) != nullptr);
  BOOST_TEST(optimizer_names().size() == 2u);  // the two above: a third needs its own case here
  BOOST_TEST((compute_dtype("fp32") == qkv::DType::f32));
  BOOST_TEST((compute_dtype("bf16") == qkv::DType::bf16));
  BOOST_TEST(precision_names().size() == 2u);
}

BOOST_AUTO_TEST_CASE(model_choices_come_from_the_models) {
  BOOST_TEST(field_named("model").choices == qkv::models::image_classifier_names(),
             boost::test_tools::per_element());
  BOOST_TEST(field_named("attention").choices == qkv::nn::block_attention_names(),
             boost::test_tools::per_element());
  BOOST_TEST(field_named("pooling").choices == qkv::models::pooling_names(),
             boost::test_tools::per_element());
  // each listed name builds what it names
  for (const std::string& kind : qkv::nn::block_attention_names()) {
    qkv::nn::ResidualBlock block(4, 4, 1, kind, 2);
    BOOST_TEST((block.se != nullptr) == (kind == "se"), kind);
    BOOST_TEST((block.cbam != nullptr) == (kind == "cbam"), kind);
  }
  for (const std::string& pooling : qkv::models::pooling_names()) {
    qkv::models::TransformerClassifier model({.vocab = 6,
                                              .d_model = 4,
                                              .num_heads = 2,
                                              .num_layers = 1,
                                              .dim_feedforward = 8,
                                              .pooling = pooling});
    BOOST_TEST(model.cls_token.defined() == (pooling == "cls"), pooling);
  }
  ClassificationSet images;
  images.images = true;
  images.labels = {"a", "b"};
  images.pixels.height = images.pixels.width = 28;
  std::vector<std::string> built;
  for (const std::string& name : qkv::models::image_classifier_names()) {
    Config c;
    c.model = name;
    built.push_back(make_classifier(c, images).architecture());
  }
  const std::vector<std::string> expected = {"CnnClassifier", "VisionTransformer"};
  BOOST_TEST(built == expected, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(did_you_mean_only_for_near_names) {
  const std::vector<std::string> flags = {"--steps", "--seed", "--lr"};
  BOOST_TEST(did_you_mean("--stpes", flags) == " (did you mean '--steps'?)");
  BOOST_TEST(did_you_mean("--sed", flags) == " (did you mean '--seed'?)");
  // more than half of the name would change: no suggestion
  BOOST_TEST(did_you_mean("--frobnicate", flags) == "");
  BOOST_TEST(did_you_mean("x", {}) == "");
  BOOST_TEST(closest_name("trian", {"translate", "train", "eval"}) == "train");
}

BOOST_AUTO_TEST_CASE(a_choice_suggests_the_closest_and_a_flag_names_itself) {
  Config c;
  BOOST_CHECK_EXCEPTION(
      set_config_value(c, "schedule", "cosin", "run.json"), qkv::Error,
      message_has("run.json: key 'schedule' must be one of", "(did you mean 'cosine'?)"));
  BOOST_CHECK_EXCEPTION(
      set_config_value(c, "steps", "abc", "--steps"), qkv::Error, [](const qkv::Error& e) {
        return std::string(e.what()) == "--steps must be an integer, got string \"abc\"";
      });
}

BOOST_AUTO_TEST_CASE(load_sets_keys_and_keeps_defaults) {
  ScratchDir dir("config");
  write_file_atomic(
      dir.file("run.json"),
      R"({"task": "numbers", "d_model": 64, "lr": 0.0005, "bucket_by_length": false})");
  Config c = load_config(dir.file("run.json"));
  BOOST_TEST(c.task == "numbers");
  BOOST_TEST(c.d_model == 64);
  BOOST_TEST(c.lr == 0.0005);
  BOOST_TEST(!c.bucket_by_length);
  BOOST_TEST(c.heads == Config{}.heads);
}

BOOST_AUTO_TEST_CASE(unknown_key_suggests_the_closest) {
  ScratchDir dir("config_bad");
  write_file_atomic(dir.file("run.json"), R"({"d_modle": 64})");
  BOOST_CHECK_EXCEPTION(load_config(dir.file("run.json")), qkv::Error,
                        message_has("run.json", "unknown key 'd_modle'", "did you mean 'd_model'"));
  write_file_atomic(dir.file("run.json"), R"({"steps": "1000"})");
  BOOST_CHECK_EXCEPTION(load_config(dir.file("run.json")), qkv::Error,
                        message_has("key 'steps' must be an integer"));
  write_file_atomic(dir.file("run.json"), R"({"lr": true})");
  BOOST_CHECK_EXCEPTION(load_config(dir.file("run.json")), qkv::Error,
                        message_has("key 'lr' must be a number"));
  write_file_atomic(dir.file("run.json"), R"({"schedule": "cosin"})");
  BOOST_CHECK_EXCEPTION(load_config(dir.file("run.json")), qkv::Error,
                        message_has("'schedule' must be one of constant, linear, cosine"));
  write_file_atomic(dir.file("run.json"), R"([1, 2])");
  BOOST_CHECK_EXCEPTION(load_config(dir.file("run.json")), qkv::Error, message_has("JSON object"));
  write_file_atomic(dir.file("run.json"), R"({"lr": 1e-3,})");
  BOOST_CHECK_EXCEPTION(load_config(dir.file("run.json")), qkv::Error,
                        message_has("not valid JSON"));
}

BOOST_AUTO_TEST_CASE(command_line_values_and_round_trip) {
  Config c;
  set_config_value(c, "steps", "500");
  set_config_value(c, "dropout", "0.25");
  set_config_value(c, "out", "runs/x");
  set_config_value(c, "task", "numbers");
  BOOST_TEST(c.steps == 500);
  BOOST_TEST(c.dropout == 0.25);
  BOOST_TEST(c.task == "numbers");
  // a task is a row of the task table, not any text
  BOOST_CHECK_EXCEPTION(set_config_value(c, "task", "123"), qkv::Error,
                        message_has("key 'task' must be one of copy, reverse"));
  BOOST_CHECK_EXCEPTION(set_config_value(c, "step", "5"), qkv::Error,
                        message_has("did you mean 'steps'"));
  BOOST_CHECK_EXCEPTION(set_config_value(c, "seed", "-1"), qkv::Error, message_has("negative"));

  ScratchDir dir("config_save");
  save_config(c, dir.file("config.json"));
  Config back = load_config(dir.file("config.json"));
  BOOST_TEST(config_to_json(back) == config_to_json(c));
}

BOOST_AUTO_TEST_CASE(validation_names_the_key) {
  Config c;
  c.d_model = 100;
  c.heads = 3;
  BOOST_CHECK_EXCEPTION(validate_config(c), qkv::Error, message_has("'heads'", "divide d_model"));
  c = Config{};
  c.dropout = 1.5;
  BOOST_CHECK_EXCEPTION(validate_config(c), qkv::Error, message_has("'dropout'"));
  BOOST_CHECK_NO_THROW(validate_config(Config{}));
}

// nlohmann reports 1e999 with out_of_range, not parse_error, which must not escape load_config as
// a foreign exception; and get<int64_t>() wraps 2^63 to a negative number, which must not pass
// silently (regression inputs in tests/fuzz/corpus/config/ replay both).
BOOST_AUTO_TEST_CASE(overflowing_numbers_are_rejected) {
  BOOST_CHECK_EXCEPTION(parse_config(R"({"lr": 1e999})", "run.json"), qkv::Error,
                        message_has("run.json", "not valid JSON", "number overflow"));
  BOOST_CHECK_EXCEPTION(parse_config(R"({"steps": 9223372036854775808})", "run.json"), qkv::Error,
                        message_has("run.json", "'steps'", "out of range"));
  BOOST_CHECK_EXCEPTION(parse_config(R"({"seed": -1})", "run.json"), qkv::Error,
                        message_has("'seed'", "must not be negative"));
  BOOST_CHECK_EXCEPTION(parse_config(R"({"steps": 9223372036854775807})", "run.json"), qkv::Error,
                        message_has("run.json", "'steps'", "must be in 0..1000000000"));
}

// Found by replaying a large hand-made input through fuzz_config (the fuzzer's own inputs are too
// small to reach it): the error message printed the value with dump(), which recurses once per
// nesting level and overflowed the stack. Too big for the committed corpus, so it lives here.
BOOST_AUTO_TEST_CASE(deeply_nested_value_gives_an_error_not_a_stack_overflow) {
  const size_t depth = 1'000'000;
  std::string text = "{\"steps\": " + std::string(depth, '[') + std::string(depth, ']') + "}";
  BOOST_CHECK_EXCEPTION(parse_config(text, "deep.json"), qkv::Error,
                        message_has("deep.json", "'steps' must be an integer, got an array"));
}

// Each value here would otherwise be ignored, misread or crash the run (log_every 0 divides by
// zero), so it is refused.
BOOST_AUTO_TEST_CASE(out_of_range_values_are_refused_by_flags_and_config_files_alike) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases = {
      {"weight_decay", "-1", "[0, 100]"},
      {"patience", "-1", "0..1000000000"},
      {"checkpoint_every", "-1", "0.."},
      {"threads", "-1", "0..1024"},
      {"threads", "100000", "0..1024"},
      {"max_len", "-1", "1..65536"},
      {"target_value", "-1", "[0, 1e+09]"},
      {"log_every", "0", "1..1000000000"},
      {"valid_size", "-1", "0..100000000"},
      {"test_size", "-1", "0..100000000"},
      {"beta1", "1.0", "[0, 1)"},
      {"beta2", "2", "[0, 1)"},
      {"lr", "0", "(0, inf)"},
      {"beam", "65", "1..64"},
  };
  for (const auto& [key, value, range] : cases) {
    BOOST_TEST_CONTEXT(key << " " << value) {
      Config c;
      BOOST_CHECK_EXCEPTION(set_config_value(c, key, value, "--" + key), qkv::Error,
                            message_has("--" + key + " must be in " + range, "got " + value));
      BOOST_CHECK_EXCEPTION(parse_config("{\"" + key + "\": " + value + "}", "run.json"),
                            qkv::Error, message_has("run.json", "'" + key + "'", range));
    }
  }
  // A Config filled in by code is checked by validate_config with the same ranges.
  Config c;
  c.log_every = 0;
  BOOST_CHECK_EXCEPTION(validate_config(c), qkv::Error,
                        message_has("'log_every'", "1..1000000000"));
}

// Every numeric field has a range, its default lies inside it, and the first value outside either
// end is refused: no field is left unchecked.
BOOST_AUTO_TEST_CASE(every_numeric_field_has_a_range_around_its_default) {
  BOOST_CHECK_NO_THROW(validate_config(Config{}));
  int numeric = 0;
  for (const auto& f : config_fields()) {
    const bool integer = std::holds_alternative<int64_t Config::*>(f.member);
    const bool real = std::holds_alternative<double Config::*>(f.member);
    if (!integer && !real) continue;
    ++numeric;
    BOOST_TEST_CONTEXT(f.key) {
      BOOST_TEST(f.range.low < f.range.high);
      auto text = [&](double v) {
        return integer ? std::to_string(int64_t(v)) : nlohmann::json(v).dump();
      };
      // An open end is itself outside; a closed one is passed by one (or by a half).
      const double below = f.range.low_open ? f.range.low : f.range.low - (integer ? 1 : 0.5);
      const double above = f.range.high_open ? f.range.high : f.range.high + (integer ? 1 : 0.5);
      Config c;
      BOOST_CHECK_THROW(set_config_value(c, f.key, text(below)), qkv::Error);
      if (std::isfinite(f.range.high))  // lr alone has no upper end
        BOOST_CHECK_THROW(set_config_value(c, f.key, text(above)), qkv::Error);
      if (!f.range.low_open) BOOST_CHECK_NO_THROW(set_config_value(c, f.key, text(f.range.low)));
    }
  }
  BOOST_TEST(numeric == 36);  // every int64 and double field of Config
}

BOOST_AUTO_TEST_CASE(the_language_model_options_are_checked_against_the_task) {
  Config lm;
  lm.task = "lm";
  lm.positional = "learned";
  BOOST_CHECK_NO_THROW(validate_config(lm));
  lm.tokenizer = "bpe";
  BOOST_CHECK_NO_THROW(validate_config(lm));
  Config translation = lm;
  translation.task = "dates";
  BOOST_CHECK_EXCEPTION(
      validate_config(translation, "run.json"), qkv::Error, [](const qkv::Error& e) {
        return std::string(e.what()).rfind("run.json: key 'tokenizer' bpe is the language model's",
                                           0) == 0;
      });
  lm.tokenizer = "whitespace";
  BOOST_CHECK_THROW(validate_config(lm), qkv::Error);
  lm.tokenizer = "char";
  lm.positional = "sinusoidal";  // GPT has learned or rotary positions only
  BOOST_CHECK_EXCEPTION(validate_config(lm, "run.json"), qkv::Error, [](const qkv::Error& e) {
    return std::string(e.what()) ==
           "run.json: key 'positional' must be learned or rope for a language model, got "
           "\"sinusoidal\"";
  });
}

BOOST_AUTO_TEST_CASE(a_key_given_twice_is_refused) {
  BOOST_CHECK_EXCEPTION(parse_config(R"({"lr": 0.1, "steps": 5, "lr": 0.2})", "run.json"),
                        qkv::Error, message_has("run.json", "key 'lr' appears twice"));
  BOOST_TEST(parse_config(R"({"lr": 0.1, "steps": 5})", "run.json").lr == 0.1);
}

BOOST_AUTO_TEST_CASE(device_names_are_read_whole) {
  for (const char* bad : {"cuda:", "cuda:1x", "cuda:-1", "cuda:99999", "gpu", "cuda1", "CPU"}) {
    BOOST_TEST_CONTEXT(bad) {
      BOOST_TEST(!is_device_name(bad));
      Config c;
      c.device = bad;
      BOOST_CHECK_EXCEPTION(validate_config(c), qkv::Error,
                            message_has("'device'", "cpu, cuda or cuda:N", bad));
    }
  }
  for (const char* good : {"cpu", "cuda", "cuda:0", "cuda:12"}) BOOST_TEST(is_device_name(good));
}

// A resume may change schedule-like options only.
BOOST_AUTO_TEST_CASE(resume_refuses_changes_to_the_model_data_and_batches) {
  Config saved;
  Config resumed = saved;
  resumed.steps = 8000, resumed.lr = 5e-4, resumed.eval_every = 100, resumed.patience = 3;
  BOOST_CHECK_NO_THROW(check_resume_changes(saved, resumed, "runs/r"));
  resumed.heads = 2, resumed.seed = 7;
  BOOST_CHECK_EXCEPTION(
      check_resume_changes(saved, resumed, "runs/r"), qkv::Error,
      message_has("--resume", "heads (4 -> 2)", "seed (1 -> 7)", "runs/r", "schedule-like"));
  for (const char* key : {"d_model", "layers", "ff_dim", "positional", "dropout", "task", "data",
                          "tokenizer", "train_size", "batch_size", "max_len", "optimizer"}) {
    const auto& f = *std::find_if(config_fields().begin(), config_fields().end(),
                                  [&](const ConfigField& f) { return f.key == key; });
    BOOST_TEST_CONTEXT(key) { BOOST_TEST((f.on_resume == OnResume::fixed)); }
  }
  const auto changes = config_changes(saved, resumed);
  BOOST_TEST(changes.size() == 6u);  // steps, lr, heads, eval_every, patience, seed
}

BOOST_AUTO_TEST_CASE(resume_history_round_trips_through_config_json) {
  Config c;
  c.resume_history = {{400, "steps", "400", "800"}, {800, "lr", "0.001", "0.0005"}};
  const Config back = parse_config(config_to_json(c).dump(), "config.json");
  BOOST_REQUIRE(back.resume_history.size() == 2u);
  BOOST_TEST(back.resume_history[1].step == 800);
  BOOST_TEST(back.resume_history[1].key == "lr");
  BOOST_TEST(back.resume_history[1].after == "0.0005");
  BOOST_TEST(!config_to_json(Config{}).contains("resume_history"));
  BOOST_CHECK_EXCEPTION(parse_config(R"({"resume_history": [{"step": 1}]})", "config.json"),
                        qkv::Error, message_has("config.json", "'resume_history'"));
}

BOOST_AUTO_TEST_SUITE_END()
