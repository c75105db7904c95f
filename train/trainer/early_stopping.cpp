#include "train/trainer/early_stopping.h"

#include <cstdio>

#include "engine/error.h"

namespace qkv::train {

EarlyStopping::EarlyStopping(const Config& config, const std::vector<std::string>& measured,
                             Better better)
    : metric_(config.target_metric.empty() ? measured.front() : config.target_metric),
      better_(better),
      target_value_(config.target_value),
      patience_(config.patience) {
  std::string names;
  bool known = false;
  for (const auto& m : measured) {
    names += (names.empty() ? "" : ", ") + m;
    known = known || m == metric_;
  }
  QKV_CHECK(known, "target_metric", "'", metric_, "' is not measured when training task '",
            config.task, "' (it measures: ", names, ")");
  // The metrics that grow are fractions (exact match, accuracy); the one that falls is a loss.
  QKV_CHECK(better_ == Better::lower || target_value_ <= 1, "target_value", target_value_,
            " is beyond ", metric_, ", a fraction from 0 to 1");
}

bool EarlyStopping::improves(double value, double best) const {
  if (best < 0) return true;  // no evaluation yet: every metric is >= 0
  return better_ == Better::higher ? value > best : value < best;
}

std::string EarlyStopping::update(const std::map<std::string, double>& metrics,
                                  TrainerState& state) const {
  auto it = metrics.find(metric_);
  QKV_CHECK(it != metrics.end(), "EarlyStopping", "the evaluation did not report '", metric_, "'");
  const double value = it->second;
  if (improves(value, state.best_metric)) {
    state.best_metric = value;
    state.evals_since_best = 0;
  } else {
    ++state.evals_since_best;
  }
  char why[160] = "";
  const bool reached = better_ == Better::higher ? value >= target_value_ : value <= target_value_;
  if (target_value_ > 0 && reached)
    std::snprintf(why, sizeof why, "target %s %.4f reached (%.4f): stopping early", metric_.c_str(),
                  target_value_, value);
  else if (patience_ > 0 && state.evals_since_best >= patience_)
    std::snprintf(why, sizeof why,
                  "no better %s for %lld evaluations (best %.4f): stopping early (patience)",
                  metric_.c_str(), (long long)state.evals_since_best, state.best_metric);
  return why;
}

}  // namespace qkv::train
