// ProcessGroup: the processes of one data-parallel job, and the collectives they run together.
//
// `mpirun -np N` starts N copies of the same program; each is one rank of the group (0..N-1). A
// collective is called by every rank, in the same order, with tensors of the same shape and dtype.
// from_environment() returns the group this process belongs to: the MPI world when it was started
// by mpirun (and qkv was built with MPI), otherwise a group of one process in which every
// collective is the identity. Code written against this interface runs unchanged in both.
//
// The sum is reproducible bit for bit. allreduce_sum adds the ranks' values in rank order,
// ((x0 + x1) + x2) + ..., for every element, and every rank receives the same bits. An MPI or NCCL
// allreduce lets the library choose the order (a tree, a ring, whatever the message size
// selects), and floating-point addition is not associative, so its result can change with the
// number of ranks, the message size or the library version. Here the ranks first exchange chunks
// (rank r receives chunk r of every rank's tensor), each rank sums its chunk in rank order, and an
// allgather hands the summed chunks to everyone: the same traffic as a ring allreduce, with the
// order fixed (docs/DISTRIBUTED.md).
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>

#include "engine/tensor.h"

namespace qkv {

// A collective that has been started and may still be running (a non-blocking allreduce). The
// tensor it works on must not be read or written until wait() returns.
class CollectiveWork {
 public:
  virtual ~CollectiveWork() = default;
  // Advances the collective without blocking; true once it is complete. Throws on failure.
  virtual bool test() = 0;
  // Blocks until the collective is complete. Throws qkv::Error naming the call and the rank.
  virtual void wait() = 0;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  // "single", "mpi" or "nccl".
  virtual std::string name() const = 0;

  // Starts replacing `data` (contiguous; f32, f64 or i64) by its elementwise sum over the ranks,
  // added in rank order (see above). Every rank passes a tensor of the same dtype and numel.
  virtual std::unique_ptr<CollectiveWork> start_allreduce_sum(const Tensor& data) = 0;
  // The blocking form.
  void allreduce_sum(const Tensor& data) { start_allreduce_sum(data)->wait(); }

  // Every rank's `data` (contiguous) takes the values of rank `root`'s.
  virtual void broadcast(const Tensor& data, int root) = 0;
  // [size(), ...data.shape]: every rank's `data`, stacked in rank order, on every rank. All ranks
  // pass the same shape and dtype (checked: a mismatch throws naming both ranks' shapes).
  virtual Tensor allgather(const Tensor& data) = 0;
  virtual void barrier() = 0;

  // Ends every process of the job now with exit code `code` (MPI_Abort): for a rank that cannot
  // go on, so that the others do not wait for it in their next collective.
  [[noreturn]] virtual void abort(int code) = 0;

  // This process's group: MPI's world when started by mpirun as one of several processes
  // (OpenMPI's mpirun, or MPICH's mpiexec), else a group of one. Created once; later calls return
  // the same group. Throws when launched as one of several processes by a qkv built without MPI.
  static std::shared_ptr<ProcessGroup> from_environment();
};

// Whether this qkv was built with MPI (-DWITH_MPI, docs/DISTRIBUTED.md).
bool built_with_mpi();

// A group of one process (rank 0 of 1): every collective leaves its tensor as it is.
std::shared_ptr<ProcessGroup> single_process_group();

// The number of processes the launcher says this job has (OpenMPI's OMPI_COMM_WORLD_SIZE,
// Hydra's PMI_SIZE), 1 when not started by one; `getenv` is a parameter so tests can supply their
// own.
int launcher_world_size(const std::function<const char*(const char*)>& getenv);

// The elements [begin, end) of an n-element tensor that rank `rank` of `size` sums in the ordered
// allreduce: contiguous, in rank order, lengths differing by at most one.
std::pair<int64_t, int64_t> rank_chunk(int64_t n, int size, int rank);

// ---- for implementations of ProcessGroup -------------------------------------------------------
// `t`'s dtype and shape as an i64 tensor of a fixed size, so that ranks can allgather theirs and
// check they agree before a collective whose sizes must match.
Tensor tensor_descriptor(const Tensor& t, const char* op);
// Throws (the same message on every rank) unless the rows of `descriptors` [size, n], one per
// rank, are equal: "allgather: rank 1 passed float32 [2,3], rank 0 passed float32 [2,4]".
void check_descriptors_agree(const Tensor& descriptors, const char* op);
// Throws unless `t` is a defined, contiguous tensor on `device` whose dtype the sum supports.
void check_reducible(const Tensor& t, Device device, const char* group_name);

}  // namespace qkv
