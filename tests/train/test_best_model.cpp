// The best validation model (train/trainer/best_model.h): a run whose validation metric peaks
// before its last step keeps that evaluation's weights as best.safetensors, byte for byte the
// checkpoint the same run stopped there leaves; `qkv eval` and the trainer's own test score them,
// `--last` the last checkpoint; a write of best.safetensors that fails leaves the previous one and
// the checkpoint before it, and a resumed run keeps tracking the best to the same file an
// uninterrupted run ends with.
#include <unistd.h>

#include <boost/test/unit_test.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "nn/safetensors.h"
#include "tests/train/helpers.h"
#include "tests/train/tiny_runs.h"
#include "train/atomic_file.h"
#include "train/checkpoint_dir.h"
#include "train/commands/commands.h"
#include "train/dataset.h"
#include "train/trainer/best_model.h"
#include "train/trainer/checkpoint.h"
#include "train/trainer/classification_trainer.h"
#include "train/trainer/early_stopping.h"
#include "train/trainer/translation_trainer.h"
#include "train/trainer/translator.h"

using namespace qkv;
using namespace qkv::train;
using qkv::train::test::message_has;
using qkv::train::test::ScratchDir;
using qkv::train::test::SimulatedFullDisk;
namespace fs = std::filesystem;

namespace {

// (step, value) of `key` in every validation record of a run's metrics.jsonl.
std::vector<std::pair<int64_t, double>> validation_curve(const std::string& run,
                                                         const std::string& key) {
  std::vector<std::pair<int64_t, double>> curve;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains(key)) curve.emplace_back(j["step"].get<int64_t>(), j[key].get<double>());
  }
  return curve;
}

// The first evaluation with the highest value: the one a strict "better than the best so far"
// keeps.
std::pair<int64_t, double> first_maximum(const std::vector<std::pair<int64_t, double>>& curve) {
  std::pair<int64_t, double> best{-1, -1};
  for (const auto& point : curve)
    if (point.second > best.second) best = point;
  return best;
}

// A weights file's tensors (names, dtypes, shapes and bytes), without its metadata.
std::string tensor_bytes(const std::string& path) {
  return nn::safetensors_bytes(nn::load_safetensors(path).tensors);
}

// What `command` prints on stdout (through `file`).
std::string printed(const std::function<int()>& command, const std::string& file) {
  std::fflush(stdout);
  const int saved = ::dup(1);
  std::FILE* out = std::fopen(file.c_str(), "w");
  ::dup2(::fileno(out), 1);
  const int code = command();
  std::fflush(stdout);
  ::dup2(saved, 1);
  ::close(saved);
  std::fclose(out);
  BOOST_REQUIRE_EQUAL(code, 0);
  return read_file(file);
}

// The first file of a folder, in name order.
std::string first_file(const std::string& folder) {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(folder)) names.push_back(e.path().string());
  std::sort(names.begin(), names.end());
  BOOST_REQUIRE(!names.empty());
  return read_file(names.front());
}

// What a run whose metric peaks before its end must show: best.safetensors is the checkpoint of
// the peak (`upto`: the same run stopped there), eval scores it, --last scores the last weights,
// and the trainer's own test used the best.
void check_best_model(const std::string& full, const std::string& upto, const std::string& key,
                      const std::string& metric, int64_t steps, double trainer_test) {
  const auto curve = validation_curve(full, key);
  const auto [best_step, best_value] = first_maximum(curve);
  BOOST_TEST_MESSAGE(full << ": best " << key << " " << best_value << " at step " << best_step
                          << ", last " << curve.back().second);
  BOOST_REQUIRE_LT(best_step, steps);                 // the metric peaks before the end
  BOOST_REQUIRE_LT(curve.back().second, best_value);  // and falls after it

  const BestModel recorded = read_best_model(full + "/best.safetensors");
  BOOST_TEST(recorded.metric == metric);
  BOOST_TEST(recorded.step == best_step);
  BOOST_TEST(recorded.value == best_value);

  BOOST_TEST((tensor_bytes(full + "/best.safetensors") ==
              tensor_bytes(upto + "/model.safetensors")));  // bytes: not printed
  BOOST_TEST((tensor_bytes(full + "/best.safetensors") !=
              tensor_bytes(full + "/model.safetensors")));  // bytes: not printed

  const cli::EvalReport best = cli::evaluate_run({.run = full});
  const cli::EvalReport last = cli::evaluate_run({.run = full, .last = true});
  const cli::EvalReport peak = cli::evaluate_run({.run = upto, .last = true});
  BOOST_TEST_MESSAGE(best.line << "\n" << last.line);
  BOOST_TEST(best.weights_file == "best.safetensors");
  BOOST_TEST(last.weights_file == "model.safetensors");
  BOOST_TEST(best.score == peak.score);    // the score of the peak's own checkpoint
  BOOST_TEST(trainer_test == best.score);  // the trainer tested the best weights too
}

}  // namespace

BOOST_AUTO_TEST_SUITE(best_model)

BOOST_AUTO_TEST_CASE(a_translation_run_keeps_the_checkpoint_of_its_best_evaluation) {
  ScratchDir dir("best_translation");
  const Config full = test::tiny_copy_curve(dir.file("full"), 100);
  const TrainResult trained = train_translation(full);
  const auto peak = first_maximum(validation_curve(full.out, "valid_exact_match"));
  const Config upto = test::tiny_copy_curve(dir.file("upto"), peak.first);
  train_translation(upto);
  check_best_model(full.out, upto.out, "valid_exact_match", "exact_match", full.steps,
                   trained.test_exact_match);

  // qkv translate and qkv attention: the best model's output is the peak checkpoint's, --last's
  // the last one's, and the two differ.
  const TranslationData data = prepare_translation_data(full);
  std::vector<std::string> sources;
  for (const auto& p : data.pairs.test) sources.push_back(p.source);
  auto translate = [&](const std::string& run, bool last) {
    return printed(
        [&] { return cli::translate_command({.run = run, .texts = sources, .last = last}); },
        dir.file("translated.txt"));
  };
  const std::string best_translations = translate(full.out, false);
  BOOST_TEST(best_translations == translate(upto.out, true));
  BOOST_TEST(best_translations != translate(full.out, true));
  auto attention = [&](const std::string& run, bool last, const std::string& out) {
    printed(
        [&] {
          return cli::attention_command(
              {.run = run, .text = sources.front(), .out = dir.file(out), .last = last});
        },
        dir.file("attention.txt"));
    return first_file(dir.file(out));
  };
  const std::string best_map = attention(full.out, false, "maps_best");
  BOOST_TEST((best_map == attention(upto.out, true, "maps_peak")));  // bytes: not printed
  BOOST_TEST((best_map != attention(full.out, true, "maps_last")));

  // --last for the trainer's test: the score `qkv eval --last` gives.
  Config tested_last = full;
  tested_last.out = dir.file("tested_last"), tested_last.last = true;
  BOOST_TEST(train_translation(tested_last).test_exact_match ==
             cli::evaluate_run({.run = full.out, .last = true}).score);
}

BOOST_AUTO_TEST_CASE(a_classification_run_keeps_the_checkpoint_of_its_best_evaluation) {
  ScratchDir dir("best_classification");
  const Config full = test::tiny_order_curve(dir.file("full"), 90);
  const TrainResult trained = train_classification(full);
  const auto peak = first_maximum(validation_curve(full.out, "valid_accuracy"));
  const Config upto = test::tiny_order_curve(dir.file("upto"), peak.first);
  train_classification(upto);
  check_best_model(full.out, upto.out, "valid_accuracy", "accuracy", full.steps,
                   trained.test_accuracy);
}

BOOST_AUTO_TEST_CASE(a_failed_write_keeps_the_previous_best_and_a_resume_goes_on_tracking) {
  ScratchDir dir("best_resume");
  const Config reference = test::tiny_copy_curve(dir.file("reference"), 100);
  train_translation(reference);

  Config c = test::tiny_copy_curve(dir.file("run"), 50);
  train_translation(c);
  const std::string best_file = c.out + "/best.safetensors";
  const std::string best_before = read_file(best_file);
  const BestModel before = read_best_model(best_file);
  c.steps = 100;
  {
    // The next evaluation improves on the best: its best.safetensors is the first file too large
    // for the "disk" (config.json, the vocabularies and model.json are smaller).
    SimulatedFullDisk full(best_before.size() / 2);
    BOOST_CHECK_EXCEPTION(train_translation(c, RunMode::resume), Error,
                          message_has("best.safetensors", "No space left on device"));
  }
  BOOST_TEST((read_file(best_file) == best_before));  // bytes: not printed
  for (const auto& e : fs::directory_iterator(c.out))
    BOOST_TEST(temporary_of(e.path().filename().string()).empty(), e.path() << " was left");
  // The checkpoint did not move past the best it could not write: a resume replays that
  // evaluation.
  const std::string state_file = c.out + "/trainer_state.json";
  const TrainerState state = parse_trainer_state(read_file(state_file), state_file);
  BOOST_TEST(state.step == before.step);
  BOOST_TEST(state.best_metric == before.value);

  // Resumed twice, the second time past the peak (step 90 of the reference, which then falls): the
  // checkpointed best_metric keeps the lower last evaluation from replacing the best.
  c.steps = 90;
  train_translation(c, RunMode::resume);
  c.steps = 100;
  train_translation(c, RunMode::resume);
  BOOST_TEST((read_file(best_file) ==
              read_file(reference.out + "/best.safetensors")));  // bytes: not printed
  BOOST_TEST(read_best_model(best_file).step < c.steps);
}

BOOST_AUTO_TEST_CASE(a_best_model_without_its_record_is_refused_naming_the_key) {
  ScratchDir dir("best_record");
  const Config c = test::tiny_copy(dir.file("run"), 2);
  train_translation(c);
  const std::string best_file = c.out + "/best.safetensors";
  nn::save_safetensors(best_file, nn::load_safetensors(best_file).tensors, {{"format", "pt"}});
  BOOST_CHECK_EXCEPTION(cli::evaluate_run({.run = c.out}), Error,
                        message_has("--run", best_file, "\"best_metric\""));
  nn::save_safetensors(
      best_file, nn::load_safetensors(best_file).tensors,
      {{"best_metric", "exact_match"}, {"best_value", "high"}, {"best_step", "2"}});
  BOOST_CHECK_EXCEPTION(cli::evaluate_run({.run = c.out}), Error,
                        message_has(best_file, "\"best_value\" is not a number: 'high'"));
  // --last does not read it.
  BOOST_TEST(cli::evaluate_run({.run = c.out, .last = true}).weights_file == "model.safetensors");
}

BOOST_AUTO_TEST_CASE(early_stopping_keeps_the_lowest_loss_and_the_highest_score) {
  Config config;
  config.patience = 2;
  const EarlyStopping loss(config, {"valid_loss"}, Better::lower);
  TrainerState state;  // best_metric -1: no evaluation yet
  const std::vector<double> losses = {2.0, 1.5, 1.7, 1.6};
  const std::vector<double> best = {2.0, 1.5, 1.5, 1.5};
  const std::vector<int64_t> since = {0, 0, 1, 2};
  std::string why;
  for (size_t i = 0; i < losses.size(); ++i) {
    why = loss.update({{"valid_loss", losses[i]}}, state);
    BOOST_TEST(state.best_metric == best[i]);
    BOOST_TEST(state.evals_since_best == since[i]);
    BOOST_TEST(why.empty() == (i + 1 < losses.size()));
  }
  BOOST_TEST(why.find("no better valid_loss for 2 evaluations (best 1.5000)") != std::string::npos);

  config.patience = 0;
  config.target_value = 1.45;  // a loss reaches its target from above
  const EarlyStopping target(config, {"valid_loss"}, Better::lower);
  state = TrainerState{};
  BOOST_TEST(target.update({{"valid_loss", 1.5}}, state).empty());
  BOOST_TEST(target.update({{"valid_loss", 1.4}}, state).find("target valid_loss 1.4500 reached") !=
             std::string::npos);

  config.target_value = 0;
  const EarlyStopping score(config, {"accuracy"});  // higher is better
  state = TrainerState{};
  for (double a : {0.5, 0.7, 0.6}) score.update({{"accuracy", a}}, state);
  BOOST_TEST(state.best_metric == 0.7);
  BOOST_TEST(state.evals_since_best == 1);
}

BOOST_AUTO_TEST_SUITE_END()
