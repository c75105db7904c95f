// What both trainers (translation and classification) share: the optimizer and schedule built
// from a Config, the checkpoint files of a run folder, and the stop-signal flag.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "nn/module.h"
#include "nn/optim.h"
#include "nn/schedule.h"
#include "train/config.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/tokenizer.h"

namespace qkv::train {

nn::LrSchedule make_schedule(const Config& config);
// --precision ("fp32" or "bf16") as the dtype of an Autocast scope (engine/autocast.h). A run
// trains, validates and tests under it; its parameters and checkpoints stay float32.
DType compute_dtype(const std::string& precision);
// AdamW or SGD (momentum 0.9) over the two groups of nn::weight_decay_groups: --weight-decay on
// the weight matrices and kernels, none on biases, norm weights and embedding tables.
std::unique_ptr<nn::Optimizer> make_optimizer(const Config& config, const nn::Module& model);

// Everything besides the weights that a resumed run needs, written last so that a checkpoint is
// only "there" once its tensors are.
struct TrainerState {
  int64_t step = 0;
  uint64_t generator_offset = 0;
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

// On --resume the vocabulary built from the data must be the run's `file` (token ids are rows of
// the checkpoint's embeddings); throws qkv::Error naming both sizes otherwise. A run folder without
// the file (an older layout) is not checked.
void check_resumed_vocab(const RunDir& run, const std::string& file, const Vocab& from_data);

// Why a training step went non-finite, as one line: re-runs the step (`redo`: the same batch's
// forward and backward) under anomaly mode, with the default generator rewound to
// `generator_offset` (where the step began, so dropout draws the same masks), and returns the
// anomaly's description of the first op that produced a NaN or Inf. The caller then throws, so
// nothing after the failed step - no optimizer update, no checkpoint - is ever written.
std::string name_the_non_finite_op(uint64_t generator_offset, const std::function<void()>& redo);

// "train: the loss became non-finite at step 7 (op 'log' produced NaN ...); the last good
// checkpoint is kept in runs/x (try a lower --lr or --clip 1)".
std::string non_finite_step_message(const std::string& what, int64_t step, const RunDir& run,
                                    const std::string& cause);

// The end of an evaluation, the same in both trainers: the result `line` goes to the progress bar
// and log.txt, a checkpoint is written, loss.png is redrawn (training loss and `valid_key` from
// metrics.jsonl, when pictures are on), and then early stopping's `stop_reason` (may be empty) or
// a stop signal (`stop_signal`: one was received, by any rank) ends the run. Returns whether the
// run stops; sets `interrupted` for a signal.
bool finish_evaluation(const Config& config, RunDir& run, ProgressBar& bar, const nn::Module& model,
                       const nn::Optimizer& opt, TrainerState& state, const std::string& line,
                       const std::string& valid_key, const std::string& curve_title,
                       const std::string& stop_reason, bool stop_signal, bool& interrupted);

// SIGINT (Ctrl-C), SIGTERM (kill, timeout, batch schedulers) and SIGHUP (a closed terminal) ask
// the loop to write a checkpoint and return (the handler only records the signal); a second
// signal ends the process at once. The command line then exits with 128 + the signal.
void install_interrupt_handler();
bool interrupt_requested();
int interrupt_signal();  // the signal received (or joined), 0 if none
// Under mpirun a signal reaches the ranks at different moments; they agree on it once per step,
// and a rank that has not received one itself stops as if it had received `signal`.
void join_interrupt(int signal);
// "interrupted by SIGTERM: the checkpoint of step 12 is in runs/x; continue with --resume runs/x"
std::string interruption_message(int64_t step, const std::string& run);

double seconds_since(std::chrono::steady_clock::time_point t0);

}  // namespace qkv::train
