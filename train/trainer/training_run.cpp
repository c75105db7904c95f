#include "train/trainer/training_run.h"

#include <cstdio>

#include "engine/parallel.h"
#include "engine/process_group.h"
#include "engine/random.h"
#include "nn/safetensors.h"
#include "train/trainer/optimizer_setup.h"
#include "train/trainer/precision.h"
#include "train/trainer/resume.h"

namespace qkv::train {

namespace {
// validate_config runs before anything else reads the options (compute_dtype among them).
const Config& validated(const Config& requested) {
  validate_config(requested);
  return requested;
}
}  // namespace

TrainingRun::TrainingRun(const Config& requested, RunMode mode)
    : mode_(mode),
      config_(validated(requested)),
      saved_(mode == RunMode::resume ? resumed_run_config(requested.out) : requested),
      precision_(compute_dtype(requested.precision)) {  // matmuls in bf16 with --precision bf16
  if (mode_ == RunMode::resume) check_resume_changes(saved_, requested, requested.out);
  if (config_.threads > 0) set_num_threads(int(config_.threads));
  manual_seed(config_.seed);
}

void TrainingRun::open(
    nn::Module& model, const nlohmann::json& model_json,
    const std::function<void(RunDir&, const std::string&)>& check_resumed_files) {
  opt_ = make_optimizer(config_, model);
  schedule_ = make_schedule(config_);
  ProcessGroup& group = *ProcessGroup::from_environment();
  state_.world_size = group.size();
  folder_ = std::make_unique<RankRunDir>(config_.out, mode_, group);
  if (mode_ == RunMode::resume) {
    const std::string& source = folder_->source();
    check_model_json_matches(source, model_json);
    if (check_resumed_files) check_resumed_files(run(), source);
    state_ = load_checkpoint(source, model, *opt_);
    check_resumed_world_size(state_, group.size(), source);
    default_generator().set_offset(state_.generator_offset);
    config_ = with_resume_history(config_, saved_, state_.step);
  }
  save_config(config_, run().file("config.json"));
}

void TrainingRun::set_run_length(const RunLength& length) {
  config_ = with_run_length(config_, length);
  note(length.line);
}

void TrainingRun::note(const std::string& line) {
  if (!line.empty()) notes_.push_back(line);
}

void TrainingRun::announce(std::string summary) {
  if (config_.precision == "bf16") summary += "; bf16 products, float32 weights";
  std::printf("%s\n", summary.c_str());
  run().log(summary);
  for (const std::string& line : notes_) {
    std::printf("%s\n", line.c_str());
    run().log(line);
  }
}

TrainResult TrainingRun::train(nn::Module& model, const EarlyStopping& early_stopping,
                               const TrainingHooks& hooks) {
  const LoopResult loop =
      run_training_loop(config_, run(), model, *opt_, schedule_, early_stopping, state_, hooks);
  TrainResult result;
  result.steps = loop.steps;
  result.seconds = loop.seconds;
  result.interrupted = loop.interrupted;
  return result;
}

ModelWeights TrainingRun::use_model_for_test(nn::Module& model) {
  ModelWeights weights = choose_model_weights(run().path(), config_.last);
  if (weights.best) model.load_state_dict(nn::load_safetensors(run().file(weights.file)).tensors);
  return weights;
}

void TrainingRun::report_test(const std::string& line) {
  std::printf("\n%s\n", line.c_str());
  run().log(line);
}

TrainResult TrainingRun::finish(const TrainResult& result,
                                const std::vector<std::string>& pictures) {
  for (const std::string& line : pictures) std::printf("%s\n", line.c_str());
  if (config_.pictures) std::printf("loss curve:     %s\n", run().file("loss.png").c_str());
  std::printf("run folder:     %s\n", run().path().c_str());
  return result;
}

}  // namespace qkv::train
