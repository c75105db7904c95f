// Which bfloat16 kernel runs (gemm_bf16.h), and the entry points that send each product to it.
#include "engine/cpu/gemm_bf16.h"

#include <cstdlib>
#include <cstring>

#include "engine/cpu/amx.h"
#include "engine/cpu/gemm_bf16_kernels.h"
#include "engine/error.h"

namespace qkv::cpu {
namespace {

bool turned_off(const char* variable) {
  const char* value = std::getenv(variable);
  return value && std::strcmp(value, "0") == 0;
}

Bf16Kernel decide() {
  if (amx_bf16_available()) return Bf16Kernel::amx_tiles;
#if defined(__x86_64__)
  // The kernel's packing (gemm_bf16_pack.cpp) needs AVX-512BW as well.
  if (__builtin_cpu_supports("avx512bf16") && __builtin_cpu_supports("avx512bw") &&
      __builtin_cpu_supports("avx512vl") && !turned_off("QKV_CPU_AVX512_BF16"))
    return Bf16Kernel::avx512_bf16;
#endif
  return Bf16Kernel::none;
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
  QKV_CHECK(false, "gemm_bf16",
            "this machine has no bfloat16 GEMM kernel (no AMX: ", amx_bf16_unavailable_reason(),
            "; no AVX512-BF16, or QKV_CPU_AVX512_BF16=0)");
}

}  // namespace

Bf16Kernel bf16_kernel() {
  static const Bf16Kernel kernel = decide();
  return kernel;
}

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
