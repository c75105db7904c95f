#include "train/bench/memory_bandwidth.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>

#include "engine/parallel.h"

namespace qkv::bench {
namespace {

// n floats on 2 MiB boundaries, offered to the kernel as huge pages (madvise: a hint it may
// ignore).
class HugeArray {
 public:
  explicit HugeArray(int64_t n) {
    const size_t huge = size_t(2) << 20;
    const size_t bytes = (size_t(n) * sizeof(float) + huge - 1) / huge * huge;
    data_ = static_cast<float*>(std::aligned_alloc(huge, bytes));
    if (!data_) throw std::bad_alloc();
    madvise(data_, bytes, MADV_HUGEPAGE);
  }
  ~HugeArray() { std::free(data_); }
  HugeArray(const HugeArray&) = delete;
  HugeArray& operator=(const HugeArray&) = delete;
  float* get() const { return data_; }
  float operator[](size_t i) const { return data_[i]; }

 private:
  float* data_;
};

}  // namespace

double measured_stream_gbs(int threads, int64_t bytes_per_array, double seconds) {
  using clock = std::chrono::steady_clock;
  const int64_t n = std::max<int64_t>(bytes_per_array / int64_t(sizeof(float)), 1);
  // Uninitialised: the pages are first touched below, in parallel and in the stretches the passes
  // use, so that the page faults stay out of the timed passes. Huge pages where the kernel gives
  // them on request: a 4 KiB page fault per 4 KiB would take longer than the passes.
  HugeArray a(n), b(n), c(n);
  const int saved = num_threads();
  set_num_threads(threads);
  const int64_t grain = (n + threads - 1) / threads;
  parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
    std::fill(b.get() + begin, b.get() + end, 1.0f);
    std::fill(c.get() + begin, c.get() + end, 2.0f);
    std::fill(a.get() + begin, a.get() + end, 0.0f);
  });
  double best = 0;
  const auto end_at = clock::now() + std::chrono::duration<double>(seconds);
  int passes = 0;
  do {
    const auto t0 = clock::now();
    parallel_for(0, n, grain, [&](int64_t begin, int64_t end) {
      float* out = a.get();
      const float *x = b.get(), *y = c.get();
      for (int64_t i = begin; i < end; ++i) out[i] = x[i] + y[i];
    });
    const double elapsed = std::chrono::duration<double>(clock::now() - t0).count();
    best = std::max(best, 3.0 * double(n) * sizeof(float) / elapsed * 1e-9);
    ++passes;
  } while (passes < 3 || clock::now() < end_at);
  set_num_threads(saved);
  // Keep the passes alive: the compiler must not drop stores nobody reads.
  volatile float sink = a[size_t(n / 2)];
  (void)sink;
  return best;
}

int64_t stream_bytes_per_array() {
  const long l3 = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const int64_t mib = int64_t(1) << 20;
  return std::clamp<int64_t>(4 * std::max<long>(l3, 0), 64 * mib, 128 * mib);
}

double measured_memory_gbs(int threads) {
  return measured_stream_gbs(threads, stream_bytes_per_array());
}

}  // namespace qkv::bench
