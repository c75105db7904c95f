// `qkv train translate`: the training loop of a Seq2SeqTransformer on a translation task.
//
// One step: a batch of padded (source, target) ids -> logits -> cross entropy over the non-pad
// target positions -> backward -> gradient clipping -> AdamW step with the scheduled learning
// rate. Every eval_every steps: exact match and token accuracy of greedy decoding on the validation
// split, a checkpoint, and a fresh loss.png. At the end: test metrics, a few translations and the
// attention maps of one test example. docs/TRAINING.md walks through it.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "train/config.h"
#include "train/run_dir.h"

namespace qkv::train {

struct TrainResult {
  int64_t steps = 0;
  double test_exact_match = 0, test_token_accuracy = 0;  // translation
  double test_accuracy = 0;                              // classification
  double seconds = 0;
  bool interrupted = false;
  // translation: the (source, translation) examples printed at the end, decoded in eval mode
  std::vector<std::pair<std::string, std::string>> examples;
};

// RunMode::resume continues the run in config.out from its last checkpoint (same data order, same
// random stream, so the loss curve continues as if never stopped); RunMode::fresh refuses a
// folder that holds a run, RunMode::overwrite replaces it (train/run_dir.h).
TrainResult train_translation(const Config& config, RunMode mode);
inline TrainResult train_translation(const Config& config, bool resume = false) {
  return train_translation(config, resume ? RunMode::resume : RunMode::fresh);
}

}  // namespace qkv::train
