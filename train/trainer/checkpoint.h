// A run's checkpoint as the trainer reads and writes it: the weights, the optimizer's state and
// the TrainerState, which is what a resumed run continues from. The files and how they are
// switched to as one are train/checkpoint_dir.h's.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "nn/module.h"
#include "nn/optim.h"
#include "train/run_dir.h"

namespace qkv::train {

// Everything besides the weights that a resumed run needs, written last so that a checkpoint is
// only "there" once its tensors are.
struct TrainerState {
  int64_t step = 0;
  uint64_t generator_offset = 0;
  // The best value so far of early stopping's metric, the way it improves (the highest accuracy,
  // the lowest validation loss; train/trainer/early_stopping.h); best.safetensors holds its
  // weights. -1 before the first evaluation: every metric is >= 0.
  double best_metric = -1;
  int64_t evals_since_best = 0;  // evaluations since best_metric last improved (for patience)
  int64_t world_size = 1;        // processes that train it (mpirun -np); a resume needs as many
};

// trainer_state.json's text; throws qkv::Error("<source>: ...") for a missing or mistyped field.
TrainerState parse_trainer_state(std::string_view text, const std::string& source);

// model.safetensors, optimizer.safetensors and trainer_state.json, switched to as one checkpoint
// (train/checkpoint_dir.h): a failed write throws, and a failed write or a killed process leaves
// the previous checkpoint as it was.
void save_checkpoint(const RunDir& run, const nn::Module& model, const nn::Optimizer& opt,
                     const TrainerState& state);
// Throws qkv::Error naming the folder when it has no checkpoint.
TrainerState load_checkpoint(const RunDir& run, nn::Module& model, nn::Optimizer& opt);
// The same from the run folder at `folder` (another rank of the job holds its lock).
TrainerState load_checkpoint(const std::string& folder, nn::Module& model, nn::Optimizer& opt);
// Throws unless the checkpoint's world size is `world_size`: "--resume: runs/x was trained by 2
// processes (mpirun -np 2); resume it with as many, not 3".
void check_resumed_world_size(const TrainerState& state, int64_t world_size,
                              const std::string& folder);

}  // namespace qkv::train
