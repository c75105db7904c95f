// Learning-rate schedules as plain functions of the step number (1 for the first update).
//
//   constant:       lr
//   warmup_cosine:  lr * step / warmup while step <= warmup, then a half cosine from lr down to
//                   min_lr at total_steps (and min_lr after)
//   warmup_linear:  the same warmup, then a straight line down to min_lr at total_steps
//   noam:           lr * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5)  ("Attention Is All
//                   You Need"; lr is the paper's scale factor, 1 there)
#pragma once

#include <cstdint>
#include <string>

namespace qkv::nn {

struct LrSchedule {
  std::string kind = "constant";  // constant | warmup_cosine | warmup_linear | noam
  double lr = 1e-3;
  int64_t warmup_steps = 0;
  int64_t total_steps = 0;
  double min_lr = 0;
  int64_t d_model = 512;  // noam only

  double at(int64_t step) const;
  // at(step) / lr: the multiplier an optimizer's scale_lr applies to each group's own lr (what a
  // torch LambdaLR lambda returns), so groups with other lrs follow the same curve.
  double factor(int64_t step) const;
};

}  // namespace qkv::nn
