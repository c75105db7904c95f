// OpenBLAS as a yardstick for benchmarks, loaded at run time so that no qkv library links a BLAS.
#pragma once

#include <string>

namespace qkv::bench {

// The few OpenBLAS entry points the benchmarks compare against. Row-major only.
class OpenBlas {
 public:
  // Loads libopenblas.so.0 on first use. OPENBLAS_CORETYPE and OPENBLAS_L2_SIZE are removed from
  // this process's environment first: they pin OpenBLAS to an older kernel (the build machines
  // set Haswell), and a fair yardstick uses the kernel it would choose for this CPU.
  static const OpenBlas& get();

  bool available() const { return sgemm_ != nullptr; }
  std::string error() const { return error_; }
  std::string core_name() const;  // the kernel family OpenBLAS picked, e.g. "Cooperlake"
  std::string config() const;     // version and build options
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
};

}  // namespace qkv::bench
