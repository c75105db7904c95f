// The best validation model of a run: best.safetensors in the run folder, beside the last
// checkpoint that --resume continues from (train/checkpoint_dir.h).
//
//   runs/NAME/best.safetensors   the weights of the evaluation with the best validation metric;
//                                its safetensors metadata says which metric, its value and step
//   runs/NAME/model.safetensors  the last checkpoint's weights (`--last`)
//
// Validation scores go up and down late in a run, so `qkv eval`, `qkv translate`,
// `qkv attention` and the trainer's own test use the best model unless --last is given. The file
// is written whole and renamed into place (train/atomic_file.h): a failed write or a process
// killed while writing leaves the previous best as it was. It is written before the checkpoint of
// the same step, whose trainer_state.json records best_metric: a run killed in between resumes
// from the checkpoint before, replays that evaluation and writes the same best again.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "nn/module.h"
#include "train/run_dir.h"

namespace qkv::train {

inline const char* kBestModelFile = "best.safetensors";

// Which evaluation best.safetensors holds.
struct BestModel {
  std::string metric;  // the validation metric early stopping follows: "exact_match", "accuracy"
  double value = 0;
  int64_t step = 0;
};

// Writes the model's weights as run/best.safetensors (atomically), with `best` in its metadata
// ("best_metric", "best_value", "best_step"; "format": "pt" as the checkpoint's weights).
void save_best_model(const RunDir& run, const nn::Module& model, const BestModel& best);

// The record in the metadata of a best.safetensors at `path`; throws qkv::Error naming the file
// and the key when one is missing or not a number.
BestModel read_best_model(const std::string& path);

// The weights file a command loads from a run folder.
struct ModelWeights {
  std::string file;               // kBestModelFile or kModelFile
  std::optional<BestModel> best;  // what best.safetensors holds, when that is the file
  // "best.safetensors (exact_match 0.9500 at step 500)" or "model.safetensors (the last
  // checkpoint)"
  std::string describe() const;
};

// best.safetensors unless `last` is set or the folder has none (a run stopped before its first
// evaluation, or written before best models were kept); model.safetensors otherwise.
ModelWeights choose_model_weights(const std::string& run_dir, bool last);

}  // namespace qkv::train
