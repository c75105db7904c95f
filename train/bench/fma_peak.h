// `qkv bench peak`: the machine's float32 FMA peak, measured, so that every GFLOP/s figure can be
// read as a share of what these cores can do right now (their clock under this load), not of a
// number from a datasheet.
#pragma once

#include <string>
#include <vector>

namespace qkv::bench {

// The vector widths whose FMA the CPU runs: 128 (SSE/AVX FMA on xmm), 256 (AVX2 FMA on ymm),
// 512 (AVX-512F on zmm), as far as cpuid reports them.
std::vector<int> fma_vector_widths();

// float32 FLOP/s of `threads` threads (the qkv pool) each running independent FMA chains on
// registers of `width_bits` for about `seconds`; their rates added up. 2 FLOPs per lane per FMA.
double measured_fma_peak_gflops(int width_bits, int threads, double seconds = 0.1);

// The widest width's peak at `threads`, the yardstick for a GEMM or a training step.
double measured_fma_peak_gflops(int threads);

struct PeakBenchOptions {
  std::vector<int> threads{1, 2};
  bool json = false;
};
int run_peak_bench(const PeakBenchOptions& options);

}  // namespace qkv::bench
