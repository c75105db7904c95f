#include "train/bench/openblas.h"

#include <dlfcn.h>
#include <strings.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>

namespace qkv::bench {
namespace {
// From cblas.h's enums; spelled out so that no BLAS header is needed to build.
constexpr int kRowMajor = 101, kNoTrans = 111, kTrans = 112;
}  // namespace

const OpenBlas& OpenBlas::get() {
  static const OpenBlas blas;
  return blas;
}

namespace {

// The kernel family, among those Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) has, that uses the
// widest instructions this CPU reports. OpenBLAS's own detection looks the CPU model up in a table,
// so a model newer than the library falls back to "Prescott" (SSE3), a yardstick 4-7x too slow.
std::string best_core_for_this_cpu(std::string* why) {
#define has(feature) (__builtin_cpu_supports(feature) != 0)
  if (has("avx512f") && has("avx512bw") && has("avx512vl") && has("avx512dq")) {
    if (has("amx-bf16") && has("avx512bf16")) {
      *why = "AMX-BF16 and AVX512-BF16";
      return "SapphireRapids";
    }
    if (has("avx512bf16")) {
      *why = "AVX512-BF16, no AMX";
      return "Cooperlake";
    }
    *why = "AVX-512F/BW/VL/DQ, no AVX512-BF16";
    return "SkylakeX";
  }
  if (has("avx2") && has("fma")) {
    *why = "AVX2 and FMA, no AVX-512";
    return "Haswell";
  }
  *why = "no AVX2: OpenBLAS's own choice is kept";
  return "";
#undef has
}

// What OpenBLAS picks by itself here: loaded once in a child process with the variables unset,
// since a library's choice is made when it is loaded and cannot be asked again in this process.
std::string autodetected_core() {
  int fds[2];
  if (pipe(fds) != 0) return "unknown";
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return "unknown";
  }
  if (pid == 0) {
    close(fds[0]);
    unsetenv("OPENBLAS_CORETYPE");
    unsetenv("OPENBLAS_L2_SIZE");
    setenv("OPENBLAS_NUM_THREADS", "1", 1);  // no worker threads in a process that only looks
    void* lib = dlopen("libopenblas.so.0", RTLD_NOW | RTLD_LOCAL);
    auto* name = lib ? reinterpret_cast<char* (*)()>(dlsym(lib, "openblas_get_corename")) : nullptr;
    const char* text = name ? name() : "unknown";
    ssize_t ignored = write(fds[1], text, strlen(text));
    (void)ignored;
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buffer[64];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;) text.append(buffer, size_t(n));
  close(fds[0]);
  waitpid(pid, nullptr, 0);
  return text.empty() ? "unknown" : text;
}

}  // namespace

OpenBlas::OpenBlas() {
  autodetected_core_ = autodetected_core();
  requested_core_ = best_core_for_this_cpu(&why_requested_);
  if (requested_core_.empty())
    unsetenv("OPENBLAS_CORETYPE");
  else
    setenv("OPENBLAS_CORETYPE", requested_core_.c_str(), 1);
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

std::string OpenBlas::kernel_choice() const {
  std::string running = core_name();
  std::string text = "core " + running;
  if (requested_core_.empty())
    text += " (its own detection; " + why_requested_ + ")";
  else if (strcasecmp(running.c_str(), requested_core_.c_str()) == 0)
    text += " (OPENBLAS_CORETYPE=" + requested_core_ + " chosen by cpuid: " + why_requested_ + ")";
  else
    text += " (asked for " + requested_core_ + " by cpuid: " + why_requested_ +
            "; this OpenBLAS has no such kernel and runs " + running + ")";
  if (strcasecmp(autodetected_core_.c_str(), running.c_str()) != 0)
    text += "; left to itself it would run " + autodetected_core_;
  return text;
}
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
