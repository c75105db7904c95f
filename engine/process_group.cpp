#include "engine/process_group.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/ops.h"

#ifdef QKV_WITH_MPI
#include "engine/mpi_process_group.h"
#endif

namespace qkv {

namespace {

class CompletedWork final : public CollectiveWork {
 public:
  bool test() override { return true; }
  void wait() override {}
};

class SingleProcessGroup final : public ProcessGroup {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string name() const override { return "single"; }

  std::unique_ptr<CollectiveWork> start_allreduce_sum(const Tensor& data) override {
    check_reducible(data, data.defined() ? data.device() : Device::cpu(), "single-process");
    return std::make_unique<CompletedWork>();
  }
  void broadcast(const Tensor& data, int root) override {
    QKV_CHECK(root == 0, "broadcast", "root ", root, " is not a rank of a group of 1");
    QKV_CHECK(data.defined() && data.is_contiguous(), "broadcast",
              "needs a defined, contiguous tensor");
  }
  Tensor allgather(const Tensor& data) override {
    NoGrad no_grad;
    return unsqueeze(data.detach(), 0).contiguous();
  }
  void barrier() override {}
  [[noreturn]] void abort(int code) override { std::_Exit(code); }
};

}  // namespace

bool built_with_mpi() {
#ifdef QKV_WITH_MPI
  return true;
#else
  return false;
#endif
}

std::shared_ptr<ProcessGroup> single_process_group() {
  return std::make_shared<SingleProcessGroup>();
}

int launcher_world_size(const std::function<const char*(const char*)>& getenv) {
  // OpenMPI's mpirun; MPICH's and Intel MPI's Hydra (PMI).
  for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}) {
    const char* value = getenv(name);
    if (!value || !*value) continue;
    char* end = nullptr;
    long size = std::strtol(value, &end, 10);
    QKV_CHECK(*end == '\0' && size >= 1, "process group", "the launcher's variable ", name, "='",
              value, "' is not a process count");
    return int(size);
  }
  return 1;
}

std::pair<int64_t, int64_t> rank_chunk(int64_t n, int size, int rank) {
  QKV_CHECK(size >= 1 && rank >= 0 && rank < size && n >= 0, "rank_chunk", "rank ", rank, " of ",
            size, " for ", n, " elements");
  int64_t base = n / size, extra = n % size;  // the first `extra` ranks take one more
  int64_t begin = rank * base + std::min<int64_t>(rank, extra);
  return {begin, begin + base + (rank < extra ? 1 : 0)};
}

Tensor tensor_descriptor(const Tensor& t, const char* op) {
  constexpr int max_dims = 8;
  QKV_CHECK(t.defined(), op, "needs a defined tensor");
  QKV_CHECK(t.dim() <= max_dims, op, "supports tensors of up to ", max_dims, " dimensions, got ",
            shape_str(t.shape()));
  std::vector<int64_t> d(2 + max_dims, 0);
  d[0] = int64_t(t.dtype());
  d[1] = t.dim();
  for (int i = 0; i < t.dim(); ++i) d[2 + i] = t.shape()[i];
  return tensor_i64(d);
}

void check_descriptors_agree(const Tensor& descriptors, const char* op) {
  std::vector<int64_t> all = descriptors.to_vector<int64_t>();
  int64_t ranks = descriptors.size(0), n = descriptors.size(1);
  auto describe = [&](int64_t r) {
    const int64_t* d = all.data() + r * n;
    return detail::concat(dtype_name(DType(d[0])), " ", shape_str(Shape(d + 2, d + 2 + d[1])));
  };
  for (int64_t r = 1; r < ranks; ++r)
    QKV_CHECK(std::equal(all.begin(), all.begin() + n, all.begin() + r * n), op, "rank ", r,
              " passed ", describe(r), ", rank 0 passed ", describe(0),
              " (every rank must pass the same dtype and shape)");
}

void check_reducible(const Tensor& t, Device device, const char* group_name) {
  QKV_CHECK(t.defined() && t.is_contiguous(), "allreduce_sum",
            "needs a defined, contiguous tensor");
  QKV_CHECK(t.device() == device, "allreduce_sum", "the ", group_name, " group reduces tensors on ",
            device.str(), ", got one on ", t.device().str());
  QKV_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::f64 || t.dtype() == DType::i64,
            "allreduce_sum", "sums float32, float64 or int64 tensors, got ", dtype_name(t.dtype()));
}

std::shared_ptr<ProcessGroup> ProcessGroup::from_environment() {
  static std::mutex mutex;
  static std::shared_ptr<ProcessGroup> group;
  std::lock_guard lock(mutex);
  if (group) return group;
  int launched = launcher_world_size([](const char* name) { return std::getenv(name); });
#ifdef QKV_WITH_MPI
  group = launched > 1 ? mpi_world_group() : single_process_group();
#else
  QKV_CHECK(launched == 1, "process group", "started by mpirun as one of ", launched,
            " processes, but this qkv was built without MPI: install libopenmpi-dev (make deps) "
            "and configure with -DWITH_MPI=ON");
  group = single_process_group();
#endif
  return group;
}

}  // namespace qkv
