#include "train/bench/tile_ceiling.h"

#include <chrono>
#include <cstdlib>
#include <memory>
#include <new>
#include <vector>

#include "engine/cpu/gemm_kernel.h"
#include "engine/parallel.h"

namespace qkv::bench {
namespace {

const cpu::GemmMicrokernel<float>& kernel() { return *cpu::gemm_kernels<float>().front(); }

// 64-byte aligned floats, as the GEMM's packing buffers are.
struct AlignedFloats {
  explicit AlignedFloats(int64_t n)
      : data(static_cast<float*>(std::aligned_alloc(64, size_t((n * 4 + 63) / 64 * 64))),
             &std::free) {
    if (!data) throw std::bad_alloc();
  }
  std::unique_ptr<float, decltype(&std::free)> data;
  float* get() const { return data.get(); }
};

// FLOP/s of one thread calling the tile for about `seconds` on panels of small values (the sums
// stay finite however often they are recomputed: each call starts from zero).
double tile_flops(int64_t depth, double seconds) {
  using clock = std::chrono::steady_clock;
  const cpu::GemmMicrokernel<float>& k = kernel();
  AlignedFloats a(depth * k.mr), b(depth * k.nr), c(int64_t(k.mr) * k.nr);
  for (int64_t i = 0; i < depth * k.mr; ++i) a.get()[i] = float(i % 7) * 0.125f;
  for (int64_t i = 0; i < depth * k.nr; ++i) b.get()[i] = float(i % 5) * 0.25f;
  constexpr int kCallsPerCheck = 256;  // ~0.1 ms between clock reads
  const auto t0 = clock::now();
  const auto end = t0 + std::chrono::duration<double>(seconds);
  int64_t calls = 0;
  do {
    for (int i = 0; i < kCallsPerCheck; ++i) run_ceiling_tile(depth, a.get(), b.get(), c.get());
    calls += kCallsPerCheck;
  } while (clock::now() < end);
  const double elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  return double(calls) * 2.0 * double(k.mr) * double(k.nr) * double(depth) / elapsed;
}

}  // namespace

int64_t ceiling_tile_depth() {
  const cpu::GemmMicrokernel<float>& k = kernel();
  const int64_t fits = (int64_t(24) << 10) / (int64_t(sizeof(float)) * (k.mr + k.nr));
  return fits / 32 * 32;
}

void run_ceiling_tile(int64_t depth, const float* a, const float* b, float* c) {
  const cpu::GemmMicrokernel<float>& k = kernel();
  k.run(depth, a, b, k.nr, c, k.nr, 1.0f, 0.0f, k.mr, k.nr);
}

TileCeiling measured_tile_ceiling(int threads, double seconds) {
  const cpu::GemmMicrokernel<float>& k = kernel();
  const int64_t depth = ceiling_tile_depth();
  std::vector<double> per_thread(size_t(threads), 0.0);
  const int saved = num_threads();
  set_num_threads(threads);
  // One chunk per thread, so every pool thread runs its tile at the same time (as fma_peak.cpp).
  parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) per_thread[size_t(t)] = tile_flops(depth, seconds);
  });
  set_num_threads(saved);
  double total = 0;
  for (double f : per_thread) total += f;
  return {std::string(k.name) + " " + std::to_string(k.mr) + "x" + std::to_string(k.nr), depth,
          total * 1e-9};
}

}  // namespace qkv::bench
