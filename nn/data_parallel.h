// Data-parallel gradients: every rank runs the same model on its own share of the batch, and
// after backward each parameter's .grad is the same on every rank - the ranks' gradients added in
// rank order (PyTorch's DistributedDataParallel, without wrapping the module).
//
// The parameters are grouped, in reverse order, into buckets: flat buffers of about
// bucket_bytes. Backward produces gradients roughly in reverse parameter order (the last layer's
// first), so the first bucket is complete early. When backward has finished a bucket's last
// gradient (engine/autograd.h, PostAccumulateGradHook), the bucket is copied into one flat
// tensor and its allreduce is started, non-blocking, while backward goes on through the earlier
// layers. After backward every bucket is waited for and its parameters' .grad become views of
// the reduced buffer. Buckets are started in bucket order on every rank (a later bucket that is
// ready first waits for the earlier ones), because MPI needs the same collectives in the same
// order everywhere; the sum itself runs in rank order (engine/process_group.h), so overlap on or
// off, and any bucket size, give the same bits.
//
//   nn::DataParallel dp(model.parameters(), ProcessGroup::from_environment());
//   dp.broadcast_parameters();         // every rank starts from rank 0's weights
//   for (...) {
//     optimizer.zero_grad();
//     dp.backward(loss_on_my_shard);   // loss.backward() + the reduction
//     optimizer.step();                // same gradients, same step on every rank
//   }
//
// Gradient accumulation: call loss.backward() for all micro-batches but the last, and
// dp.backward(loss) for the last; .grad holds the local total when the bucket is reduced.
#pragma once

#include <memory>
#include <unordered_map>
#include <vector>

#include "engine/process_group.h"
#include "engine/tensor.h"

namespace qkv::nn {

struct DataParallelOptions {
  // A bucket is closed once it holds at least this many bytes of gradients (PyTorch's default is
  // 25 MB; smaller buckets start communicating earlier). 0 puts each parameter in its own bucket.
  size_t bucket_bytes = size_t(4) << 20;
  // Reduce each bucket as soon as its gradients are complete (true), or all of them after
  // backward has returned (false, for comparison): the same bits either way.
  bool overlap = true;
  // Divide the sum by the number of ranks (PyTorch's DDP), or keep the sum: when each rank's
  // loss is already divided by the global count of tokens, the sum is the global mean's gradient.
  bool average = true;
};

class DataParallel {
 public:
  // The parameters (leaves with requires_grad; float32 or float64) and the ranks to reduce over.
  // Collective: every rank constructs it with the same parameters' sizes (checked).
  DataParallel(std::vector<Tensor> parameters, std::shared_ptr<ProcessGroup> group,
               DataParallelOptions options = {});
  ~DataParallel();
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // Every rank's parameters take rank `root`'s values.
  void broadcast_parameters(int root = 0);

  // loss.backward(), and the reduction: on return every parameter's .grad is the rank-order sum
  // of the ranks' gradients (divided by the number of ranks when averaging), the same bits on
  // every rank. A parameter that no rank's loss reached gets a zero gradient.
  void backward(const Tensor& loss);

  struct Bucket {
    std::vector<size_t> parameters;  // indices into the constructor's list, reverse order
    int64_t numel = 0;
  };
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // How many buckets the last backward() started before loss.backward() returned (0 without
  // overlap): the reductions that overlapped the rest of backward.
  size_t buckets_started_during_backward() const { return started_during_backward_; }
  ProcessGroup& group() const { return *group_; }

  // Where the last backward() spent its time, in seconds on this rank's steady clock.
  struct Timings {
    double backward = 0;                        // loss.backward(), the hooks' work included
    double in_collectives = 0;                  // inside the group's calls: start, test and wait
    double in_collectives_during_backward = 0;  // ... of which before loss.backward() returned
    double after_backward = 0;  // from loss.backward() returning until every bucket is reduced
    // When the last bucket's reduction was seen complete, in seconds before loss.backward()
    // returned: positive when all communication ended inside backward, negative by how much it
    // ran past it.
    double last_reduction_before_backward_end = 0;
  };
  const Timings& last_timings() const { return timings_; }

 private:
  // Parameters this backward cannot reach are complete from its start (PyTorch's
  // find_unused_parameters): a bucket holding one would otherwise hold back every later bucket
  // until backward has returned.
  void mark_unreachable_ready(const Tensor& loss);
  void on_gradient_ready(const Tensor& leaf);
  void start_bucket(size_t b);
  void finish_bucket(size_t b);
  void check_same_parameters_on_every_rank() const;

  std::vector<Tensor> parameters_;
  std::shared_ptr<ProcessGroup> group_;
  DataParallelOptions options_;
  std::vector<Bucket> buckets_;
  std::unordered_map<TensorImpl*, size_t> index_of_;  // parameter -> its position
  std::vector<size_t> bucket_of_;                     // parameter position -> its bucket
  std::vector<size_t> slot_of_;                       // ... and its place in the bucket

  // State of one backward().
  struct BucketState;
  std::vector<BucketState> state_;
  size_t next_to_start_ = 0;
  size_t started_during_backward_ = 0;
  Timings timings_;
  bool in_backward_ = false;
  double backward_start_ = 0;  // seconds on the steady clock
  double last_done_ = 0;       // when the last bucket was seen complete, the same clock
  template <typename F>
  auto in_collective(F&& call);
};

}  // namespace qkv::nn
