// When a run stops before its last step: the metric the config names (target_metric) reaches
// target_value, or `patience` evaluations in a row fail to improve on the best one so far.
// "Better" is higher for a score (exact_match, accuracy) and lower for a loss (valid_loss).
#pragma once

#include <map>
#include <string>
#include <vector>

#include "train/config.h"
#include "train/trainer/checkpoint.h"

namespace qkv::train {

// Which way a validation metric improves.
enum class Better { higher, lower };

class EarlyStopping {
 public:
  // `measured`: the validation metrics this trainer reports, its main one first (which an empty
  // target_metric means), all improving the way `better` says. Throws qkv::Error naming
  // target_metric and those when it is not one.
  EarlyStopping(const Config& config, const std::vector<std::string>& measured,
                Better better = Better::higher);

  const std::string& metric() const { return metric_; }
  // Records one evaluation (metric name -> value): updates state.best_metric and
  // state.evals_since_best (both checkpointed, so a resumed run keeps counting) and returns why
  // the run should stop, or "" to go on.
  std::string update(const std::map<std::string, double>& metrics, TrainerState& state) const;

 private:
  // Whether `value` improves on `best` (every value improves on none: best < 0).
  bool improves(double value, double best) const;

  std::string metric_;
  Better better_;
  double target_value_;
  int64_t patience_;
};

}  // namespace qkv::train
