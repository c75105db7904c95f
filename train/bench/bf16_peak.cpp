#include "train/bench/bf16_peak.h"

#include <algorithm>
#include <vector>

#include "engine/cpu/amx.h"
#include "engine/cpu/gemm_bf16.h"
#include "engine/cpu/gemm_bf16_kernels.h"
#include "engine/parallel.h"

namespace qkv::bench {

const char* bf16_peak_instruction() {
  switch (cpu::bf16_kernel()) {
    case cpu::Bf16Kernel::amx_tiles:
      return "TDPBF16PS";
    case cpu::Bf16Kernel::avx512_bf16:
      return "VDPBF16PS";
    default:
      return "";
  }
}

double measured_bf16_peak_gflops(int threads, int windows) {
  const cpu::Bf16Kernel kernel = cpu::bf16_kernel();
  if (kernel == cpu::Bf16Kernel::none) return 0;
  std::vector<double> per_thread(static_cast<size_t>(threads));
  const int saved = qkv::num_threads();
  qkv::set_num_threads(threads);
  // one chunk per thread, so every pool thread runs the instruction at the same time
  parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int window = 0; window < windows; ++window)
        per_thread[size_t(t)] =
            std::max(per_thread[size_t(t)], kernel == cpu::Bf16Kernel::amx_tiles
                                                ? cpu::amx_bf16_peak_flops(0.001)
                                                : cpu::avx512_bf16_peak_flops(0.001));
  });
  qkv::set_num_threads(saved);
  double total = 0;
  for (double p : per_thread) total += p;
  return total * 1e-9;
}

}  // namespace qkv::bench
