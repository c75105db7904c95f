#include "train/bench/tile_ceiling.h"

#include <chrono>

#include "engine/cpu/gemm_kernel.h"
#include "engine/cpu/scratch_buffer.h"
#include "train/bench/all_threads.h"

namespace qkv::bench {
namespace {

const cpu::GemmMicrokernel<float>& kernel() { return *cpu::gemm_kernels<float>().front(); }

// FLOP/s of one thread calling the tile for about `seconds` on panels of small values (the sums
// stay finite however often they are recomputed: each call starts from zero).
double tile_flops(int64_t depth, double seconds) {
  using clock = std::chrono::steady_clock;
  const cpu::GemmMicrokernel<float>& k = kernel();
  // 64-byte aligned, as the GEMM's packing buffers are
  cpu::ScratchBuffer a_panel, b_panel, c_tile;
  float* a = static_cast<float*>(a_panel.get(sizeof(float) * size_t(depth * k.mr)));
  float* b = static_cast<float*>(b_panel.get(sizeof(float) * size_t(depth * k.nr)));
  float* c = static_cast<float*>(c_tile.get(sizeof(float) * size_t(k.mr * k.nr)));
  for (int64_t i = 0; i < depth * k.mr; ++i) a[i] = float(i % 7) * 0.125f;
  for (int64_t i = 0; i < depth * k.nr; ++i) b[i] = float(i % 5) * 0.25f;
  constexpr int kCallsPerCheck = 256;  // ~0.1 ms between clock reads
  const auto t0 = clock::now();
  const auto end = t0 + std::chrono::duration<double>(seconds);
  int64_t calls = 0;
  do {
    for (int i = 0; i < kCallsPerCheck; ++i) run_ceiling_tile(depth, a, b, c);
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
  const double flops = summed_over_threads(threads, [&] { return tile_flops(depth, seconds); });
  return {std::string(k.name) + " " + std::to_string(k.mr) + "x" + std::to_string(k.nr), depth,
          flops * 1e-9};
}

}  // namespace qkv::bench
