// bfloat16 GEMM with float32 accumulation: C = op(A) @ op(B) (+ C), row-major, A and B bfloat16,
// C float32, on AMX tiles (gemm_bf16_amx.cpp) or, without them, on AVX512-BF16's VDPBF16PS
// (gemm_bf16_avx512.cpp); bf16_kernel() says which.
//
// This is the product mixed precision asks for (engine/autocast.h). CPUs with neither get the
// same product from the float32 GEMM on widened operands (every bfloat16 is a float32, exactly);
// the three differ only in the order the float32 sums are taken, and in that both bfloat16
// instructions read subnormal inputs as zero and flush subnormal results to zero, as they are
// specified to (whatever MXCSR says).
//
// Layout conventions are gemm.h's: op(A) is M x K, A itself (lda >= K) or the transpose of a
// K x M matrix (lda >= M); likewise op(B) is K x N; BatchStrides place each operand's matrices
// (batch_strides.h; 0 broadcasts an operand over the batch), leading dimensions of 0 repeat one
// row.
#pragma once

#include <cstdint>

#include "engine/cpu/batch_strides.h"
#include "engine/dtype.h"

namespace qkv::cpu {

enum class Bf16Kernel {
  amx_tiles,    // TDPBF16PS: amx_bf16_available() (engine/cpu/amx.h)
  avx512_bf16,  // VDPBF16PS: AVX512-BF16 and AVX-512BW, no usable AMX, and it pays (below)
  none,         // neither: callers widen to float32 instead
};

// The kernel gemm_bf16_batched runs on this machine, decided on the first call. AMX tiles where
// amx_bf16_available(). Otherwise VDPBF16PS where the CPU has AVX512-BF16 and its rate measured
// then on registers (about 20 ms) beats the float32 FMA's by a clear margin (1.25x, so that noise
// is unlikely to make two processes on one machine choose differently, and sum in other orders: a
// resumed run must end in the uninterrupted one's bytes): a VDPBF16PS does twice an FMA's
// multiply-adds, but some cores issue it at half an FMA's rate (the Emerald Rapids one of
// docs/CPU_KERNELS.md, whose AMX a VM hides), and there the float32 GEMM on widened operands is the
// faster product. The environment decides instead where it says so: QKV_CPU_AMX=0 rules AMX out,
// QKV_CPU_AVX512_BF16=0 rules VDPBF16PS out and QKV_CPU_AVX512_BF16=1 takes it without measuring
// (to compare the kernels, or the float32 path, on one machine).
Bf16Kernel bf16_kernel();
// Its name in a few words, for `qkv info`, the benchmarks and test logs.
const char* bf16_kernel_name(Bf16Kernel kernel);
// Why bf16_kernel() chose what it did, in a sentence (with the rates measured, when it measured).
const char* bf16_kernel_reason();

// Throws qkv::Error when bf16_kernel() is none. accumulate: C += product,
// otherwise C = product (C is then only written: it may hold NaN or garbage).
void gemm_bf16_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       const bf16_t* a, int64_t lda, BatchStrides stride_a, const bf16_t* b,
                       int64_t ldb, BatchStrides stride_b, bool accumulate, float* c, int64_t ldc,
                       BatchStrides stride_c);

// The same product of float32 operands rounded to bfloat16 (to nearest even) as they are packed:
// what a cast to bfloat16 followed by the call above computes, without the rounded copies. (The
// rounding reads float32 subnormals as zero; TDPBF16PS reads bfloat16 subnormals as zero anyway,
// so the two differ only where a subnormal float32 rounds up to the smallest normal bfloat16.)
void gemm_bf16_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                       const float* a, int64_t lda, BatchStrides stride_a, const float* b,
                       int64_t ldb, BatchStrides stride_b, bool accumulate, float* c, int64_t ldc,
                       BatchStrides stride_c);

}  // namespace qkv::cpu
