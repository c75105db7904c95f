// The training loop every trainer runs: epochs of batches, one optimizer step per batch, logging,
// checkpoints, evaluation, early stopping, stop signals and the non-finite-step check. What differs
// between the trainers - the batches, the loss, what evaluation measures - is
// handed in as its TrainingHooks (the callbacks the loop calls).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "nn/module.h"
#include "nn/optim.h"
#include "nn/schedule.h"
#include "train/config.h"
#include "train/run_dir.h"
#include "train/trainer/attention_stats.h"
#include "train/trainer/checkpoint.h"
#include "train/trainer/early_stopping.h"

namespace qkv::train {

// One validation pass, as the loop needs it.
struct Evaluation {
  std::map<std::string, double> metrics;  // name -> value, for early stopping
  double headline = 0;                    // shown on the progress bar
  nlohmann::json record;                  // the metrics.jsonl record (the step is added)
  std::string line;                       // "step 500: valid accuracy 0.9960" for the bar and log
};

struct TrainingHooks {
  // The batches of one epoch, as indices into the training set (the same for the same epoch).
  std::function<std::vector<std::vector<size_t>>(uint64_t epoch)> plan_epoch;
  // Makes the step's batch from its indices; the functions below work on that batch.
  std::function<void(const std::vector<size_t>& indices)> load_batch;
  std::function<Tensor()> loss;  // forward of the batch: the scalar training loss
  // For micro-batches (train/trainer/micro_batches.h): the batch's number of loss terms (target
  // tokens, examples), and its loss summed over them and divided by `global_terms`.
  std::function<int64_t()> loss_terms;
  std::function<Tensor(double global_terms)> summed_loss;
  std::function<int64_t()> batch_items;  // tokens or examples in the batch, for throughput
  std::function<std::vector<AttentionLayerStats>()> attention_stats;  // of the batch; may be {}
  std::function<Evaluation()> evaluate;                               // on the validation split
  // Names in the progress bar ("acc", "ex"), the metrics.jsonl throughput key, and the
  // validation metric and title of loss.png.
  std::string metric_label, items_label, throughput_key, valid_key, curve_title;
};

struct LoopResult {
  int64_t steps = 0;
  double seconds = 0;
  bool interrupted = false;  // a stop signal: a checkpoint was written and the run stopped there
};

// Trains from state.step (0, or where a resumed run left off) to config.steps or an early stop.
// A resumed run replays the data order up to its step, so it sees the batches it would have.
LoopResult run_training_loop(const Config& config, RunDir& run, nn::Module& model,
                             nn::Optimizer& opt, const nn::LrSchedule& schedule,
                             const EarlyStopping& early_stopping, TrainerState& state,
                             const TrainingHooks& hooks);

}  // namespace qkv::train
