#include "nn/schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "engine/error.h"

namespace qkv::nn {

double LrSchedule::at(int64_t step) const {
  QKV_CHECK(step >= 1, "LrSchedule", "steps count from 1, got ", step);
  if (kind == "constant") return lr;
  if (kind == "noam") {
    QKV_CHECK(warmup_steps > 0, "LrSchedule", "noam needs warmup_steps > 0");
    double s = double(step);
    return lr / std::sqrt(double(d_model)) *
           std::min(1 / std::sqrt(s), s * std::pow(double(warmup_steps), -1.5));
  }
  QKV_CHECK(kind == "warmup_cosine" || kind == "warmup_linear", "LrSchedule", "unknown kind '",
            kind, "' (constant, warmup_cosine, warmup_linear, noam)");
  QKV_CHECK(total_steps > warmup_steps, "LrSchedule", kind, " needs total_steps (", total_steps,
            ") > warmup_steps (", warmup_steps, ")");
  if (step <= warmup_steps) return lr * double(step) / double(warmup_steps);
  double progress = std::min(1.0, double(step - warmup_steps) / double(total_steps - warmup_steps));
  double shape =
      kind == "warmup_cosine" ? 0.5 * (1 + std::cos(std::numbers::pi * progress)) : 1 - progress;
  return min_lr + (lr - min_lr) * shape;
}

double LrSchedule::factor(int64_t step) const {
  QKV_CHECK(lr > 0, "LrSchedule", "a factor needs lr > 0, got ", lr);
  return at(step) / lr;
}

}  // namespace qkv::nn
