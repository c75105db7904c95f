// The steps every trainer takes around its own data, model and TrainingHooks: checking the
// options, the resumed run's config, precision, threads and seed; the optimizer, schedule and run
// folder; loading a resumed checkpoint; config.json and the summary line; the training loop; and
// the weights the test is run on (the best validation model unless --last).
//
//   TrainingRun run(requested, mode);            // before anything is built
//   ... data and model from run.config() ...
//   run.open(model, model_json, check_files);    // optimizer, folder, checkpoint, config.json
//   ... the run's own files, run.announce(summary), the TrainingHooks ...
//   TrainResult result = run.train(model, early_stopping, hooks);
//   if (!result.interrupted) run.use_model_for_test(model) ... test ...
#pragma once

#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "engine/autocast.h"
#include "nn/module.h"
#include "nn/optim.h"
#include "nn/schedule.h"
#include "train/config.h"
#include "train/run_dir.h"
#include "train/scaled_defaults.h"
#include "train/trainer/best_model.h"
#include "train/trainer/checkpoint.h"
#include "train/trainer/early_stopping.h"
#include "train/trainer/rank_run_dir.h"
#include "train/trainer/training_loop.h"
#include "train/trainer/translation_trainer.h"

namespace qkv::train {

class TrainingRun {
 public:
  // Everything that can be checked without the run folder is, before it is created (a failed
  // start leaves nothing behind): `requested`, and on resume the run's config.json and what
  // --resume may change. Then the products' precision (for the run's lifetime), the thread count
  // and the seed are set.
  TrainingRun(const Config& requested, RunMode mode);
  TrainingRun(const TrainingRun&) = delete;
  TrainingRun& operator=(const TrainingRun&) = delete;

  // The run's options; on resume (after open) with its resume_history.
  const Config& config() const { return config_; }
  TrainerState& state() { return state_; }
  RunDir& run() { return folder_->run(); }

  // Once the model is built: its optimizer and schedule, and the run folder (rank 0 writes --out,
  // the other ranks a scratch folder). A resume that cannot go on (model.json other than
  // `model_json`, `check_resumed_files` throwing for other data, a damaged checkpoint, another
  // world size) fails before the run's files are touched; otherwise the checkpoint is loaded and
  // the generator set where it was. Then config.json is written.
  void open(
      nn::Module& model, const nlohmann::json& model_json,
      const std::function<void(RunDir& run, const std::string& source)>& check_resumed_files = {});

  // Before open(): the run's length, chosen once the training split is known
  // (train/scaled_defaults.h); config.json records its steps.
  void set_run_length(const RunLength& length);
  // A line (may be empty: nothing) that announce() prints and logs after the summary.
  void note(const std::string& line);
  // Prints `summary` (with a note for bf16 products) and the notes, and logs them.
  void announce(std::string summary);

  // run_training_loop over the optimizer and schedule of open(): steps, seconds, interrupted.
  TrainResult train(nn::Module& model, const EarlyStopping& early_stopping,
                    const TrainingHooks& hooks);

  // Loads the weights the end-of-training test uses into `model`: best.safetensors unless --last
  // (or the run wrote none); returns which, for the test's line.
  ModelWeights use_model_for_test(nn::Module& model);

  // The test's result line, printed after the progress bar and logged.
  void report_test(const std::string& line);
  // Prints the last lines of a run, `pictures` (the trainer's own), loss.png (when pictures are
  // on) and the run folder, and returns `result`.
  TrainResult finish(const TrainResult& result, const std::vector<std::string>& pictures);

 private:
  RunMode mode_;
  Config config_, saved_;
  Autocast precision_;
  std::unique_ptr<nn::Optimizer> opt_;
  nn::LrSchedule schedule_;
  TrainerState state_;
  std::unique_ptr<RankRunDir> folder_;
  std::vector<std::string> notes_;
};

}  // namespace qkv::train
