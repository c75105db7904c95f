// What both trainers (translation and classification) share: the optimizer and schedule built
// from a Config, the checkpoint files of a run folder, and the Ctrl-C flag.
#pragma once

#include <chrono>
#include <memory>
#include <string_view>
#include <vector>

#include "nn/module.h"
#include "nn/optim.h"
#include "nn/schedule.h"
#include "train/config.h"
#include "train/run_dir.h"

namespace qkv::train {

nn::LrSchedule make_schedule(const Config& config);
std::unique_ptr<nn::Optimizer> make_optimizer(const Config& config, std::vector<Tensor> params);

// Everything besides the weights that a resumed run needs, written last so that a checkpoint is
// only "there" once its tensors are.
struct TrainerState {
  int64_t step = 0;
  uint64_t generator_offset = 0;
  double best_metric = -1;
};

// trainer_state.json's text; throws qkv::Error("<source>: ...") for a missing or mistyped field.
TrainerState parse_trainer_state(std::string_view text, const std::string& source);

// model.safetensors, optimizer.safetensors, then trainer_state.json.
void save_checkpoint(const RunDir& run, const nn::Module& model, const nn::Optimizer& opt,
                     const TrainerState& state);
// Throws qkv::Error naming the folder when it has no checkpoint.
TrainerState load_checkpoint(const RunDir& run, nn::Module& model, nn::Optimizer& opt);

// Ctrl-C asks the loop to write a checkpoint and return (the handler only sets a flag).
void install_interrupt_handler();
bool interrupt_requested();

double seconds_since(std::chrono::steady_clock::time_point t0);

}  // namespace qkv::train
