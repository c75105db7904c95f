#include "train/bench/bf16_peak.h"

#include <algorithm>

#include "engine/cpu/amx.h"
#include "engine/cpu/gemm_bf16.h"
#include "engine/cpu/gemm_bf16_kernels.h"
#include "train/bench/all_threads.h"

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
  return summed_over_threads(threads,
                             [&] {
                               double best = 0;
                               for (int window = 0; window < windows; ++window)
                                 best = std::max(best, kernel == cpu::Bf16Kernel::amx_tiles
                                                           ? cpu::amx_bf16_peak_flops(0.001)
                                                           : cpu::avx512_bf16_peak_flops(0.001));
                               return best;
                             }) *
         1e-9;
}

}  // namespace qkv::bench
