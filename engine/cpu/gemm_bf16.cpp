// Which bfloat16 kernel runs (gemm_bf16.h), and the entry points that send each product to it.
#include "engine/cpu/gemm_bf16.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "engine/cpu/amx.h"
#include "engine/cpu/gemm_bf16_kernels.h"
#include "engine/error.h"

namespace qkv::cpu {
namespace {

struct Choice {
  Bf16Kernel kernel;
  std::string reason;
};

// VDPBF16PS is taken only at this multiple of the FMA's rate or more (gemm_bf16.h says why).
constexpr double kClearMargin = 1.25;

// The measured comparison: each instruction's rate on registers, the best of ten 1 ms windows
// taken in turn. Another process can only make a window read low, and on a busy machine it takes
// the core for whole windows at a time; over ten of them spread across 20 ms, each instruction's
// best is its rate on an idle core.
Choice measure_avx512_bf16() {
  double bf16 = 0, fma = 0;
  for (int round = 0; round < 10; ++round) {
    bf16 = std::max(bf16, avx512_bf16_peak_flops(0.001));
    fma = std::max(fma, avx512_fma_peak_flops(0.001));
  }
  char rates[160];
  std::snprintf(rates, sizeof rates,
                "VDPBF16PS measured %.0f GFLOP/s on registers against the float32 FMA's %.0f",
                bf16 * 1e-9, fma * 1e-9);
  if (bf16 > kClearMargin * fma) return {Bf16Kernel::avx512_bf16, std::string(rates) + "; no AMX"};
  return {Bf16Kernel::none,
          std::string(rates) +
              ": not 1.25x faster, so the float32 GEMM on widened operands (no AMX: " +
              amx_bf16_unavailable_reason() + ")"};
}

Choice decide() {
  if (amx_bf16_available()) return {Bf16Kernel::amx_tiles, "AMX tiles are available"};
  const std::string no_amx = std::string("no AMX: ") + amx_bf16_unavailable_reason();
  if (!avx512_bf16_supported()) return {Bf16Kernel::none, no_amx + "; no AVX512-BF16"};
  const char* env = std::getenv("QKV_CPU_AVX512_BF16");
  QKV_CHECK(!env || std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0, "QKV_CPU_AVX512_BF16",
            "expected 0 (off) or 1 (on without measuring), got '", env, "'");
  if (env && std::strcmp(env, "0") == 0)
    return {Bf16Kernel::none, no_amx + "; VDPBF16PS turned off by QKV_CPU_AVX512_BF16=0"};
  if (env && std::strcmp(env, "1") == 0)
    return {Bf16Kernel::avx512_bf16, no_amx + "; VDPBF16PS chosen by QKV_CPU_AVX512_BF16=1"};
  return measure_avx512_bf16();
}

const Choice& choice() {
  static const Choice chosen = decide();
  return chosen;
}

template <typename Source>
void run(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
         const Source* a, int64_t lda, BatchStrides stride_a, const Source* b, int64_t ldb,
         BatchStrides stride_b, bool accumulate, float* c, int64_t ldc, BatchStrides stride_c) {
  switch (bf16_kernel()) {
    case Bf16Kernel::amx_tiles:
      return gemm_bf16_batched_amx(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb,
                                   stride_b, accumulate, c, ldc, stride_c);
    case Bf16Kernel::avx512_bf16:
      return gemm_bf16_batched_avx512(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb,
                                      stride_b, accumulate, c, ldc, stride_c);
    case Bf16Kernel::none:
      break;
  }
  QKV_CHECK(false, "gemm_bf16", "no bfloat16 GEMM kernel is chosen on this machine (",
            bf16_kernel_reason(), ")");
}

}  // namespace

Bf16Kernel bf16_kernel() { return choice().kernel; }

const char* bf16_kernel_reason() { return choice().reason.c_str(); }

const char* bf16_kernel_name(Bf16Kernel kernel) {
  switch (kernel) {
    case Bf16Kernel::amx_tiles:
      return "AMX tiles (TDPBF16PS)";
    case Bf16Kernel::avx512_bf16:
      return "AVX512-BF16 (VDPBF16PS)";
    case Bf16Kernel::none:
      break;
  }
  return "none (float32 GEMM on widened operands)";
}

void gemm_bf16_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       const bf16_t* a, int64_t lda, BatchStrides stride_a, const bf16_t* b,
                       int64_t ldb, BatchStrides stride_b, bool accumulate, float* c, int64_t ldc,
                       BatchStrides stride_c) {
  static_assert(sizeof(bf16_t) == sizeof(uint16_t));
  run(batch, trans_a, trans_b, m, n, k, reinterpret_cast<const uint16_t*>(a), lda, stride_a,
      reinterpret_cast<const uint16_t*>(b), ldb, stride_b, accumulate, c, ldc, stride_c);
}

void gemm_bf16_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       const float* a, int64_t lda, BatchStrides stride_a, const float* b,
                       int64_t ldb, BatchStrides stride_b, bool accumulate, float* c, int64_t ldc,
                       BatchStrides stride_c) {
  run(batch, trans_a, trans_b, m, n, k, a, lda, stride_a, b, ldb, stride_b, accumulate, c, ldc,
      stride_c);
}

}  // namespace qkv::cpu
