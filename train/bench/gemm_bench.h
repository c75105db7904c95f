// `qkv bench gemm`: GFLOP/s of qkv's CPU GEMM beside OpenBLAS measured in the same run, and of the
// bfloat16 GEMM (AMX or VDPBF16PS) beside float32 and the measured peaks of its instruction and the
// FMA.
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

// One product the GEMM benchmarks time: op(A) m x k times op(B) k x n, `batch` times.
struct GemmShape {
  int m, n, k;
  bool ta, tb;
  int batch = 1;  // > 1: gemm_batched for qkv, one cblas call per item for OpenBLAS
};
std::string trans_name(const GemmShape& s);         // "NN", "NT", "TN" or "TT"
double gflops(const GemmShape& s, double seconds);  // 2 m n k batch / seconds, in GFLOP/s

// Prints the results; returns 0 (nonzero only if a result disagreed with OpenBLAS).
int run_gemm_bench(const GemmBenchOptions& options);

// The bfloat16 rows (AMX or VDPBF16PS), printed by run_gemm_bench after the float ones; false on a
// mismatch.
bool run_gemm_bf16_bench(const GemmBenchOptions& options);

}  // namespace qkv::bench
