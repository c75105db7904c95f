#include "train/bench/cuda_bench.h"

#include "engine/device_loader.h"
#include "engine/error.h"

namespace qkv::bench {
namespace {

void check_device_name(const std::string& device) {
  QKV_CHECK(device == "cuda" || device == "cuda:0", "--device",
            "benchmarks run on cpu or cuda (device 0), got '", device, "'");
}

// The benchmarks run inside libqkv_cuda.so (cuda/bench/cuda_bench.cpp): they call cuBLAS.
int run_in_library(const std::string& device, const char* entry_point) {
  check_device_name(device);
  QKV_CHECK(ensure_backend(DeviceKind::cuda), "--device cuda", "no CUDA backend (",
            backend_status(DeviceKind::cuda), ")");
  auto run = reinterpret_cast<int (*)()>(backend_library_symbol(DeviceKind::cuda, entry_point));
  QKV_CHECK(run != nullptr, "--device cuda", "the CUDA library has no ", entry_point,
            "() (a backend registered in-process has no benchmarks)");
  return run();
}

}  // namespace

bool cuda_bench_available() { return ensure_backend(DeviceKind::cuda); }

int run_cuda_matmul_bench(const std::string& device) {
  return run_in_library(device, "qkv_cuda_matmul_bench");
}

int run_cuda_attention_bench(const std::string& device) {
  return run_in_library(device, "qkv_cuda_attention_bench");
}

}  // namespace qkv::bench
