#include "engine/mpi_process_group.h"

#include <mpi.h>

#include <climits>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/ops.h"

namespace qkv {

namespace {

std::string mpi_error_text(int code) {
  char text[MPI_MAX_ERROR_STRING];
  int length = 0;
  if (MPI_Error_string(code, text, &length) != MPI_SUCCESS) return "error " + std::to_string(code);
  return std::string(text, length);
}

// The rank and size a failed call is reported with; set once MPI is initialised.
struct Where {
  int rank = -1, size = -1;
};

void check_mpi(int code, const char* op, const char* call, const Where& where) {
  if (code == MPI_SUCCESS) return;
  throw Error(detail::concat(op, ": ", call, " failed on rank ", where.rank, " of ", where.size,
                             ": ", mpi_error_text(code)));
}

MPI_Datatype mpi_type(DType dtype) {
  switch (dtype) {
    case DType::f32:
      return MPI_FLOAT;
    case DType::f64:
      return MPI_DOUBLE;
    case DType::i64:
      return MPI_INT64_T;
    default:
      throw Error(detail::concat("mpi: no MPI type for ", dtype_name(dtype)));
  }
}

int as_count(int64_t n, const char* op) {
  QKV_CHECK(n <= INT_MAX, op, n, " elements exceed MPI's int count; split the tensor");
  return int(n);
}

// out[i] = ((chunks[0][i] + chunks[1][i]) + chunks[2][i]) + ...: one association for every
// element, whatever the number of ranks or the chunk's length.
template <typename T>
void sum_in_rank_order(const T* chunks, int64_t length, int ranks, T* out) {
  for (int64_t i = 0; i < length; ++i) out[i] = chunks[i];
  for (int r = 1; r < ranks; ++r) {
    const T* chunk = chunks + r * length;
    for (int64_t i = 0; i < length; ++i) out[i] += chunk[i];
  }
}

// One ordered allreduce: an all-to-all hands rank r chunk r of every rank's tensor, rank r sums
// its chunk in rank order, and an allgather hands the summed chunks to every rank.
struct Reduction {
  enum class Phase { exchange, gather, done };
  Phase phase = Phase::exchange;
  Tensor data;
  int64_t chunk_begin = 0, chunk_length = 0;
  size_t element_bytes = 0;
  std::vector<char> received;  // this rank's chunk of every rank, in rank order
  std::vector<int> chunk_counts, chunk_displs, own_counts, own_displs;
  MPI_Request request = MPI_REQUEST_NULL;
};

// MPI matches the collectives of a communicator by the order in which they are started, so every
// rank must start them in the same order. The exchanges are started in the order of the calls,
// the same everywhere; a gather can start only once its exchange has completed, which happens at
// different times on different ranks. So the gathers run on a communicator of their own and are
// started strictly in the order of their reductions: a reduction whose exchange has completed
// waits for the earlier ones to start their gathers first.
class ReductionQueue {
 public:
  ReductionQueue(MPI_Comm exchange, MPI_Comm gather, Where where)
      : exchange_(exchange), gather_(gather), where_(where) {}

  std::shared_ptr<Reduction> start(Tensor data) {
    auto r = std::make_shared<Reduction>();
    r->data = std::move(data);
    int64_t n = r->data.numel();
    as_count(n, "allreduce_sum");
    auto [begin, end] = rank_chunk(n, where_.size, where_.rank);
    r->chunk_begin = begin;
    r->chunk_length = end - begin;
    r->element_bytes = dtype_size(r->data.dtype());
    r->received.resize(size_t(r->chunk_length * where_.size) * r->element_bytes);
    for (int rank = 0; rank < where_.size; ++rank) {
      auto [rb, re] = rank_chunk(n, where_.size, rank);
      r->chunk_counts.push_back(int(re - rb));
      r->chunk_displs.push_back(int(rb));
      r->own_counts.push_back(int(r->chunk_length));
      r->own_displs.push_back(int(r->chunk_length * rank));
    }
    MPI_Datatype type = mpi_type(r->data.dtype());
    check_mpi(MPI_Ialltoallv(r->data.raw_data(), r->chunk_counts.data(), r->chunk_displs.data(),
                             type, r->received.data(), r->own_counts.data(), r->own_displs.data(),
                             type, exchange_, &r->request),
              "allreduce_sum", "MPI_Ialltoallv", where_);
    awaiting_gather_.push_back(r);
    return r;
  }

  // Starts the gathers of the reductions whose exchange has completed, oldest first, stopping at
  // the first that is still exchanging - or, given `until`, waiting for every exchange up to and
  // including that reduction's.
  void start_gathers(const Reduction* until = nullptr) {
    while (!awaiting_gather_.empty()) {
      Reduction& r = *awaiting_gather_.front();
      bool must_wait = until && until->phase == Reduction::Phase::exchange;
      if (must_wait) {
        check_mpi(MPI_Wait(&r.request, MPI_STATUS_IGNORE), "allreduce_sum", "MPI_Wait", where_);
      } else {
        int complete = 0;
        check_mpi(MPI_Test(&r.request, &complete, MPI_STATUS_IGNORE), "allreduce_sum", "MPI_Test",
                  where_);
        if (!complete) return;
      }
      sum_and_start_gather(r);
      awaiting_gather_.pop_front();
    }
  }

  // Advances `r` without blocking; true once it is complete.
  bool test(Reduction& r) {
    start_gathers();
    if (r.phase == Reduction::Phase::gather) {
      int complete = 0;
      check_mpi(MPI_Test(&r.request, &complete, MPI_STATUS_IGNORE), "allreduce_sum", "MPI_Test",
                where_);
      if (complete) r.phase = Reduction::Phase::done;
    }
    return r.phase == Reduction::Phase::done;
  }

  void wait(Reduction& r) {
    start_gathers(&r);
    if (r.phase == Reduction::Phase::gather) {
      check_mpi(MPI_Wait(&r.request, MPI_STATUS_IGNORE), "allreduce_sum", "MPI_Wait", where_);
      r.phase = Reduction::Phase::done;
    }
  }

 private:
  void sum_and_start_gather(Reduction& r) {
    char* own = static_cast<char*>(r.data.raw_data()) + r.chunk_begin * r.element_bytes;
    switch (r.data.dtype()) {
      case DType::f32:
        sum_in_rank_order(reinterpret_cast<const float*>(r.received.data()), r.chunk_length,
                          where_.size, reinterpret_cast<float*>(own));
        break;
      case DType::f64:
        sum_in_rank_order(reinterpret_cast<const double*>(r.received.data()), r.chunk_length,
                          where_.size, reinterpret_cast<double*>(own));
        break;
      default:
        sum_in_rank_order(reinterpret_cast<const int64_t*>(r.received.data()), r.chunk_length,
                          where_.size, reinterpret_cast<int64_t*>(own));
        break;
    }
    MPI_Datatype type = mpi_type(r.data.dtype());
    check_mpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, type, r.data.raw_data(), r.chunk_counts.data(),
                              r.chunk_displs.data(), type, gather_, &r.request),
              "allreduce_sum", "MPI_Iallgatherv", where_);
    r.phase = Reduction::Phase::gather;
  }

  MPI_Comm exchange_, gather_;
  Where where_;
  std::deque<std::shared_ptr<Reduction>> awaiting_gather_;
};

class OrderedAllreduce final : public CollectiveWork {
 public:
  OrderedAllreduce(std::shared_ptr<ReductionQueue> queue, Tensor data)
      : queue_(std::move(queue)), reduction_(queue_->start(std::move(data))) {}

  // A collective cannot be cancelled, and MPI may still write into the buffers of one that has
  // not completed, so they are left allocated rather than freed under it. This happens only when
  // an error unwinds past an unfinished reduction, and the job is then ending.
  ~OrderedAllreduce() override {
    if (reduction_->phase != Reduction::Phase::done)
      (void)new std::shared_ptr<Reduction>(std::move(reduction_));
  }

  bool test() override { return queue_->test(*reduction_); }
  void wait() override { queue_->wait(*reduction_); }

 private:
  std::shared_ptr<ReductionQueue> queue_;
  std::shared_ptr<Reduction> reduction_;
};

class MpiProcessGroup final : public ProcessGroup {
 public:
  MpiProcessGroup() {
    int initialized = 0;
    check_mpi(MPI_Initialized(&initialized), "process group", "MPI_Initialized", where_);
    int provided = 0;
    if (!initialized) {
      // An error here has no communicator to return through yet: MPI reports it and aborts.
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "process group",
                "MPI_Init_thread", where_);
      owns_mpi_ = true;
    } else {
      check_mpi(MPI_Query_thread(&provided), "process group", "MPI_Query_thread", where_);
    }
    // The thread pool's workers exist alongside the thread that calls MPI.
    QKV_CHECK(provided >= MPI_THREAD_FUNNELED, "process group", "this MPI provides thread level ",
              provided,
              " only; qkv needs MPI_THREAD_FUNNELED (MPI calls from one thread among several)");
    check_mpi(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN), "process group",
              "MPI_Comm_set_errhandler", where_);
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm_), "process group", "MPI_Comm_dup", where_);
    check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "process group",
              "MPI_Comm_set_errhandler", where_);
    check_mpi(MPI_Comm_rank(comm_, &where_.rank), "process group", "MPI_Comm_rank", where_);
    check_mpi(MPI_Comm_size(comm_, &where_.size), "process group", "MPI_Comm_size", where_);
    for (MPI_Comm* c : {&exchange_comm_, &gather_comm_}) {
      check_mpi(MPI_Comm_dup(comm_, c), "process group", "MPI_Comm_dup", where_);
      check_mpi(MPI_Comm_set_errhandler(*c, MPI_ERRORS_RETURN), "process group",
                "MPI_Comm_set_errhandler", where_);
    }
    reductions_ = std::make_shared<ReductionQueue>(exchange_comm_, gather_comm_, where_);
  }

  ~MpiProcessGroup() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (finalized) return;
    for (MPI_Comm* c : {&gather_comm_, &exchange_comm_, &comm_}) MPI_Comm_free(c);
    if (owns_mpi_) MPI_Finalize();
  }

  int rank() const override { return where_.rank; }
  int size() const override { return where_.size; }
  std::string name() const override { return "mpi"; }

  std::unique_ptr<CollectiveWork> start_allreduce_sum(const Tensor& data) override {
    check_reducible(data, Device::cpu(), "MPI");
    return std::make_unique<OrderedAllreduce>(reductions_, data);
  }

  void broadcast(const Tensor& data, int root) override {
    QKV_CHECK(root >= 0 && root < where_.size, "broadcast", "root ", root, " is not a rank of ",
              where_.size);
    check_host_contiguous(data, "broadcast");
    check_descriptors_agree(gather_unchecked(tensor_descriptor(data, "broadcast"), "broadcast"),
                            "broadcast");
    char* bytes = static_cast<char*>(data.raw_data());
    size_t total = size_t(data.numel()) * dtype_size(data.dtype());
    for (size_t done = 0; done < total;) {  // MPI counts are int: large tensors go in pieces
      int piece = int(std::min<size_t>(total - done, size_t(1) << 30));
      check_mpi(MPI_Bcast(bytes + done, piece, MPI_BYTE, root, comm_), "broadcast", "MPI_Bcast",
                where_);
      done += size_t(piece);
    }
  }

  Tensor allgather(const Tensor& data) override {
    check_host_contiguous(data, "allgather");
    check_descriptors_agree(gather_unchecked(tensor_descriptor(data, "allgather"), "allgather"),
                            "allgather");
    return gather_unchecked(data, "allgather");
  }

  void barrier() override { check_mpi(MPI_Barrier(comm_), "barrier", "MPI_Barrier", where_); }

  [[noreturn]] void abort(int code) override {
    MPI_Abort(comm_, code);
    std::_Exit(code);  // MPI_Abort does not return; this is for a library that lets it
  }

 private:
  void check_host_contiguous(const Tensor& data, const char* op) const {
    QKV_CHECK(data.defined() && data.is_contiguous(), op, "needs a defined, contiguous tensor");
    QKV_CHECK(data.device().is_cpu(), op, "the MPI group works on CPU tensors, got one on ",
              data.device().str());
  }

  Tensor gather_unchecked(const Tensor& data, const char* op) {
    Shape shape{int64_t(where_.size)};
    for (int64_t d : data.shape()) shape.push_back(d);
    Tensor out = Tensor::empty(shape, data.dtype());
    int bytes = as_count(data.numel() * int64_t(dtype_size(data.dtype())), op);
    check_mpi(
        MPI_Allgather(data.raw_data(), bytes, MPI_BYTE, out.raw_data(), bytes, MPI_BYTE, comm_), op,
        "MPI_Allgather", where_);
    return out;
  }

  MPI_Comm comm_ = MPI_COMM_NULL;           // the blocking collectives
  MPI_Comm exchange_comm_ = MPI_COMM_NULL;  // the allreduces' two phases (ReductionQueue)
  MPI_Comm gather_comm_ = MPI_COMM_NULL;
  std::shared_ptr<ReductionQueue> reductions_;
  Where where_;
  bool owns_mpi_ = false;
};

}  // namespace

std::shared_ptr<ProcessGroup> mpi_world_group() {
  static std::mutex mutex;
  static std::shared_ptr<ProcessGroup> world;
  std::lock_guard lock(mutex);
  if (!world) world = std::make_shared<MpiProcessGroup>();
  return world;
}

}  // namespace qkv
