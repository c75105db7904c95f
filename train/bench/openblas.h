// OpenBLAS as a yardstick for benchmarks, loaded at run time so that no qkv library links a BLAS.
#pragma once

#include <string>

namespace qkv::bench {

// The few OpenBLAS entry points the benchmarks compare against. Row-major only.
class OpenBlas {
 public:
  // Loads libopenblas.so.0 on first use, with OPENBLAS_CORETYPE set to the kernel family that fits
  // this CPU's instructions (cpuid) and OPENBLAS_L2_SIZE removed: the machines here may pin an
  // older kernel through them, and OpenBLAS's own detection falls back to SSE3 on CPU models newer
  // than the library. A fair yardstick runs the best kernel the library has for this CPU.
  static const OpenBlas& get();

  bool available() const { return sgemm_ != nullptr; }
  std::string error() const { return error_; }
  std::string core_name() const;  // the kernel family OpenBLAS picked, e.g. "Cooperlake"
  std::string config() const;     // version and build options
  // One line for a benchmark's header: the kernel running, why it was chosen, and what OpenBLAS
  // would have run by itself when that differs.
  std::string kernel_choice() const;
  void set_num_threads(int n) const;

  void gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a, int lda,
            const float* b, int ldb, float beta, float* c, int ldc) const;
  void gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a, int lda,
            const double* b, int ldb, double beta, double* c, int ldc) const;

 private:
  OpenBlas();
  using Sgemm = void (*)(int, int, int, int, int, int, float, const float*, int, const float*, int,
                         float, float*, int);
  using Dgemm = void (*)(int, int, int, int, int, int, double, const double*, int, const double*,
                         int, double, double*, int);
  Sgemm sgemm_ = nullptr;
  Dgemm dgemm_ = nullptr;
  void (*set_threads_)(int) = nullptr;
  char* (*core_name_)() = nullptr;
  char* (*config_)() = nullptr;
  std::string error_;
  std::string requested_core_, why_requested_, autodetected_core_;
};

}  // namespace qkv::bench
