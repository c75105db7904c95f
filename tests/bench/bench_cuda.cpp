// CUDA benchmarks (train/bench/cuda_bench.h): qkv's matmul against cuBLAS called directly, and the
// fused flash attention against attention composed from qkv ops. The same code runs as
// `qkv bench gemm --device cuda` and `qkv bench attention --device cuda`; tests/gpu/run.sh runs
// this binary and collects its "RESULT |" lines. Without a GPU it says so and exits 0.
#include <cstdio>

#include "train/bench/cuda_bench.h"

int main() {
  if (!qkv::bench::cuda_bench_available()) {
    std::printf("bench_cuda: no CUDA build or no GPU, nothing to measure\n");
    return 0;
  }
  qkv::bench::run_cuda_matmul_bench();
  return qkv::bench::run_cuda_attention_bench();
}
