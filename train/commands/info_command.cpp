// `qkv info`: version, build type, threads, CPU features (and whether bf16 runs on AMX), CUDA
// status.
#include <cstdio>
#include <thread>

#include "engine/cpu/gemm_bf16.h"
#include "engine/device_loader.h"
#include "engine/parallel.h"
#include "train/commands/commands.h"

namespace qkv::cli {

int info_command() {
  std::printf("qkv %s\n", QKV_VERSION);
#ifdef NDEBUG
  std::printf("build:    Release\n");
#else
  std::printf("build:    Debug\n");
#endif
  std::printf("threads:  %d (of %u hardware threads; set with --threads or QKV_NUM_THREADS)\n",
              num_threads(), std::thread::hardware_concurrency());
  std::printf("cpu:      ");
  __builtin_cpu_init();
  // __builtin_cpu_supports needs a literal, hence the macro
#define QKV_PRINT_FEATURE(name) \
  if (__builtin_cpu_supports(name)) std::printf("%s ", name);
  QKV_PRINT_FEATURE("sse4.2")
  QKV_PRINT_FEATURE("avx")
  QKV_PRINT_FEATURE("avx2")
  QKV_PRINT_FEATURE("fma")
  QKV_PRINT_FEATURE("avx512f")
  QKV_PRINT_FEATURE("avx512bw")
  QKV_PRINT_FEATURE("avx512vl")
  QKV_PRINT_FEATURE("avx512vnni")
  QKV_PRINT_FEATURE("avx512bf16")
  QKV_PRINT_FEATURE("amx-tile")
  QKV_PRINT_FEATURE("amx-bf16")
#undef QKV_PRINT_FEATURE
  std::printf("\n");
  std::printf("bf16:     %s for --precision bf16 products (%s)\n",
              cpu::bf16_kernel_name(cpu::bf16_kernel()), cpu::bf16_kernel_reason());
  // loads libqkv_cuda.so (engine/device_loader.h); a CPU-only command never does
  std::printf("cuda:     %s\n", backend_status(DeviceKind::cuda).c_str());
  return 0;
}

}  // namespace qkv::cli
