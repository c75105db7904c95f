// The portable microkernel: plain C++ that any compiler and CPU accept. The accumulator tile is a
// small fixed-size array so the compiler can keep it in registers (and vectorize it when the
// build targets a vector ISA); it is the fallback and the reference the SIMD kernels must match.
#include "engine/cpu/gemm_kernel.h"

namespace qkv::cpu {
namespace {

template <typename T, int MR, int NR>
void generic_kernel(int64_t kc, const T* a, const T* b, int64_t ldb, T* c, int64_t ldc, T alpha,
                    T beta, int rows, int cols) {
  T acc[MR][NR] = {};
  for (int64_t p = 0; p < kc; ++p, a += MR, b += ldb)
    for (int i = 0; i < MR; ++i)
      for (int j = 0; j < NR; ++j) acc[i][j] += a[i] * b[j];
  for (int i = 0; i < rows; ++i)
    for (int j = 0; j < cols; ++j) {
      T prior = beta == T(0) ? T(0) : beta * c[i * ldc + j];  // beta == 0 must not read C
      c[i * ldc + j] = alpha * acc[i][j] + prior;
    }
}

}  // namespace

template <>
const GemmMicrokernel<float>* gemm_kernel_generic<float>() {
  static const GemmMicrokernel<float> k{
      "generic", 4, 8, 256, 256, 2048, generic_kernel<float, 4, 8>};
  return &k;
}

template <>
const GemmMicrokernel<double>* gemm_kernel_generic<double>() {
  static const GemmMicrokernel<double> k{
      "generic", 4, 8, 128, 256, 2048, generic_kernel<double, 4, 8>};
  return &k;
}

}  // namespace qkv::cpu
