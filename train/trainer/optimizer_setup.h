// The optimizer and learning-rate schedule a run's Config names (--optimizer, --schedule, --lr,
// --warmup, --weight-decay, --beta1/--beta2), built the same way by every trainer.
#pragma once

#include <memory>

#include "nn/module.h"
#include "nn/optim.h"
#include "nn/schedule.h"
#include "train/config.h"

namespace qkv::train {

// --schedule over --steps; the warmup is at most half the run, so a short run still decays.
nn::LrSchedule make_schedule(const Config& config);
// AdamW or SGD (momentum 0.9) over the two groups of nn::weight_decay_groups: --weight-decay on
// the weight matrices and kernels, none on biases, norm weights and embedding tables.
std::unique_ptr<nn::Optimizer> make_optimizer(const Config& config, const nn::Module& model);

}  // namespace qkv::train
