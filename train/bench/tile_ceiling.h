// The speed of qkv's own GEMM register tile with its operands in L1, measured: the most any of its
// products can reach on this core, beside the FMA peak (fma_peak.h), which times FMAs alone.
//
// Why a second yardstick: a register tile does more than multiply-add. Per depth step the AVX-512
// kernel's 12 x 32 tile loads two vectors of B and broadcasts twelve values of A for its 24 FMAs,
// and each call ends by storing its tile. On some cores that keeps the tile well below the FMA
// peak with nothing to wait for in memory, and a product, or a training step made of products,
// can only approach the tile's rate. So `qkv bench peak` prints both, and bench_step its MFU
// against the peak and its share of the tile's rate.
#pragma once

#include <cstdint>
#include <string>

namespace qkv::bench {

struct TileCeiling {
  std::string kernel;  // the microkernel gemm() runs here and its tile, e.g. "avx512 12x32"
  int64_t depth = 0;   // depth steps per call: both panels within 24 KB, inside any L1
  double gflops = 0;   // the threads' rates added up, 2 FLOPs per multiply-add
};

// `threads` pool threads at once, each calling the float32 microkernel that gemm() uses on its own
// packed panels (run_ceiling_tile) for about `seconds`.
TileCeiling measured_tile_ceiling(int threads, double seconds = 0.1);

// The panels' depth: the most steps, a multiple of 32, that keep a [depth][mr] panel of A and a
// [depth][nr] panel of B within 24 KB (128 for the AVX-512 kernel's 12 x 32 tile).
int64_t ceiling_tile_depth();

// One timed call: c [mr][nr] (row-major, nr apart) = the product of the packed panels a
// [depth][mr] and b [depth][nr], by the kernel gemm() uses (gemm_kernels<float>().front()).
void run_ceiling_tile(int64_t depth, const float* a, const float* b, float* c);

}  // namespace qkv::bench
