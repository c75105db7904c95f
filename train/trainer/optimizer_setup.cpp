#include "train/trainer/optimizer_setup.h"

#include <algorithm>

#include "nn/param_groups.h"
#include "train/trainer/run_choices.h"

namespace qkv::train {

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"constant", "linear", "cosine", "noam"};
  return names;
}

const std::vector<std::string>& optimizer_names() {
  static const std::vector<std::string> names = {"adamw", "sgd"};
  return names;
}

nn::LrSchedule make_schedule(const Config& c) {
  nn::LrSchedule s;
  s.kind = c.schedule == "linear"   ? "warmup_linear"
           : c.schedule == "cosine" ? "warmup_cosine"
                                    : c.schedule;  // constant, noam
  s.lr = c.lr;
  s.warmup_steps = std::min(c.warmup, c.steps / 2);  // a short run still gets its decay
  s.total_steps = c.steps;
  s.min_lr = c.schedule == "constant" ? c.lr : c.lr * 0.01;
  s.d_model = c.d_model;
  return s;
}

std::unique_ptr<nn::Optimizer> make_optimizer(const Config& c, const nn::Module& model) {
  // Biases, norm weights and embedding tables get no weight decay (nn/param_groups.h).
  std::vector<nn::ParamGroup> groups = nn::weight_decay_groups(model, c.weight_decay);
  if (c.optimizer == "sgd")
    return std::make_unique<nn::SGD>(
        std::move(groups), c.lr,
        nn::SGDOptions{.momentum = 0.9, .dampening = 0, .weight_decay = 0, .nesterov = false});
  return std::make_unique<nn::AdamW>(
      std::move(groups), c.lr,
      nn::AdamOptions{.beta1 = c.beta1, .beta2 = c.beta2, .eps = 1e-8, .weight_decay = 0});
}

}  // namespace qkv::train
