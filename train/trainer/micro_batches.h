// One optimizer step's gradients from micro-batches of the global batch: `--accumulate N` on one
// process, and the shares of the ranks of `mpirun -np N` (nn::DataParallel).
//
// The global batch (batch_size examples, as plan_batches makes it) is cut into
// world_size * accumulate contiguous micro-batches whose sizes differ by at most one; rank r
// takes micro-batches r * accumulate ... r * accumulate + accumulate - 1. Each micro-batch's loss
// is its summed loss divided by the global batch's number of loss terms (target tokens, or
// examples; all-reduced), so the gradients add up to the gradient of the global batch's mean.
//
// Dropout draws by example (engine/example_draws.h): every micro-batch of a step starts at the
// step's generator offset, and a mask row is drawn from the id of its example (its index in the
// training set), so an example gets the same masks whichever micro-batch, rank or row holds it,
// and the same as in the unsplit batch (whole_batch). Every step then moves the generator
// kStepCounters past its start, however it was cut.
//
// What holds bit for bit: `mpirun -np N` with accumulate 1 and one process with --accumulate N
// compute the same gradients, losses and updates: the same micro-batches draw the same masks, one
// process adds the micro-batches' gradients in order, ((g0 + g1) + g2) ..., and the ordered
// allreduce adds the ranks' in rank order, the same sum. Against the unsplit batch the masks are
// the same too; only the order of the additions differs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/process_group.h"
#include "engine/tensor.h"
#include "nn/data_parallel.h"

namespace qkv::train {

// Generator counters reserved for one step (a micro-batch or whole batch that draws more is
// refused, naming the step). Dropout by example takes one per call; any other fill takes one per
// element, and draws the same numbers in every micro-batch of the step.
constexpr uint64_t kStepCounters = uint64_t(1) << 36;

// The example ids ExampleDraws takes for a batch of training-set `indices`.
std::vector<uint64_t> example_ids(const std::vector<size_t>& indices);

// `indices` cut into `parts` contiguous pieces, in order, the first ones one longer when the size
// does not divide (the last pieces are empty when there are fewer indices than parts).
std::vector<std::vector<size_t>> split_micro_batches(const std::vector<size_t>& indices,
                                                     int64_t parts);

// What a step needs of its trainer: load a micro-batch, count its loss terms, and its loss summed
// over the terms and divided by `global_terms`.
struct MicroBatchHooks {
  std::function<void(const std::vector<size_t>& indices)> load_batch;
  std::function<int64_t()> loss_terms;
  std::function<Tensor(double global_terms)> summed_loss;
};

class MicroBatchSteps {
 public:
  // `parameters` are the optimizer's. Collective when the group has more than one rank: every
  // rank constructs it, and its parameters take rank 0's values.
  MicroBatchSteps(std::vector<Tensor> parameters, std::shared_ptr<ProcessGroup> group,
                  int64_t accumulate, bool overlap);

  // Whether steps go through micro-batches (more than one rank, or accumulate > 1).
  bool active() const { return micro_batches() > 1; }
  int64_t micro_batches() const { return int64_t(group_->size()) * accumulate_; }
  ProcessGroup& group() const { return *group_; }

  // Forward and backward of this rank's micro-batches of the global batch `indices`: on return
  // every parameter's .grad holds the global batch's gradient (the same bits on every rank) and
  // the generator is past the step. Returns the global batch's loss and number of loss terms
  // (the same on every rank). `reduce` false runs this rank's share without the reduction (the
  // non-finite step's replay).
  struct Result {
    double loss = 0;
    int64_t terms = 0;
  };
  Result step(int64_t step, const std::vector<size_t>& indices, const MicroBatchHooks& hooks,
              bool reduce = true);

  // One process's unsplit step: runs `forward_backward` (the whole batch `indices`) with the
  // dropout draws step() gives the same examples, moves the generator past the step, and returns
  // what forward_backward returns.
  double whole_batch(int64_t step, const std::vector<size_t>& indices,
                     const std::function<double()>& forward_backward) const;

  // Throws unless every rank holds the same parameters, bit for bit (a hash of them is
  // all-gathered): "train: after step 12 the parameters of rank 1 differ from rank 0's".
  // Collective.
  void check_parameters_agree(int64_t step) const;

  // "data parallel: 2 ranks, 3 gradient buckets, 3 of them started during the last step's
  // backward; rank 0's last step: ... ms in collectives, ..." (nn::DataParallel::Timings), or ""
  // for one process.
  std::string describe() const;

  // How many gradient buckets the last step() started reducing while backward was running.
  size_t last_buckets_overlapped() const {
    return dp_ ? dp_->buckets_started_during_backward() : 0;
  }

 private:
  std::vector<Tensor> parameters_;
  std::shared_ptr<ProcessGroup> group_;
  int64_t accumulate_;
  std::unique_ptr<nn::DataParallel> dp_;
};

}  // namespace qkv::train
