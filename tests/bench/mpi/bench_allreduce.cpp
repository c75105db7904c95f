// Allreduce bandwidth on this machine: the MPI library's own MPI_Allreduce (its order of
// addition), qkv's ordered allreduce (engine/process_group.h), and memcpy of the same bytes as
// the yardstick. Prints, per message size, the time per call and the "bus bandwidth" of
// nccl-tests: bytes * 2 (N - 1) / N / time, the traffic each rank sends in a ring allreduce, so
// that rows for different numbers of ranks compare. Built with MPI only; run under mpirun:
//   mpirun -np 2 build/bench_allreduce [max_mib]
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "engine/ops.h"
#include "engine/process_group.h"

namespace {

using clock_type = std::chrono::steady_clock;

template <typename F>
double seconds_per_call(F&& call, int repeats) {
  call();  // warm up: first-touch page faults, connection set-up
  auto start = clock_type::now();
  for (int i = 0; i < repeats; ++i) call();
  return std::chrono::duration<double>(clock_type::now() - start).count() / repeats;
}

// The slowest rank's time: a collective is as fast as its last participant.
double slowest(double seconds) {
  double worst = 0;
  MPI_Allreduce(&seconds, &worst, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  return worst;
}

}  // namespace

int main(int argc, char** argv) {
  using namespace qkv;
  auto group = ProcessGroup::from_environment();  // initialises MPI under mpirun
  int ranks = group->size(), rank = group->rank();
  if (ranks < 2) {
    std::fprintf(stderr, "bench_allreduce: run it under mpirun with 2 or more ranks\n");
    return 2;
  }
  int64_t max_bytes = int64_t(argc > 1 ? std::atoi(argv[1]) : 64) << 20;
  if (rank == 0)
    std::printf(
        "%d ranks; bus bandwidth = bytes * 2(N-1)/N / time (nccl-tests)\n"
        "%10s %12s %12s %12s %14s %14s %14s\n",
        ranks, "bytes", "memcpy us", "MPI us", "ordered us", "memcpy GB/s", "MPI bus GB/s",
        "ordered bus GB/s");
  for (int64_t bytes = 4096; bytes <= max_bytes; bytes *= 4) {
    int64_t n = bytes / 4;
    int repeats = int(std::clamp<int64_t>((int64_t(256) << 20) / bytes, 3, 200));
    Tensor data = full({n}, 1.0 + rank);
    std::vector<float> out(static_cast<size_t>(n)), source(static_cast<size_t>(n), 1.0f);
    double copy = slowest(
        seconds_per_call([&] { std::memcpy(out.data(), source.data(), size_t(bytes)); }, repeats));
    double mpi = slowest(seconds_per_call(
        [&] {
          MPI_Allreduce(data.raw_data(), out.data(), int(n), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        },
        repeats));
    double ordered = slowest(seconds_per_call([&] { group->allreduce_sum(data); }, repeats));
    double bus = double(bytes) * 2 * (ranks - 1) / ranks / 1e9;
    if (rank == 0)
      std::printf("%10lld %12.1f %12.1f %12.1f %14.2f %14.2f %14.2f\n", (long long)bytes,
                  copy * 1e6, mpi * 1e6, ordered * 1e6, double(bytes) / copy / 1e9, bus / mpi,
                  bus / ordered);
  }
  return 0;
}
