// The data-scaled defaults (train/scaled_defaults.h): run length, held-out splits, the pairs
// task's tokenizer, and --epochs in a real run.
#include <boost/test/unit_test.hpp>
#include <fstream>
#include <nlohmann/json.hpp>

#include "helpers.h"
#include "tiny_runs.h"
#include "train/batching.h"
#include "train/config.h"
#include "train/dataset.h"
#include "train/progress.h"
#include "train/scaled_defaults.h"
#include "train/trainer/translation_trainer.h"

using namespace qkv::train;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;

BOOST_AUTO_TEST_SUITE(scaled_defaults)

// An epoch is what the batch planner makes of the training split: counted from its plan.
BOOST_AUTO_TEST_CASE(an_epoch_is_one_pass_of_the_batch_planner) {
  for (size_t n : {1u, 63u, 64u, 65u, 1000u, 18000u}) {
    std::vector<Example> examples(n, Example{{1, 2}, {3}, 0});
    const auto plan = plan_batches(examples, {.batch_size = 64, .shuffle = true}, 7, 0);
    BOOST_TEST(steps_per_epoch(n, 64) == int64_t(plan.size()), "n = " << n);
  }
}

BOOST_AUTO_TEST_CASE(default_length_is_twenty_epochs_within_the_step_range) {
  Config c;  // steps 0, epochs 0, batch 64
  const RunLength mid = choose_run_length(c, 18000, "pairs");
  BOOST_TEST(mid.steps == 20 * 282);  // ceil(18000 / 64) = 282 batches an epoch
  BOOST_TEST(mid.line ==
             "steps: 5640 (20 epochs of 18000 pairs at batch 64; --steps or "
             "--epochs to change)");
  const RunLength small = choose_run_length(c, 2400, "pairs");  // 20 x 38 = 760: too few
  BOOST_TEST(small.steps == kMinDefaultSteps);
  BOOST_TEST(small.line ==
             "steps: 5000 (the least a default run takes; 20 epochs of 2400 pairs at batch 64 "
             "would be 760; --steps or --epochs to change)");
  const RunLength big = choose_run_length(c, 1000000, "examples");
  BOOST_TEST(big.steps == kMaxDefaultSteps);
  BOOST_TEST(big.line.find("steps: 10000 (the most a default run takes; 20 epochs of 1000000 "
                           "examples at batch 64 would be 312500;") == 0u);
}

BOOST_AUTO_TEST_CASE(steps_or_epochs_when_given) {
  Config c;
  c.batch_size = 16, c.epochs = 3;
  const RunLength epochs = choose_run_length(c, 100, "pairs");  // 7 batches an epoch
  BOOST_TEST(epochs.steps == 21);
  BOOST_TEST(epochs.line == "steps: 21 (--epochs: 3 epochs of 100 pairs at batch 16)");
  c.epochs = 0, c.steps = 35;
  const RunLength steps = choose_run_length(c, 100, "pairs");
  BOOST_TEST(steps.steps == 35);
  BOOST_TEST(steps.line == "steps: 35 (--steps; 5 epochs of 100 pairs at batch 16)");
  Config three_epochs;
  three_epochs.epochs = 3;
  c.steps = 0, c.epochs = 200'000'000;  // 1.4e9 steps: more than config.json's steps may hold
  BOOST_CHECK_EXCEPTION(choose_run_length(c, 100, "pairs"), qkv::Error,
                        message_has("--epochs", "more than 1000000000 steps"));
  const Config recorded = with_run_length(three_epochs, epochs);
  BOOST_TEST(recorded.steps == 21);
  BOOST_TEST(recorded.epochs == 0);
}

BOOST_AUTO_TEST_CASE(steps_and_epochs_together_are_refused_naming_both) {
  Config c;
  c.steps = 100, c.epochs = 2;
  BOOST_CHECK_EXCEPTION(validate_config(c, "run.json"), qkv::Error,
                        message_has("run.json: keys 'steps' (100) and 'epochs' (2) are both set"));
  c.steps = 0;
  validate_config(c, "run.json");
  c.steps = 100, c.epochs = 0;
  validate_config(c, "run.json");
}

BOOST_AUTO_TEST_CASE(holdout_is_a_tenth_between_one_and_a_thousand) {
  BOOST_TEST(holdout_size(0, 3000) == 300);
  BOOST_TEST(holdout_size(0, 20000) == 1000);
  BOOST_TEST(holdout_size(0, 200000) == 1000);
  BOOST_TEST(holdout_size(0, 25) == 2);
  BOOST_TEST(holdout_size(0, 5) == 1);
  BOOST_TEST(holdout_size(40, 3000) == 40);  // an explicit size wins
  BOOST_TEST(generated_holdout_size(0) == 1000);
  BOOST_TEST(generated_holdout_size(12) == 12);
}

// A TSV of `n` lines; the target of line i is `target(i)`.
template <typename Target>
std::string write_tsv(const ScratchDir& dir, const std::string& name, int n, Target target) {
  const std::string path = dir.file(name);
  std::ofstream out(path);
  for (int i = 0; i < n; ++i) out << "src " << i << "\t" << target(i) << "\n";
  return path;
}

BOOST_AUTO_TEST_CASE(a_3000_line_corpus_keeps_2400_for_training) {
  ScratchDir dir("scaled_split");
  Config c;
  c.task = "pairs";
  c.data = write_tsv(dir, "pairs.tsv", 3000, [](int i) { return "t " + std::to_string(i % 7); });
  TranslationData d = prepare_translation_data(c);
  BOOST_TEST(d.train.size() == 2400u);
  BOOST_TEST(d.valid.size() == 300u);
  BOOST_TEST(d.test.size() == 300u);
  c.valid_size = 50, c.test_size = 10;
  d = prepare_translation_data(c);
  BOOST_TEST(d.train.size() == 2940u);
}

BOOST_AUTO_TEST_CASE(one_word_targets_are_read_by_characters) {
  ScratchDir dir("scaled_tokenizer");
  Config c;
  c.task = "pairs";
  // 60% one-word targets ("w3"), 40% two words
  c.data = write_tsv(dir, "mostly_one.tsv", 200, [](int i) {
    return i % 5 < 3 ? "w" + std::to_string(i) : "a" + std::to_string(i) + " b";
  });
  TranslationData d = prepare_translation_data(c);
  BOOST_TEST((d.source_vocab.kind() == TokenizerKind::character));
  BOOST_TEST((d.target_vocab.kind() == TokenizerKind::character));
  size_t one_word = 0;
  for (const auto& p : d.pairs.train) one_word += p.target.find(' ') == std::string::npos;
  BOOST_TEST(d.tokenizer_line == "tokenizer: char (" + std::to_string(one_word) + " of " +
                                     std::to_string(d.pairs.train.size()) +
                                     " training targets are one word, so unseen words are still "
                                     "spelled out; --tokenizer to change)");
  c.tokenizer = "whitespace";  // an explicit choice wins, and is not explained
  d = prepare_translation_data(c);
  BOOST_TEST((d.target_vocab.kind() == TokenizerKind::whitespace));
  BOOST_TEST(d.tokenizer_line.empty());

  Config words = c;
  words.tokenizer = "";
  // 40% one-word targets: words
  words.data = write_tsv(dir, "mostly_two.tsv", 200, [](int i) {
    return i % 5 < 2 ? "w" + std::to_string(i) : "a" + std::to_string(i) + " b";
  });
  d = prepare_translation_data(words);
  BOOST_TEST((d.target_vocab.kind() == TokenizerKind::whitespace));
  BOOST_TEST(d.tokenizer_line.find("tokenizer: whitespace (") == 0u);
}

BOOST_AUTO_TEST_CASE(the_progress_line_shows_the_epoch) {
  ProgressState s;
  s.step = 250, s.total = 1000, s.epoch = 3, s.loss = 1.23456;
  BOOST_TEST(format_progress(s, 60.0, 10) ==
             "step 250/1000 [==>       ]  25%  epoch 3  loss 1.2346  ETA 3m00s");
}

// --epochs 2 on 200 examples at batch 16: 13 batches an epoch, 26 steps; metrics.jsonl counts the
// epochs, config.json records the steps.
BOOST_AUTO_TEST_CASE(epochs_run_that_many_passes) {
  ScratchDir dir("scaled_epochs");
  Config c = test::tiny_copy(dir.file("run"), 0);
  c.epochs = 2, c.eval_every = 1000;
  const TrainResult r = train_translation(c);
  BOOST_TEST(r.steps == 26);
  std::ifstream in(dir.file("run") + "/metrics.jsonl");
  std::string line;
  std::map<int64_t, int64_t> epoch_of_step;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) epoch_of_step[j["step"].get<int64_t>()] = j["epoch"].get<int64_t>();
  }
  BOOST_TEST(epoch_of_step.at(1) == 1);
  BOOST_TEST(epoch_of_step.at(13) == 1);
  BOOST_TEST(epoch_of_step.at(14) == 2);
  BOOST_TEST(epoch_of_step.at(26) == 2);
  const Config saved = load_config(dir.file("run") + "/config.json");
  BOOST_TEST(saved.steps == 26);
  BOOST_TEST(saved.epochs == 0);
}

BOOST_AUTO_TEST_SUITE_END()
