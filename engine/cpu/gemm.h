// General matrix multiply on the CPU: C = alpha * op(A) @ op(B) + beta * C, row-major.
//
// op(A) is M x K: A itself (trans_a = false, lda >= K) or the transpose of a K x M matrix
// (trans_a = true, lda >= M); likewise op(B) is K x N. Transposes are read in place, never
// materialized. The batched form repeats the product over `batch` matrices, where each operand's
// BatchStrides say where its i-th matrix starts (one stride, or two for a grid of matrices such as
// attention's heads; a stride of 0 broadcasts that operand).
//
// An epilogue finishes each tile of C while it is in L1, as it is stored: a bias of n values added
// to every row (C = alpha * op(A) @ op(B) + beta * C + bias), then, with relu, max(C, 0). A Linear
// layer's bias and a ReLU after it then cost no pass of their own over C.
#pragma once

#include <cstdint>

#include "engine/cpu/batch_strides.h"

namespace qkv::cpu {

template <typename T>
struct GemmEpilogue {
  const T* bias = nullptr;  // n values, or none
  bool relu = false;
};

template <typename T>
void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a,
          int64_t lda, const T* b, int64_t ldb, T beta, T* c, int64_t ldc,
          GemmEpilogue<T> epilogue = {});

template <typename T>
void gemm_batched(int64_t batch, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k,
                  T alpha, const T* a, int64_t lda, BatchStrides stride_a, const T* b, int64_t ldb,
                  BatchStrides stride_b, T beta, T* c, int64_t ldc, BatchStrides stride_c);

}  // namespace qkv::cpu
