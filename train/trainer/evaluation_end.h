// What every trainer does once a validation pass has been scored: report it, keep the best model,
// write the checkpoint, redraw loss.png, and decide whether the run goes on.
#pragma once

#include <optional>
#include <string>

#include "nn/module.h"
#include "nn/optim.h"
#include "train/progress.h"
#include "train/run_dir.h"
#include "train/trainer/best_model.h"
#include "train/trainer/checkpoint.h"

namespace qkv::train {

// Where the end of an evaluation writes to: the same for every evaluation of a run.
struct RunOutputs {
  RunDir& run;
  ProgressBar& bar;
  const nn::Module& model;
  const nn::Optimizer& opt;
  bool pictures = false;    // redraw loss.png (--pictures)
  std::string valid_key;    // the metrics.jsonl key drawn on loss.png beside the training loss
  std::string curve_title;  // loss.png's title
};

// One evaluation's result, as its end needs it.
struct EvaluationOutcome {
  std::string line;          // "step 500: valid accuracy 0.9960", for the progress bar and log.txt
  std::string stop_reason;   // early stopping's reason to end the run, or "" to go on
  bool stop_signal = false;  // a stop signal was received, by any rank
  std::optional<BestModel> new_best;  // set when this evaluation is the best so far
};

enum class AfterEvaluation { go_on, stop, interrupted };

// The line goes to the progress bar and log.txt; a new best model is written as best.safetensors,
// then the checkpoint of state.step (with the generator's offset now; train/trainer/best_model.h
// says why in this order); loss.png is redrawn; and then the stop reason (logged) or the stop
// signal (the interruption message is logged) ends the run.
AfterEvaluation finish_evaluation(const RunOutputs& out, TrainerState& state,
                                  const EvaluationOutcome& outcome);

}  // namespace qkv::train
