// What it costs one of the pool's threads to take over data the other wrote: a cache line's round
// trip between the issuing thread and a worker, and the rate at which the issuing thread reads a
// block a worker has just written against one it wrote itself. In a training step every op reads
// what the op before wrote, each thread a stretch of its own split; where two ops split a tensor
// differently, or a product's band needs the other thread's rows, the data crosses between the
// cores. On a virtual machine whose two vCPUs sit on different core complexes this crossing can
// cost far more than a read from one's own L2, and the two vCPUs need not run at the same speed
// (docs/CPU_KERNELS.md, "Two cores, two caches").
#pragma once

#include <cstdint>
#include <optional>

namespace qkv::bench {

struct RoundTrip {
  double ns = 0;          // median time for one line to go to the worker and back
  int64_t exchanges = 0;  // round trips completed
  bool crossed = false;   // the two ends ran on different threads (the measurement's premise)
};

// Ping-pong of one cache line between the issuing thread (chunk 0 of a parallel_for) and the
// pool's first worker (chunk 1), `exchanges` times per round, best-of-rounds median. Nothing when
// the pool has fewer than two threads: a ping-pong inside one thread would wait forever.
std::optional<RoundTrip> measured_round_trip(int64_t exchanges = 20000);

struct HandoffRead {
  double own_gbs = 0;    // the issuing thread reads a block it has just written
  double other_gbs = 0;  // ... a block the pool's worker has just written
};

// The issuing thread's read rate of `bytes` just written by itself and by a worker, the best of
// `rounds` alternated pairs. Nothing when the pool has fewer than two threads.
std::optional<HandoffRead> measured_handoff_read(int64_t bytes, int rounds = 30);

struct ThreadSpeeds {
  double issuing_us = 0;  // median time of the kernel on the issuing thread, the worker waiting
  double worker_us = 0;   // ... on the pool's first worker, the issuing thread waiting
  int64_t issuing_runs = 0, worker_runs = 0;  // the runs each median is of
};

// The CPU backend's GELU on `floats` floats (in L2), run by each of the two threads alone in
// turn, `rounds` times each: medians, not bests, because what a static split waits on is a
// thread's sustained speed. A virtual machine's two vCPUs need not run alike (another tenant on a
// core's sibling, its own clock), and a step split in halves goes at the slower one's pace.
// Nothing when the pool has fewer than two threads.
std::optional<ThreadSpeeds> measured_thread_speeds(int64_t floats = 65536, int rounds = 200);

}  // namespace qkv::bench
