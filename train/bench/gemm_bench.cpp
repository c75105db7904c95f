// Each shape is timed for qkv and then for OpenBLAS, back to back, at the same thread count, so
// the ratio compares like with like even on a busy machine. A measurement is the fastest of
// several repetitions: noise from other processes only ever makes a run slower.
#include "train/bench/gemm_bench.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <map>
#include <random>
#include <string>
#include <thread>

#include "engine/cpu/gemm.h"
#include "engine/cpu/gemm_kernel.h"
#include "engine/cpu/gemm_packed.h"
#include "engine/parallel.h"
#include "train/bench/cuda_bench.h"
#include "train/bench/fma_peak.h"
#include "train/bench/gemm_road.h"
#include "train/bench/openblas.h"
#include "train/bench/timing.h"

namespace qkv::bench {
namespace {

using Shape = GemmShape;

template <typename T>
std::vector<T> random_vector(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  std::vector<T> v(n);
  for (T& x : v) x = T(u(rng));
  return v;
}

template <typename T>
const char* dtype_name() {
  return sizeof(T) == 4 ? "f32" : "f64";
}

// Times one shape for qkv and OpenBLAS at `threads` and prints a row. Returns false when the two
// products disagree beyond rounding, which would make the comparison meaningless.
// `f32_peak` is the float32 FMA peak at `threads` measured in this run; float64 lanes are half as
// many, so its peak is half that.
template <typename T>
bool bench_shape(const Shape& s, int threads, double f32_peak, const GemmBenchOptions& options) {
  const OpenBlas& blas = OpenBlas::get();
  const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  const size_t a_size = size_t(s.m) * s.k, b_size = size_t(s.k) * s.n, c_size = size_t(s.m) * s.n;
  std::vector<T> a = random_vector<T>(a_size * s.batch, 1),
                 b = random_vector<T>(b_size * s.batch, 2);
  std::vector<T> c(c_size * s.batch), c_ref(c.size());
  const double budget = options.quick ? 0.05 : 0.25;

  qkv::set_num_threads(threads);
  const double ours = fastest_seconds_per_call(
      [&] {
        cpu::gemm_batched<T>(s.batch, s.ta, s.tb, s.m, s.n, s.k, T(1), a.data(), lda, a_size,
                             b.data(), ldb, b_size, T(0), c.data(), s.n, c_size);
      },
      budget);
  double theirs = 0, diff = 0;
  if (blas.available()) {
    blas.set_num_threads(threads);
    theirs = fastest_seconds_per_call(
        [&] {
          for (int i = 0; i < s.batch; ++i)
            blas.gemm(s.ta, s.tb, s.m, s.n, s.k, T(1), a.data() + i * a_size, lda,
                      b.data() + i * b_size, ldb, T(0), c_ref.data() + i * c_size, s.n);
        },
        budget);
    double scale = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      diff = std::max(diff, double(std::abs(c[i] - c_ref[i])));
      scale = std::max(scale, double(std::abs(c_ref[i])));
    }
    diff /= std::max(scale, 1e-30);
    // OpenBLAS's workers spin for a while after a call; let them go to sleep before qkv runs next.
    if (threads > 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  const double ours_gf = gflops(s, ours), theirs_gf = theirs > 0 ? gflops(s, theirs) : 0;
  const double peak = sizeof(T) == 4 ? f32_peak : f32_peak / 2;
  const double of_peak = peak > 0 ? 100 * ours_gf / peak : 0;
  if (options.json) {
    char theirs_json[32] = "null";
    if (theirs > 0) std::snprintf(theirs_json, sizeof theirs_json, "%.2f", theirs_gf);
    std::printf(
        "{\"m\":%d,\"n\":%d,\"k\":%d,\"batch\":%d,\"trans\":\"%s\",\"dtype\":\"%s\","
        "\"threads\":%d,\"gflops\":%.2f,\"openblas_gflops\":%s,\"peak_gflops\":%.2f}\n",
        s.m, s.n, s.k, s.batch, trans_name(s).c_str(), dtype_name<T>(), threads, ours_gf,
        theirs_json, peak);
  } else if (theirs > 0) {
    std::printf("%-5s %-5s %5d %5d %5d %5d %3d %9.1f %9.1f %7.2f %6.0f%%\n", dtype_name<T>(),
                trans_name(s).c_str(), s.batch, s.m, s.n, s.k, threads, ours_gf, theirs_gf,
                ours_gf / theirs_gf, of_peak);
  } else {
    std::printf("%-5s %-5s %5d %5d %5d %5d %3d %9.1f %9s %7s %6.0f%%\n", dtype_name<T>(),
                trans_name(s).c_str(), s.batch, s.m, s.n, s.k, threads, ours_gf, "-", "-", of_peak);
  }
  std::fflush(stdout);
  const double tolerance = sizeof(T) == 4 ? 1e-4 : 1e-12;
  if (diff > tolerance) {
    std::printf("MISMATCH: qkv and OpenBLAS differ by %.3g (relative) on this shape\n", diff);
    return false;
  }
  return true;
}

// The teaching table of docs/CPU_KERNELS.md: each optimization step on one square size, one
// thread unless the step is threading itself.
void road(int size) {
  const Shape s{size, size, size, false, false};
  std::vector<float> a = random_vector<float>(size_t(size) * size, 1);
  std::vector<float> b = random_vector<float>(size_t(size) * size, 2);
  std::vector<float> c(size_t(size) * size);
  auto step = [&](const char* name, const std::function<void()>& fn) {
    std::printf("  %-44s %9.1f\n", name, gflops(s, fastest_seconds_per_call(fn, 0.3)));
    std::fflush(stdout);
  };
  std::printf("\nThe road, f32 %dx%dx%d (GFLOP/s):\n", size, size, size);
  qkv::set_num_threads(1);
  step("1 naive triple loop (i,j,p)",
       [&] { gemm_naive(size, size, size, a.data(), b.data(), c.data()); });
  step("2 loops reordered (i,p,j), vectorized",
       [&] { gemm_reordered(size, size, size, a.data(), b.data(), c.data()); });
  step("3 + cache blocking", [&] { gemm_blocked(size, size, size, a.data(), b.data(), c.data()); });
  const char* labels[] = {"packed + AVX-512 microkernel", "packed + AVX2 microkernel",
                          "packed + generic C++ microkernel"};
  std::vector<const cpu::GemmMicrokernel<float>*> kernels(cpu::gemm_kernels<float>().rbegin(),
                                                          cpu::gemm_kernels<float>().rend());
  int number = 4;
  for (const cpu::GemmMicrokernel<float>* kernel : kernels) {
    std::string name = std::string(kernel->name);
    std::string label = std::to_string(number++) + " " +
                        (name == "avx512" ? labels[0]
                         : name == "avx2" ? labels[1]
                                          : labels[2]);
    step(label.c_str(), [&] {
      cpu::gemm_packed<float>(*kernel, false, false, size, size, size, 1.0f, a.data(), size,
                              b.data(), size, 0.0f, c.data(), size);
    });
  }
  qkv::set_num_threads(2);
  step((std::to_string(number) + " + 2 threads").c_str(), [&] {
    cpu::gemm<float>(false, false, size, size, size, 1.0f, a.data(), size, b.data(), size, 0.0f,
                     c.data(), size);
  });
  const OpenBlas& blas = OpenBlas::get();
  if (blas.available()) {
    for (int t : {1, 2}) {
      blas.set_num_threads(t);
      step(("OpenBLAS, " + std::to_string(t) + (t == 1 ? " thread" : " threads")).c_str(), [&] {
        blas.gemm(false, false, size, size, size, 1.0f, a.data(), size, b.data(), size, 0.0f,
                  c.data(), size);
      });
    }
  }
}

}  // namespace

std::string trans_name(const GemmShape& s) {
  return std::string(s.ta ? "T" : "N") + (s.tb ? "T" : "N");
}

double gflops(const GemmShape& s, double seconds) {
  return 2.0 * s.batch * s.m * s.n * s.k / seconds * 1e-9;
}

int run_gemm_bench(const GemmBenchOptions& options) {
  if (options.device != "cpu") return run_cuda_matmul_bench(options.device);
  const OpenBlas& blas = OpenBlas::get();
  const int saved_threads = qkv::num_threads();
  if (!options.json) {
    std::printf("qkv GEMM: %s microkernel (f32 %dx%d, f64 %dx%d)\n",
                cpu::gemm_kernels<float>().front()->name, cpu::gemm_kernels<float>().front()->mr,
                cpu::gemm_kernels<float>().front()->nr, cpu::gemm_kernels<double>().front()->mr,
                cpu::gemm_kernels<double>().front()->nr);
    if (blas.available())
      std::printf("OpenBLAS: %s\n  %s\n", blas.kernel_choice().c_str(), blas.config().c_str());
    else
      std::printf("OpenBLAS not available (%s): no ratios\n", blas.error().c_str());
  }
  // The peak is measured once per thread count before the table, on the same cores.
  std::map<int, double> f32_peak;
  for (int t : options.threads) f32_peak[t] = measured_fma_peak_gflops(t);
  if (!options.json) {
    std::printf("float32 FMA peak measured now (qkv bench peak):");
    for (int t : options.threads)
      std::printf("%s %.1f GFLOP/s at %d thread%s", t == options.threads.front() ? "" : ",",
                  f32_peak[t], t, t == 1 ? "" : "s");
    std::printf("\n\n%-5s %-5s %5s %5s %5s %5s %3s %9s %9s %7s %7s\n", "dtype", "trans", "batch",
                "m", "n", "k", "thr", "qkv", "OpenBLAS", "ratio", "of peak");
  }

  std::vector<int> squares = options.quick ? std::vector<int>{64, 256, 1024}
                                           : std::vector<int>{64, 128, 256, 512, 1024, 2048};
  std::vector<Shape> shapes;
  for (int s : squares) shapes.push_back({s, s, s, false, false});
  // The transformer's projections (tokens x d_model times weights) in both layouts a linear
  // layer uses: x @ W (NN) and x @ W^T (NT).
  for (bool tb : {false, true}) {
    shapes.push_back({2048, 512, 128, false, tb});
    shapes.push_back({2048, 128, 512, false, tb});
  }
  // bench_step's Linear layers (64 x 20 tokens, d_model 128): forward x @ W^T (NT), dx = g @ W
  // (NN) and dW = g^T @ x (TN), where few tiles on one side make the GEMM read the other in place.
  if (!options.quick) {
    shapes.push_back({1280, 128, 128, false, true});
    shapes.push_back({1280, 128, 128, false, false});
    shapes.push_back({128, 128, 1280, true, false});
  }
  // Attention's per-head products, batch = batch x heads = 32, T = 128, d_head = 64: scores
  // Q @ K^T (NT) and the weighted sum P @ V (NN).
  shapes.push_back({128, 128, 64, false, true, 32});
  shapes.push_back({128, 64, 128, false, false, 32});
  bool ok = true;
  for (const Shape& s : shapes)
    for (int t : options.threads) ok = bench_shape<float>(s, t, f32_peak[t], options) && ok;
  for (int s : squares)
    if (!options.quick || s == 256)
      for (int t : options.threads)
        ok = bench_shape<double>({s, s, s, false, false}, t, f32_peak[t], options) && ok;

  ok = run_gemm_bf16_bench(options) && ok;
  if (!options.json && !options.quick) road(1024);
  qkv::set_num_threads(saved_threads);
  return ok ? 0 : 1;
}

}  // namespace qkv::bench
