#include "cuda/nccl_process_group.h"

#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <utility>

#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_backend_impl.h"
#include "engine/error.h"
#include "engine/ops.h"

namespace qkv::cuda {

namespace {

class QueuedWork final : public CollectiveWork {  // already on the stream, in order
 public:
  bool test() override { return true; }
  void wait() override {}
};

ncclDataType_t nccl_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return ncclFloat32;
    case DType::f64:
      return ncclFloat64;
    default:
      return ncclInt64;  // check_reducible admits nothing else
  }
}

class NcclProcessGroup final : public ProcessGroup {
 public:
  explicit NcclProcessGroup(std::shared_ptr<ProcessGroup> bootstrap)
      : bootstrap_(std::move(bootstrap)), rank_(bootstrap_->rank()), size_(bootstrap_->size()) {
    QKV_CHECK(init(), "nccl process group", "needs a GPU: ", status());
    ncclUniqueId id{};
    if (rank_ == 0) check(ncclGetUniqueId(&id), "nccl process group", "ncclGetUniqueId");
    Tensor carrier = zeros({int64_t((sizeof id + 7) / 8)}, {.dtype = DType::i64});
    std::memcpy(carrier.raw_data(), &id, sizeof id);
    bootstrap_->broadcast(carrier, 0);
    std::memcpy(&id, carrier.raw_data(), sizeof id);
    check(ncclCommInitRank(&comm_, size_, id, rank_), "nccl process group", "ncclCommInitRank");
  }
  ~NcclProcessGroup() override {
    if (comm_) ncclCommDestroy(comm_);
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string name() const override { return "nccl"; }

  std::unique_ptr<CollectiveWork> start_allreduce_sum(const Tensor& data) override {
    check_reducible(data, Device::cuda(), "NCCL");
    NoGrad no_grad;
    // Equal chunks (NCCL's allgather has no per-rank counts): the tensor is padded with zeros.
    int64_t n = data.numel(), chunk = (n + size_ - 1) / size_;
    size_t chunk_bytes = size_t(chunk) * dtype_size(data.dtype());
    Tensor padded = zeros({chunk * size_}, {data.dtype(), data.device()});
    copy_(narrow(padded, 0, 0, n), reshape(data, {-1}));
    Tensor received = Tensor::empty({chunk * size_}, data.dtype(), data.device());
    char* send = static_cast<char*>(padded.raw_data());
    char* receive = static_cast<char*>(received.raw_data());
    ncclDataType_t type = nccl_type(data.dtype());
    cudaStream_t stream = cuda_backend().stream();
    check(ncclGroupStart(), "allreduce_sum", "ncclGroupStart");
    for (int r = 0; r < size_; ++r) {
      check(ncclSend(send + r * chunk_bytes, chunk, type, r, comm_, stream), "allreduce_sum",
            "ncclSend");
      check(ncclRecv(receive + r * chunk_bytes, chunk, type, r, comm_, stream), "allreduce_sum",
            "ncclRecv");
    }
    check(ncclGroupEnd(), "allreduce_sum", "ncclGroupEnd");
    Tensor sum = clone(narrow(received, 0, 0, chunk));  // ((x0 + x1) + x2) + ...
    for (int r = 1; r < size_; ++r) sum = add(sum, narrow(received, 0, r * chunk, chunk));
    copy_(narrow(padded, 0, rank_ * chunk, chunk), sum);
    check(ncclAllGather(send + rank_ * chunk_bytes, send, chunk, type, comm_, stream),
          "allreduce_sum", "ncclAllGather");
    copy_(data, reshape(narrow(padded, 0, 0, n), data.shape()));
    // The freed buffers may go to the next tensor at once: its kernels queue behind NCCL's.
    return std::make_unique<QueuedWork>();
  }

  void broadcast(const Tensor& data, int root) override {
    QKV_CHECK(root >= 0 && root < size_, "broadcast", "root ", root, " is not a rank of ", size_);
    check_device_contiguous(data, "broadcast");
    check_descriptors_agree(bootstrap_->allgather(tensor_descriptor(data, "broadcast")),
                            "broadcast");
    check(ncclBroadcast(data.raw_data(), data.raw_data(), bytes_of(data), ncclUint8, root, comm_,
                        cuda_backend().stream()),
          "broadcast", "ncclBroadcast");
  }

  Tensor allgather(const Tensor& data) override {
    check_device_contiguous(data, "allgather");
    check_descriptors_agree(bootstrap_->allgather(tensor_descriptor(data, "allgather")),
                            "allgather");
    Shape shape{int64_t(size_)};
    for (int64_t d : data.shape()) shape.push_back(d);
    Tensor out = Tensor::empty(shape, data.dtype(), data.device());
    check(ncclAllGather(data.raw_data(), out.raw_data(), bytes_of(data), ncclUint8, comm_,
                        cuda_backend().stream()),
          "allgather", "ncclAllGather");
    return out;
  }

  void barrier() override {
    cuda_backend().synchronize();
    bootstrap_->barrier();
  }

  [[noreturn]] void abort(int code) override {
    if (comm_) ncclCommAbort(comm_);
    comm_ = nullptr;
    bootstrap_->abort(code);
    std::_Exit(code);  // not reached: abort() ends the process
  }

 private:
  void check(ncclResult_t status, const char* op, const char* call) const {
    if (status == ncclSuccess) return;
    throw Error(::qkv::detail::concat(op, ": ", call, " failed on rank ", rank_, " of ", size_,
                                      ": ", ncclGetErrorString(status)));
  }
  static void check_device_contiguous(const Tensor& data, const char* op) {
    QKV_CHECK(data.defined() && data.is_contiguous(), op, "needs a defined, contiguous tensor");
    QKV_CHECK(data.device().is_cuda(), op, "the NCCL group works on CUDA tensors, got one on ",
              data.device().str());
  }
  static size_t bytes_of(const Tensor& t) { return size_t(t.numel()) * dtype_size(t.dtype()); }

  std::shared_ptr<ProcessGroup> bootstrap_;
  int rank_, size_;
  ncclComm_t comm_ = nullptr;
};

}  // namespace

std::shared_ptr<ProcessGroup> nccl_process_group(std::shared_ptr<ProcessGroup> bootstrap) {
  QKV_CHECK(bootstrap != nullptr, "nccl process group", "needs a bootstrap group (MPI's world)");
  return std::make_shared<NcclProcessGroup>(std::move(bootstrap));
}

}  // namespace qkv::cuda
