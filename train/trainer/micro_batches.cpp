#include "train/trainer/micro_batches.h"

#include <cstdio>
#include <cstring>
#include <string>

#include "engine/error.h"
#include "engine/example_draws.h"
#include "engine/ops.h"
#include "engine/random.h"

namespace qkv::train {

std::vector<std::vector<size_t>> split_micro_batches(const std::vector<size_t>& indices,
                                                     int64_t parts) {
  std::vector<std::vector<size_t>> pieces;
  pieces.resize(size_t(parts));
  const size_t n = indices.size(), base = n / size_t(parts), longer = n % size_t(parts);
  size_t at = 0;
  for (size_t p = 0; p < pieces.size(); ++p) {
    const size_t length = base + (p < longer ? 1 : 0);
    pieces[p].assign(indices.begin() + at, indices.begin() + at + length);
    at += length;
  }
  return pieces;
}

std::vector<uint64_t> example_ids(const std::vector<size_t>& indices) {
  return std::vector<uint64_t>(indices.begin(), indices.end());
}

namespace {

void check_step_counters(int64_t step, uint64_t used, const std::string& what) {
  QKV_CHECK(used <= kStepCounters, "train", "step ", step, ": ", what,
            " drew more random numbers than a step may (", kStepCounters, " counters)");
}

}  // namespace

MicroBatchSteps::MicroBatchSteps(std::vector<Tensor> parameters,
                                 std::shared_ptr<ProcessGroup> group, int64_t accumulate,
                                 bool overlap)
    : parameters_(std::move(parameters)), group_(std::move(group)), accumulate_(accumulate) {
  if (group_->size() > 1) {
    dp_ = std::make_unique<nn::DataParallel>(
        parameters_, group_, nn::DataParallelOptions{.overlap = overlap, .average = false});
    dp_->broadcast_parameters(0);
  }
}

namespace {

// The parameters' gradients, a zero tensor for one the backward did not reach (a reduction over
// ranks gives it zeros too, and the optimizer then treats it alike on every path).
std::vector<Tensor> gradients_or_zeros(const std::vector<Tensor>& parameters) {
  std::vector<Tensor> grads;
  grads.reserve(parameters.size());
  for (const Tensor& p : parameters) {
    Tensor g = p.grad();
    grads.push_back(g.defined() ? g : zeros_like(p));
  }
  return grads;
}

}  // namespace

MicroBatchSteps::Result MicroBatchSteps::step(int64_t step, const std::vector<size_t>& indices,
                                              const MicroBatchHooks& hooks, bool reduce) {
  const auto pieces = split_micro_batches(indices, micro_batches());
  const size_t first = size_t(group_->rank() * accumulate_);
  const bool across_ranks = dp_ && reduce;

  // The loss is normalised by the global batch's terms, so that the micro-batches' gradients add
  // up to the global mean's.
  int64_t my_terms = 0;
  for (int64_t j = 0; j < accumulate_; ++j) {
    const auto& piece = pieces[first + size_t(j)];
    if (piece.empty()) continue;
    hooks.load_batch(piece);
    my_terms += hooks.loss_terms();
  }
  Tensor terms = scalar_tensor(double(my_terms), TensorOptions{}.with(DType::i64));
  if (across_ranks) group_->allreduce_sum(terms);
  const int64_t global_terms = int64_t(terms.item());
  QKV_CHECK(global_terms > 0, "train", "step ", step, ": the batch has no loss terms");

  Generator& gen = default_generator();
  const uint64_t step_base = gen.offset();
  double my_loss = 0;
  std::vector<Tensor> sum;  // this process's micro-batches' gradients, added in order
  for (int64_t j = 0; j < accumulate_; ++j) {
    const size_t k = first + size_t(j);
    gen.set_offset(step_base);  // every micro-batch: its examples' masks, not its own
    const ExampleDraws draws(gen, example_ids(pieces[k]));
    for (Tensor& p : parameters_) p.zero_grad();
    Tensor loss;
    if (!pieces[k].empty()) {
      hooks.load_batch(pieces[k]);
      loss = hooks.summed_loss(double(global_terms));
    } else {  // a short last batch: this micro-batch adds nothing, but the ranks still meet
      loss = zeros({}).requires_grad_();
    }
    if (across_ranks && j + 1 == accumulate_) {
      // the last micro-batch: the reduction adds this rank's total to the others'
      if (!sum.empty()) {
        for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].set_grad(sum[i]);
      }
      dp_->backward(loss);
    } else {
      loss.backward();
    }
    check_step_counters(step, gen.offset() - step_base, "micro-batch " + std::to_string(k));
    my_loss += loss.item();
    if (!(across_ranks && j + 1 == accumulate_)) {
      std::vector<Tensor> g = gradients_or_zeros(parameters_);
      if (sum.empty()) {
        sum = std::move(g);
      } else {
        for (size_t i = 0; i < sum.size(); ++i) sum[i] = add(sum[i], g[i]);
      }
    }
  }
  if (!(across_ranks)) {
    for (size_t i = 0; i < parameters_.size(); ++i) parameters_[i].set_grad(sum[i]);
  }
  gen.set_offset(step_base + kStepCounters);

  Tensor loss = scalar_tensor(my_loss, TensorOptions{}.with(DType::f64));
  if (across_ranks) group_->allreduce_sum(loss);
  return {loss.item(), global_terms};
}

double MicroBatchSteps::whole_batch(int64_t step, const std::vector<size_t>& indices,
                                    const std::function<double()>& forward_backward) const {
  Generator& gen = default_generator();
  const uint64_t step_base = gen.offset();
  double result = 0;
  {
    const ExampleDraws draws(gen, example_ids(indices));
    result = forward_backward();
  }
  check_step_counters(step, gen.offset() - step_base, "the batch");
  gen.set_offset(step_base + kStepCounters);
  return result;
}

std::string MicroBatchSteps::describe() const {
  if (!dp_) return "";
  const nn::DataParallel::Timings& t = dp_->last_timings();
  char timings[200];
  std::snprintf(timings, sizeof timings,
                "; rank %d's last step: %.2f ms in collectives, %.2f of them during backward, "
                "%.2f ms from the end of backward to the reduced gradients",
                group_->rank(), t.in_collectives * 1e3, t.in_collectives_during_backward * 1e3,
                t.after_backward * 1e3);
  return "data parallel: " + std::to_string(group_->size()) + " ranks, " +
         std::to_string(dp_->buckets().size()) + " gradient buckets, " +
         std::to_string(dp_->buckets_started_during_backward()) +
         " of them started during the last step's backward" + timings;
}

void MicroBatchSteps::check_parameters_agree(int64_t step) const {
  if (group_->size() == 1) return;
  uint64_t hash = 1469598103934665603ull;  // FNV-1a over the values' bits
  for (const Tensor& p : parameters_) {
    for (double v : p.to_vector<double>()) {
      uint64_t bits = 0;
      std::memcpy(&bits, &v, sizeof bits);
      hash = (hash ^ bits) * 1099511628211ull;
    }
  }
  int64_t as_signed = 0;
  std::memcpy(&as_signed, &hash, sizeof as_signed);
  const std::vector<int64_t> hashes =
      group_
          ->allgather(scalar_tensor(double(as_signed & ((int64_t(1) << 52) - 1)),
                                    TensorOptions{}.with(DType::i64)))
          .to_vector<int64_t>();
  for (size_t r = 1; r < hashes.size(); ++r)
    QKV_CHECK(hashes[r] == hashes[0], "train", "after step ", step, " the parameters of rank ", r,
              " differ from rank 0's");
}

}  // namespace qkv::train
