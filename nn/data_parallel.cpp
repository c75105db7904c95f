#include "nn/data_parallel.h"

#include <chrono>
#include <optional>
#include <unordered_set>
#include <utility>

#include "engine/error.h"
#include "engine/ops.h"
#include "engine/post_accumulate_grad_hook.h"

namespace qkv::nn {

struct DataParallel::BucketState {
  std::vector<bool> ready;  // per parameter of the bucket: its gradient is complete
  size_t ready_count = 0;
  Tensor flat;  // the bucket's gradients, flattened, while it is being reduced
  std::unique_ptr<CollectiveWork> work;
  bool done = false;  // its reduction was seen complete
};

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

// Runs one call of the group, adding its time to the timings.
template <typename F>
auto DataParallel::in_collective(F&& call) {
  const double start = now_seconds();
  struct Add {
    DataParallel& dp;
    double start;
    ~Add() {
      const double took = now_seconds() - start;
      dp.timings_.in_collectives += took;
      if (dp.in_backward_) dp.timings_.in_collectives_during_backward += took;
    }
  } add{*this, start};
  return call();
}

DataParallel::DataParallel(std::vector<Tensor> parameters, std::shared_ptr<ProcessGroup> group,
                           DataParallelOptions options)
    : parameters_(std::move(parameters)), group_(std::move(group)), options_(options) {
  QKV_CHECK(group_ != nullptr, "DataParallel", "needs a process group");
  QKV_CHECK(!parameters_.empty(), "DataParallel", "has no parameters to reduce");
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& p = parameters_[i];
    QKV_CHECK(p.defined() && p.requires_grad() && p.is_leaf(), "DataParallel", "parameter ", i,
              " is not a leaf tensor that requires grad");
    QKV_CHECK(p.dtype() == DType::f32 || p.dtype() == DType::f64, "DataParallel", "parameter ", i,
              " is ", dtype_name(p.dtype()), "; gradients are reduced in float32 or float64");
    QKV_CHECK(index_of_.emplace(p.impl(), i).second, "DataParallel", "parameter ", i,
              " is listed twice");
  }
  // Reverse order: backward reaches the last parameters first.
  bucket_of_.resize(parameters_.size());
  slot_of_.resize(parameters_.size());
  size_t bytes = 0;
  for (size_t i = parameters_.size(); i-- > 0;) {
    const Tensor& p = parameters_[i];
    bool fits = !buckets_.empty() && bytes < options_.bucket_bytes &&
                p.dtype() == parameters_[buckets_.back().parameters.front()].dtype() &&
                p.device() == parameters_[buckets_.back().parameters.front()].device();
    if (!fits) {
      buckets_.emplace_back();
      bytes = 0;
    }
    slot_of_[i] = buckets_.back().parameters.size();
    buckets_.back().parameters.push_back(i);
    buckets_.back().numel += p.numel();
    bytes += size_t(p.numel()) * dtype_size(p.dtype());
    bucket_of_[i] = buckets_.size() - 1;
  }
  state_.resize(buckets_.size());
  check_same_parameters_on_every_rank();
}

DataParallel::~DataParallel() = default;

void DataParallel::check_same_parameters_on_every_rank() const {
  if (group_->size() == 1) return;
  std::vector<int64_t> sizes;
  for (const Tensor& p : parameters_) sizes.push_back(p.numel());
  Tensor counts = group_->allgather(tensor_i64({int64_t(sizes.size())}));
  std::vector<int64_t> count_of = counts.to_vector<int64_t>();
  for (int r = 0; r < group_->size(); ++r)
    QKV_CHECK(count_of[r] == int64_t(sizes.size()), "DataParallel", "rank ", r, " has ",
              count_of[r], " parameters, rank ", group_->rank(), " has ", sizes.size(),
              " (every rank must build the same model)");
  std::vector<int64_t> all = group_->allgather(tensor_i64(sizes)).to_vector<int64_t>();
  for (int r = 0; r < group_->size(); ++r)
    for (size_t i = 0; i < sizes.size(); ++i)
      QKV_CHECK(all[r * sizes.size() + i] == sizes[i], "DataParallel", "parameter ", i, " has ",
                all[r * sizes.size() + i], " elements on rank ", r, " and ", sizes[i], " on rank ",
                group_->rank(), " (every rank must build the same model)");
}

void DataParallel::broadcast_parameters(int root) {
  NoGrad no_grad;
  for (const Tensor& p : parameters_) {
    Tensor buffer = p.contiguous();
    group_->broadcast(buffer, root);
    if (!buffer.same_storage(p)) copy_(p, buffer);
  }
}

void DataParallel::backward(const Tensor& loss) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    state_[b] = BucketState{};
    state_[b].ready.assign(buckets_[b].parameters.size(), false);
  }
  next_to_start_ = 0;
  timings_ = Timings{};
  backward_start_ = now_seconds();
  last_done_ = backward_start_;
  in_backward_ = true;
  {
    std::optional<PostAccumulateGradHook> hook;
    if (options_.overlap) {
      hook.emplace([this](const Tensor& leaf) { on_gradient_ready(leaf); });
      mark_unreachable_ready(loss);
    }
    loss.backward();
  }
  in_backward_ = false;
  const double backward_end = now_seconds();
  timings_.backward = backward_end - backward_start_;
  started_during_backward_ = next_to_start_;
  while (next_to_start_ < buckets_.size()) start_bucket(next_to_start_++);
  for (size_t b = 0; b < buckets_.size(); ++b) finish_bucket(b);
  timings_.after_backward = now_seconds() - backward_end;
  timings_.last_reduction_before_backward_end = backward_end - last_done_;
}

void DataParallel::mark_unreachable_ready(const Tensor& loss) {
  std::unordered_set<TensorImpl*> reached{loss.impl()};
  std::unordered_set<Node*> seen;
  std::vector<Node*> stack;
  if (loss.grad_fn()) stack.push_back(loss.grad_fn().get());
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    if (!seen.insert(node).second) continue;
    for (size_t i = 0; i < node->inputs.size(); ++i) {
      if (node->input_nodes[i])
        stack.push_back(node->input_nodes[i].get());
      else if (node->inputs[i])
        reached.insert(node->inputs[i].get());
    }
  }
  for (const Tensor& p : parameters_)
    if (!reached.count(p.impl())) on_gradient_ready(p);
}

void DataParallel::on_gradient_ready(const Tensor& leaf) {
  auto found = index_of_.find(leaf.impl());
  if (found == index_of_.end()) return;  // a leaf that is not one of ours (an input)
  size_t i = found->second, b = bucket_of_[i];
  BucketState& s = state_[b];
  if (s.ready[slot_of_[i]]) return;
  s.ready[slot_of_[i]] = true;
  ++s.ready_count;
  while (next_to_start_ < buckets_.size() &&
         state_[next_to_start_].ready_count == buckets_[next_to_start_].parameters.size())
    start_bucket(next_to_start_++);
  // MPI moves a non-blocking collective along only inside MPI calls: give the started ones a turn.
  for (size_t k = 0; k < next_to_start_; ++k) {
    BucketState& started = state_[k];
    if (!started.done && in_collective([&] { return started.work->test(); })) {
      started.done = true;
      last_done_ = now_seconds();
    }
  }
}

void DataParallel::start_bucket(size_t b) {
  NoGrad no_grad;
  std::vector<Tensor> parts;
  for (size_t i : buckets_[b].parameters) {
    const Tensor& p = parameters_[i];
    Tensor g = p.grad();
    parts.push_back(g.defined() ? reshape(g, {-1}) : zeros({p.numel()}, {p.dtype(), p.device()}));
  }
  BucketState& s = state_[b];
  s.flat = parts.size() == 1 ? clone(parts[0]) : cat(parts, 0);
  s.work = in_collective([&] { return group_->start_allreduce_sum(s.flat); });
}

void DataParallel::finish_bucket(size_t b) {
  NoGrad no_grad;
  BucketState& s = state_[b];
  in_collective([&] { s.work->wait(); });
  if (!s.done) {
    s.done = true;
    last_done_ = now_seconds();
  }
  Tensor reduced = s.flat;
  if (options_.average && group_->size() > 1)
    reduced = div(reduced, scalar_tensor(group_->size(), {reduced.dtype(), reduced.device()}));
  int64_t offset = 0;
  for (size_t i : buckets_[b].parameters) {
    Tensor& p = parameters_[i];
    p.set_grad(reshape(narrow(reduced, 0, offset, p.numel()), p.shape()));
    offset += p.numel();
  }
  s.flat = Tensor();
  s.work.reset();
}

}  // namespace qkv::nn
