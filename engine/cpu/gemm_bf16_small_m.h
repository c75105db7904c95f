// The bfloat16 product with very few rows in op(A) (decoding one token at a time), without AMX
// tiles: a tile product would pad the rows to 32 and, worse, pack all of B for them, which costs
// more than the product. As gemm_small_m.h does for float32, these loops read B once where it
// lies; VDPBF16PS (AVX512-BF16) multiplies pairs of bfloat16 values and adds them to float32
// lanes, rounding float32 operands first exactly as the packing does.
#pragma once

#include <cstdint>

namespace qkv::cpu {

// C = op(A) @ op(B) (+ C when accumulate) for m <= kSmallM rows (gemm_small_m.h) and k > 0, with
// the conventions of gemm_bf16.h, threaded over the columns. Source is uint16_t (bfloat16 bits)
// or float.
template <typename Source>
void gemm_bf16_small_m(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const Source* a,
                       int64_t lda, const Source* b, int64_t ldb, bool accumulate, float* c,
                       int64_t ldc);

}  // namespace qkv::cpu
