#include "train/bench/openblas.h"

#include <dlfcn.h>

#include <cstdlib>

namespace qkv::bench {
namespace {
// From cblas.h's enums; spelled out so that no BLAS header is needed to build.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
}  // namespace

const OpenBlas& OpenBlas::get() {
  static const OpenBlas blas;
  return blas;
}

OpenBlas::OpenBlas() {
  unsetenv("OPENBLAS_CORETYPE");
  unsetenv("OPENBLAS_L2_SIZE");
  void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    const char* why = dlerror();
    error_ = why ? why : "dlopen(libopenblas.so.0) failed";
    return;
  }
  sgemm_ = reinterpret_cast<Sgemm>(dlsym(lib, "cblas_sgemm"));
  dgemm_ = reinterpret_cast<Dgemm>(dlsym(lib, "cblas_dgemm"));
  set_threads_ = reinterpret_cast<void (*)(int)>(dlsym(lib, "openblas_set_num_threads"));
  core_name_ = reinterpret_cast<char* (*)()>(dlsym(lib, "openblas_get_corename"));
  config_ = reinterpret_cast<char* (*)()>(dlsym(lib, "openblas_get_config"));
  if (!sgemm_ || !dgemm_ || !set_threads_) {
    sgemm_ = nullptr;
    error_ = "libopenblas.so.0 lacks cblas_sgemm, cblas_dgemm or openblas_set_num_threads";
  }
}

std::string OpenBlas::core_name() const { return core_name_ ? core_name_() : "unknown"; }
std::string OpenBlas::config() const { return config_ ? config_() : "unknown"; }
void OpenBlas::set_num_threads(int n) const { set_threads_(n); }

void OpenBlas::gemm(bool trans_a, bool trans_b, int m, int n, int k, float alpha, const float* a,
                    int lda, const float* b, int ldb, float beta, float* c, int ldc) const {
  sgemm_(kRowMajor, trans_a ? kTrans : kNoTrans, trans_b ? kTrans : kNoTrans, m, n, k, alpha, a,
         lda, b, ldb, beta, c, ldc);
}

void OpenBlas::gemm(bool trans_a, bool trans_b, int m, int n, int k, double alpha, const double* a,
                    int lda, const double* b, int ldb, double beta, double* c, int ldc) const {
  dgemm_(kRowMajor, trans_a ? kTrans : kNoTrans, trans_b ? kTrans : kNoTrans, m, n, k, alpha, a,
         lda, b, ldb, beta, c, ldc);
}

}  // namespace qkv::bench
