#include <boost/test/unit_test.hpp>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "train/atomic_file.h"
#include "train/config.h"

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
  set_config_value(c, "task", "123");
  BOOST_TEST(c.steps == 500);
  BOOST_TEST(c.dropout == 0.25);
  BOOST_TEST(c.task == "123");
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

// Found while hardening the loaders (regression inputs in tests/fuzz/corpus/config/): nlohmann
// reports 1e999 with out_of_range, not parse_error, so it escaped load_config as a foreign
// exception; and get<int64_t>() wrapped 2^63 to a negative number, accepted silently.
BOOST_AUTO_TEST_CASE(overflowing_numbers_are_rejected) {
  BOOST_CHECK_EXCEPTION(parse_config(R"({"lr": 1e999})", "run.json"), qkv::Error,
                        message_has("run.json", "not valid JSON", "number overflow"));
  BOOST_CHECK_EXCEPTION(parse_config(R"({"steps": 9223372036854775808})", "run.json"), qkv::Error,
                        message_has("run.json", "'steps'", "out of range"));
  BOOST_CHECK_EXCEPTION(parse_config(R"({"seed": -1})", "run.json"), qkv::Error,
                        message_has("'seed'", "must not be negative"));
  BOOST_TEST(parse_config(R"({"steps": 9223372036854775807})", "run.json").steps == INT64_MAX);
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

BOOST_AUTO_TEST_SUITE_END()
