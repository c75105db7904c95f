// Choosing the GEMM microkernel from what the running CPU supports (cpuid), so one binary built
// without -march=native still uses AVX-512 where it exists.
#include "engine/cpu/gemm_kernel.h"

namespace qkv::cpu {

template <typename T>
const std::vector<const GemmMicrokernel<T>*>& gemm_kernels() {
  static const std::vector<const GemmMicrokernel<T>*> kernels = [] {
    std::vector<const GemmMicrokernel<T>*> list;
    for (const GemmMicrokernel<T>* k :
         {gemm_kernel_avx512<T>(), gemm_kernel_avx2<T>(), gemm_kernel_generic<T>()})
      if (k) list.push_back(k);
    return list;
  }();
  return kernels;
}

template const std::vector<const GemmMicrokernel<float>*>& gemm_kernels<float>();
template const std::vector<const GemmMicrokernel<double>*>& gemm_kernels<double>();

}  // namespace qkv::cpu
