// One thread pool shared by every CPU kernel.
//
// Kernels call parallel_for; it splits [begin, end) into at most num_threads() contiguous chunks of
// at least `grain` iterations and runs them on the pool, the calling thread taking one chunk. A
// parallel_for issued from inside another one runs serially on the calling thread, so nested
// kernels never oversubscribe the cores.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace qkv {

// Threads used by kernels: QKV_NUM_THREADS if set, else the number of cores. set_num_threads
// (the CLI's --threads) overrides both. The first call throws qkv::Error if QKV_NUM_THREADS is
// not a whole number in 1..1024.
int num_threads();
void set_num_threads(int n);

// Runs fn(chunk_begin, chunk_end) over [begin, end). Exceptions thrown by fn are rethrown here.
void parallel_for(int64_t begin, int64_t end, int64_t grain,
                  const std::function<void(int64_t, int64_t)>& fn);

// Runs fn(chunk, index, begin, end) over [0, sizes[index]) for every index in one job, each range
// split as parallel_for(0, sizes[index], grain) splits it: chunk t of every range runs on the
// thread that parallel_for gives its chunk t, so a thread touches the same part of each tensor as
// a kernel of its own over that tensor would (what it touched there is still in its core's
// cache), and the pool is woken once for a list of tensors rather than once per tensor.
void parallel_for_each_range(
    const std::vector<int64_t>& sizes, int64_t grain,
    const std::function<void(int chunk, size_t index, int64_t begin, int64_t end)>& fn);

// True while the calling thread is running a chunk of a parallel_for.
bool in_parallel_region();

}  // namespace qkv
