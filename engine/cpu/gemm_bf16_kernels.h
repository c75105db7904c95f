// The kernels behind gemm_bf16_batched (gemm_bf16.h), which picks one with bf16_kernel(); the
// tests and `qkv bench gemm` also call them directly, chosen or not. Each takes gemm_bf16.h's
// arguments, with Source uint16_t (bfloat16 bits) or float, and runs only where the CPU can: the
// AMX one where amx_bf16_available() (amx.h asks Linux for the tile state), the other where
// avx512_bf16_supported().
#pragma once

#include <cstdint>

#include "engine/cpu/batch_strides.h"

namespace qkv::cpu {

// Tiles (gemm_bf16_amx.cpp).
template <typename Source>
void gemm_bf16_batched_amx(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n,
                           int64_t k, const Source* a, int64_t lda, BatchStrides stride_a,
                           const Source* b, int64_t ldb, BatchStrides stride_b, bool accumulate,
                           float* c, int64_t ldc, BatchStrides stride_c);

// VDPBF16PS on zmm registers (gemm_bf16_avx512.cpp).
template <typename Source>
void gemm_bf16_batched_avx512(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n,
                              int64_t k, const Source* a, int64_t lda, BatchStrides stride_a,
                              const Source* b, int64_t ldb, BatchStrides stride_b, bool accumulate,
                              float* c, int64_t ldc, BatchStrides stride_c);

// Whether the CPU has what gemm_bf16_batched_avx512 runs on: AVX512-BF16, AVX-512BW and VL.
bool avx512_bf16_supported();

// VDPBF16PS on zeros in registers, 24 independent accumulators, for about `seconds`: the peak
// FLOP/s of one core (a multiply-add counts 2), the yardstick `qkv bench gemm` divides by. Only
// where avx512_bf16_supported().
double avx512_bf16_peak_flops(double seconds);
// The same for the float32 FMA on zmm registers (AVX-512F), what the float32 GEMM runs on.
double avx512_fma_peak_flops(double seconds);

}  // namespace qkv::cpu
