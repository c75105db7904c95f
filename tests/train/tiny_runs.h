// The small training runs the trainer tests share (each takes seconds on one thread), and the
// loss curve a run leaves in metrics.jsonl.
#pragma once

#include <cstdint>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "train/config.h"

namespace qkv::train::test {

// The copy task at d_model 16 on 200 examples, evaluated once, at the last step: for what a run
// writes, refuses and resumes, not for what it learns.
inline Config tiny_copy(const std::string& out, int64_t steps) {
  Config c;
  c.task = "copy";
  c.train_size = 200, c.valid_size = 10, c.test_size = 10;
  c.min_length = 3, c.max_length = 5;
  c.d_model = 16, c.heads = 2, c.layers = 1, c.ff_dim = 32, c.dropout = 0.1;
  c.batch_size = 16, c.steps = steps, c.eval_every = steps, c.log_every = 1;
  c.threads = 1, c.pictures = false;
  c.out = out;
  return c;
}

// Settings shared by the runs whose curves are compared step by step: the learning rate is
// constant after warm-up, so a run of 20 steps and one of 30 share their first 20 learning rates,
// and one thread makes the curves bitwise reproducible.
inline void set_curve_schedule(Config& c, const std::string& out, int64_t steps) {
  c.batch_size = 32, c.steps = steps, c.eval_every = 10, c.log_every = 1;
  c.lr = 3e-3, c.warmup = 5, c.schedule = "constant";
  c.threads = 1;
  c.pictures = false;
  c.out = out;
}

// The copy task at d_model 32 on 400 examples, with the curve schedule.
inline Config tiny_copy_curve(const std::string& out, int64_t steps) {
  Config c;
  c.task = "copy";
  c.train_size = 400, c.valid_size = 20, c.test_size = 20;
  c.min_length = 3, c.max_length = 5;
  c.d_model = 32, c.heads = 2, c.layers = 1, c.ff_dim = 64, c.dropout = 0.1;
  set_curve_schedule(c, out, steps);
  return c;
}

// The order task (classification, two layers, no dropout) with the curve schedule.
inline Config tiny_order_curve(const std::string& out, int64_t steps) {
  Config c;
  c.task = "order";
  c.train_size = 400, c.valid_size = 50, c.test_size = 50;
  c.min_length = 8, c.max_length = 16;
  c.d_model = 32, c.heads = 2, c.layers = 2, c.ff_dim = 64, c.dropout = 0.0;
  set_curve_schedule(c, out, steps);
  return c;
}

// (step, loss) of every training log line in a run's metrics.jsonl.
inline std::vector<std::pair<int64_t, double>> loss_curve(const std::string& run) {
  std::vector<std::pair<int64_t, double>> curve;
  std::ifstream in(run + "/metrics.jsonl");
  std::string line;
  while (std::getline(in, line)) {
    auto j = nlohmann::json::parse(line);
    if (j.contains("loss")) curve.emplace_back(j["step"].get<int64_t>(), j["loss"].get<double>());
  }
  return curve;
}

// The losses alone, in step order.
inline std::vector<double> losses(const std::string& run) {
  std::vector<double> out;
  for (const auto& point : loss_curve(run)) out.push_back(point.second);
  return out;
}

}  // namespace qkv::train::test
