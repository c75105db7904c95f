// The bfloat16 rows of `qkv bench gemm`: the bfloat16 GEMM (engine/cpu/gemm_bf16.h) on the
// kernel bf16_kernel() chose, or on VDPBF16PS where the CPU has it but the choice was the float32
// path (the header says whether it was chosen, and why), beside the float32 products a CPU without
// it would run, OpenBLAS's sgemm and qkv's own, on the same values, and as a fraction of two
// peaks measured in the same run: the kernel's instruction (TDPBF16PS or VDPBF16PS) and the
// float32 FMA on zmm registers. (Debian's OpenBLAS is built without its bfloat16 GEMM, so no
// bfloat16 library product is compared.)
//
// Two rows per shape: bfloat16 operands, and float32 operands rounded as they are packed (what
// autocast runs). Each is checked against OpenBLAS on the rounded values before it is reported.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

#include "engine/cpu/amx.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/gemm_bf16.h"
#include "engine/cpu/gemm_bf16_kernels.h"
#include "engine/dtype.h"
#include "engine/parallel.h"
#include "train/bench/gemm_bench.h"
#include "train/bench/openblas.h"
#include "train/bench/timing.h"

namespace qkv::bench {
namespace {

using Shape = GemmShape;

// The kernel these rows time: the chosen one, else VDPBF16PS where the CPU runs it.
cpu::Bf16Kernel benched_kernel() {
  const cpu::Bf16Kernel chosen = cpu::bf16_kernel();
  if (chosen == cpu::Bf16Kernel::none && cpu::avx512_bf16_supported())
    return cpu::Bf16Kernel::avx512_bf16;
  return chosen;
}

template <typename Source>
void multiply(int64_t batch, bool ta, bool tb, int64_t m, int64_t n, int64_t k, const Source* a,
              int64_t lda, int64_t stride_a, const Source* b, int64_t ldb, int64_t stride_b,
              float* c, int64_t ldc, int64_t stride_c) {
  using Bits = std::conditional_t<std::is_same_v<Source, bf16_t>, uint16_t, float>;
  const auto* a_bits = reinterpret_cast<const Bits*>(a);
  const auto* b_bits = reinterpret_cast<const Bits*>(b);
  if (benched_kernel() == cpu::Bf16Kernel::amx_tiles)
    cpu::gemm_bf16_batched_amx(batch, ta, tb, m, n, k, a_bits, lda, stride_a, b_bits, ldb, stride_b,
                               false, c, ldc, stride_c);
  else
    cpu::gemm_bf16_batched_avx512(batch, ta, tb, m, n, k, a_bits, lda, stride_a, b_bits, ldb,
                                  stride_b, false, c, ldc, stride_c);
}

// Peak GFLOP/s of `threads` cores running, at once, the kernel's instruction (first) and the
// float32 FMA on zmm registers (second). Each thread takes the best of twenty 1 ms windows of each,
// in turn: on a shared machine a window can only read low.
std::pair<double, double> measured_peaks(int threads) {
  const bool amx = benched_kernel() == cpu::Bf16Kernel::amx_tiles;
  std::vector<double> bf16(static_cast<size_t>(threads)), fma(bf16.size());
  qkv::set_num_threads(threads);
  parallel_for(0, threads, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t)
      for (int round = 0; round < 20; ++round) {
        bf16[size_t(t)] = std::max(bf16[size_t(t)], amx ? cpu::amx_bf16_peak_flops(0.001)
                                                        : cpu::avx512_bf16_peak_flops(0.001));
        fma[size_t(t)] = std::max(fma[size_t(t)], cpu::avx512_fma_peak_flops(0.001));
      }
  });
  double bf16_total = 0, fma_total = 0;
  for (size_t t = 0; t < bf16.size(); ++t) bf16_total += bf16[t], fma_total += fma[t];
  return {bf16_total * 1e-9, fma_total * 1e-9};
}

// Times one shape at `threads` and prints its two rows. Returns false if a product disagrees
// with OpenBLAS on the same (rounded) values.
bool bench_shape(const Shape& s, int threads, double peak, double fma_peak,
                 const GemmBenchOptions& options) {
  const OpenBlas& blas = OpenBlas::get();
  const int lda = s.ta ? s.m : s.k, ldb = s.tb ? s.k : s.n;
  const size_t a_size = size_t(s.m) * s.k, b_size = size_t(s.k) * s.n, c_size = size_t(s.m) * s.n;
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(-1, 1);
  // f32: float32 values; bf16: the same rounded; rounded: bf16 widened back, for sgemm
  std::vector<float> a32(a_size * s.batch), b32(b_size * s.batch), a_rounded(a32.size()),
      b_rounded(b32.size());
  std::vector<bf16_t> a16(a32.size()), b16(b32.size());
  for (size_t i = 0; i < a32.size(); ++i) {
    a32[i] = u(rng), a16[i] = float_to_bf16(a32[i]), a_rounded[i] = bf16_to_float(a16[i]);
  }
  for (size_t i = 0; i < b32.size(); ++i) {
    b32[i] = u(rng), b16[i] = float_to_bf16(b32[i]), b_rounded[i] = bf16_to_float(b16[i]);
  }
  std::vector<float> c(c_size * s.batch), c_ref(c.size());
  const double budget = options.quick ? 0.05 : 0.25;

  qkv::set_num_threads(threads);
  auto time_bf16 = [&](const auto* a, const auto* b) {
    return fastest_seconds_per_call(
        [&] {
          multiply(s.batch, s.ta, s.tb, s.m, s.n, s.k, a, lda, a_size, b, ldb, b_size, c.data(),
                   s.n, c_size);
        },
        budget);
  };
  const double qkv_f32 = fastest_seconds_per_call(
      [&] {
        cpu::gemm_batched<float>(s.batch, s.ta, s.tb, s.m, s.n, s.k, 1.0f, a_rounded.data(), lda,
                                 a_size, b_rounded.data(), ldb, b_size, 0.0f, c_ref.data(), s.n,
                                 c_size);
      },
      budget);
  double openblas = 0;
  if (blas.available()) {
    blas.set_num_threads(threads);
    openblas = fastest_seconds_per_call(
        [&] {
          for (int i = 0; i < s.batch; ++i)
            blas.gemm(s.ta, s.tb, s.m, s.n, s.k, 1.0f, a_rounded.data() + i * a_size, lda,
                      b_rounded.data() + i * b_size, ldb, 0.0f, c_ref.data() + i * c_size, s.n);
        },
        budget);
    if (threads > 1) std::this_thread::sleep_for(std::chrono::milliseconds(150));
  }
  // c_ref now holds the float32 product of the rounded values (OpenBLAS's, or qkv's without it).
  bool ok = true;
  for (bool from_f32 : {false, true}) {
    const double seconds =
        from_f32 ? time_bf16(a32.data(), b32.data()) : time_bf16(a16.data(), b16.data());
    double diff = 0, scale = 0;
    for (size_t i = 0; i < c.size(); ++i) {
      diff = std::max(diff, double(std::abs(c[i] - c_ref[i])));
      scale = std::max(scale, double(std::abs(c_ref[i])));
    }
    diff /= std::max(scale, 1e-30);
    const double ours = gflops(s, seconds), f32 = gflops(s, qkv_f32);
    const double theirs = openblas > 0 ? gflops(s, openblas) : 0;
    const char* source = from_f32 ? "f32>bf16" : "bf16";
    const std::string trans = trans_name(s);
    if (options.json) {
      char theirs_json[32] = "null";
      if (theirs > 0) std::snprintf(theirs_json, sizeof theirs_json, "%.2f", theirs);
      std::printf(
          "{\"m\":%d,\"n\":%d,\"k\":%d,\"batch\":%d,\"trans\":\"%s\",\"dtype\":\"%s\","
          "\"threads\":%d,\"gflops\":%.2f,\"qkv_f32_gflops\":%.2f,\"openblas_gflops\":%s,"
          "\"kernel\":\"%s\",\"bf16_peak_gflops\":%.1f,\"fma_peak_gflops\":%.1f}\n",
          s.m, s.n, s.k, s.batch, trans.c_str(), source, threads, ours, f32, theirs_json,
          cpu::bf16_kernel_name(benched_kernel()), peak, fma_peak);
    } else {
      char vs_openblas[16] = "-";
      if (theirs > 0) std::snprintf(vs_openblas, sizeof vs_openblas, "%.2f", ours / theirs);
      std::printf("%-8s %-5s %5d %5d %5d %5d %3d %9.1f %9.1f %7.2f %9s %6.0f%% %6.0f%%\n", source,
                  trans.c_str(), s.batch, s.m, s.n, s.k, threads, ours, f32, ours / f32,
                  vs_openblas, 100 * ours / peak, 100 * ours / fma_peak);
    }
    std::fflush(stdout);
    if (diff > 1e-4) {
      std::printf("MISMATCH: the bfloat16 product and OpenBLAS differ by %.3g (relative)\n", diff);
      ok = false;
    }
  }
  return ok;
}

}  // namespace

bool run_gemm_bf16_bench(const GemmBenchOptions& options) {
  const cpu::Bf16Kernel kernel = benched_kernel();
  if (kernel == cpu::Bf16Kernel::none) {
    if (!options.json)
      std::printf(
          "\nbfloat16: no bfloat16 kernel (%s): products are float32 on widened operands, as in "
          "the f32 rows\n",
          cpu::bf16_kernel_reason());
    return true;
  }
  std::vector<double> peaks, fma_peaks;
  for (int t : options.threads) {
    const auto [bf16, fma] = measured_peaks(t);
    peaks.push_back(bf16);
    fma_peaks.push_back(fma);
  }
  const char* instruction = kernel == cpu::Bf16Kernel::amx_tiles ? "TDPBF16PS" : "VDPBF16PS";
  if (!options.json) {
    std::printf("\nbfloat16 on %s (float32 accumulation). Peaks measured now on registers:",
                cpu::bf16_kernel_name(kernel));
    for (size_t i = 0; i < peaks.size(); ++i)
      std::printf(" %s %.0f, FMA %.0f GFLOP/s at %d thread%s%s", instruction, peaks[i],
                  fma_peaks[i], options.threads[i], options.threads[i] == 1 ? "" : "s",
                  i + 1 < peaks.size() ? ";" : "");
    std::printf(
        "\n%s for --precision bf16 products: %s\n"
        "f32>bf16: float32 operands rounded while packed (autocast). 'f32 GEMM': qkv's "
        "float32 GEMM on the same values\n\n",
        kernel == cpu::bf16_kernel() ? "Chosen" : "NOT chosen", cpu::bf16_kernel_reason());
    std::printf("%-8s %-5s %5s %5s %5s %5s %3s %9s %9s %7s %9s %7s %7s\n", "operands", "trans",
                "batch", "m", "n", "k", "thr", "qkv", "f32 GEMM", "ratio", "/OpenBLAS", "of peak",
                "of FMA");
  }
  std::vector<Shape> shapes;
  const std::vector<int> squares =
      options.quick ? std::vector<int>{256, 1024} : std::vector<int>{128, 256, 512, 1024, 2048};
  for (int s : squares) shapes.push_back({s, s, s, false, false});
  // The transformer's products in the three layouts training uses: x @ W^T (NT), g @ W (NN), and
  // the weight gradient g^T @ x (TN).
  shapes.push_back({2048, 512, 128, false, true});
  shapes.push_back({2048, 128, 512, false, false});
  shapes.push_back({512, 128, 2048, true, false});
  shapes.push_back({128, 128, 64, false, true, 32});  // attention scores, batch x heads = 32
  bool ok = true;
  for (const Shape& s : shapes)
    for (size_t i = 0; i < options.threads.size(); ++i)
      ok = bench_shape(s, options.threads[i], peaks[i], fma_peaks[i], options) && ok;
  return ok;
}

}  // namespace qkv::bench
