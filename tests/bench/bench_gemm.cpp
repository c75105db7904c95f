// Builds `bench_gemm`: qkv's GEMM beside OpenBLAS. Flags: --json, --quick, --threads N
// (repeatable).
#include <cstdlib>
#include <cstring>

#include "train/bench/gemm_bench.h"

int main(int argc, char** argv) {
  qkv::bench::GemmBenchOptions options;
  std::vector<int> threads;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--json"))
      options.json = true;
    else if (!std::strcmp(argv[i], "--quick"))
      options.quick = true;
    else if (!std::strcmp(argv[i], "--threads") && i + 1 < argc)
      threads.push_back(std::atoi(argv[++i]));
  }
  if (!threads.empty()) options.threads = threads;
  return qkv::bench::run_gemm_bench(options);
}
