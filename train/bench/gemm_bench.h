// `qkv bench gemm`: GFLOP/s of qkv's CPU GEMM beside OpenBLAS measured in the same run.
#pragma once

#include <string>
#include <vector>

namespace qkv::bench {

struct GemmBenchOptions {
  std::vector<int> threads{1, 2};
  bool json = false;           // one JSON object per line instead of a table
  bool quick = false;          // fewer shapes and shorter timing, for a smoke test
  std::string device = "cpu";  // cuda: train/bench/cuda_bench.h instead
};

// Prints the results; returns 0 (nonzero only if a result disagreed with OpenBLAS).
int run_gemm_bench(const GemmBenchOptions& options);

}  // namespace qkv::bench
