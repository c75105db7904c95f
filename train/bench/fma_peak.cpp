#include "train/bench/fma_peak.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "engine/parallel.h"
#include "train/bench/all_threads.h"
#include "train/bench/core_handoff.h"
#include "train/bench/memory_bandwidth.h"
#include "train/bench/tile_ceiling.h"

namespace qkv::bench {
namespace {

// Twelve accumulators: an FMA's latency (4 cycles) times the two FMA ports of a core is eight
// chains in flight, and twelve leaves slack without spilling the sixteen ymm/xmm registers.
// acc = acc * a + b with a just below 1 and b tiny stays finite and normal for any run length.
constexpr int kChains = 12;
constexpr long kInnerIterations = 1 << 14;

// FLOP/s of kChains FMA chains on registers of type Vec (`lanes` floats) for about `seconds`.
// `set1` broadcasts a float and `fma` is x * a + b: lambdas written inside a function compiled for
// the width's instructions (below), into which this body is inlined, so the intrinsics compile.
template <typename Vec, typename Set1, typename Fma>
__attribute__((always_inline)) inline double chains_flops(int lanes, Set1 set1, Fma fma,
                                                          double seconds) {
  using clock = std::chrono::steady_clock;
  Vec acc[kChains];
  for (int c = 0; c < kChains; ++c) acc[c] = set1(1.0f + c);
  const Vec a = set1(0.999999f), b = set1(1e-7f);
  const auto t0 = clock::now();
  const auto end = t0 + std::chrono::duration<double>(seconds);
  long iterations = 0;
  do {
    for (long i = 0; i < kInnerIterations; ++i)
      for (int c = 0; c < kChains; ++c) acc[c] = fma(acc[c], a, b);
    iterations += kInnerIterations;
  } while (clock::now() < end);
  const double elapsed = std::chrono::duration<double>(clock::now() - t0).count();
  // Keep the chains alive: the compiler must not drop work whose result nobody reads.
  float sink = 0;
  for (int c = 0; c < kChains; ++c) sink += reinterpret_cast<const float*>(&acc[c])[0];
  asm volatile("" : : "m"(sink));
  return double(iterations) * kChains * lanes * 2 / elapsed;
}

__attribute__((target("avx512f"))) double fma_flops_512(double seconds) {
  return chains_flops<__m512>(
      16, [](float v) { return _mm512_set1_ps(v); },
      [](__m512 x, __m512 a, __m512 b) { return _mm512_fmadd_ps(x, a, b); }, seconds);
}

__attribute__((target("avx2,fma"))) double fma_flops_256(double seconds) {
  return chains_flops<__m256>(
      8, [](float v) { return _mm256_set1_ps(v); },
      [](__m256 x, __m256 a, __m256 b) { return _mm256_fmadd_ps(x, a, b); }, seconds);
}

__attribute__((target("fma"))) double fma_flops_128(double seconds) {
  return chains_flops<__m128>(
      4, [](float v) { return _mm_set1_ps(v); },
      [](__m128 x, __m128 a, __m128 b) { return _mm_fmadd_ps(x, a, b); }, seconds);
}

double fma_flops(int width_bits, double seconds) {
  switch (width_bits) {
    case 512:
      return fma_flops_512(seconds);
    case 256:
      return fma_flops_256(seconds);
    default:
      return fma_flops_128(seconds);
  }
}

}  // namespace

std::vector<int> fma_vector_widths() {
  std::vector<int> widths;
  if (!__builtin_cpu_supports("fma")) return widths;
  widths.push_back(128);
  if (__builtin_cpu_supports("avx2")) widths.push_back(256);
  if (__builtin_cpu_supports("avx512f")) widths.push_back(512);
  return widths;
}

double measured_fma_peak_gflops(int width_bits, int threads, double seconds) {
  return summed_over_threads(threads, [&] { return fma_flops(width_bits, seconds); }) * 1e-9;
}

namespace {

// What a second thread pays to read the first's data (train/bench/core_handoff.h), between the
// issuing thread and the pool's first worker.
void print_handoff(bool json) {
  const int saved = num_threads();
  set_num_threads(2);
  const int64_t read_bytes = int64_t(256) << 10;  // in every L2, the size of a step's activation
  const std::optional<RoundTrip> trip = measured_round_trip();
  const std::optional<HandoffRead> read = measured_handoff_read(read_bytes);
  const int64_t gelu_floats = 65536;
  const int gelu_rounds = 200;
  const std::optional<ThreadSpeeds> speeds = measured_thread_speeds(gelu_floats, gelu_rounds);
  set_num_threads(saved);
  if (!trip || !read || !speeds || !trip->crossed) {
    std::printf("%s\n", json ? "{\"measure\":\"handoff\",\"measured\":false}"
                             : "\nhanding data between two threads: not measured (the pool "
                               "ran both ends on one thread)");
    return;
  }
  if (json)
    std::printf(
        "{\"measure\":\"handoff\",\"round_trip_ns\":%.1f,\"read_kib\":%lld,\"own_gbs\":%.2f,"
        "\"other_gbs\":%.2f,\"gelu_issuing_us\":%.2f,\"gelu_worker_us\":%.2f}\n",
        trip->ns, static_cast<long long>(read_bytes >> 10), read->own_gbs, read->other_gbs,
        speeds->issuing_us, speeds->worker_us);
  else
    std::printf(
        "\nhanding data between the pool's two threads, measured\n"
        "a cache line's round trip:   %.0f ns (median of %lld, the best of 5 rounds)\n"
        "reading %lld KiB just written: %.1f GB/s by the reader itself, %.1f GB/s by the other "
        "thread\n"
        "GELU of %lld floats alone:  %.1f us on the issuing thread, %.1f us on the worker "
        "(medians of %d; the worker at %.2fx the issuing thread's speed)\n",
        trip->ns, static_cast<long long>(trip->exchanges / 5),
        static_cast<long long>(read_bytes >> 10), read->own_gbs, read->other_gbs,
        static_cast<long long>(gelu_floats), speeds->issuing_us, speeds->worker_us, gelu_rounds,
        speeds->issuing_us / speeds->worker_us);
}

}  // namespace

double measured_fma_peak_gflops(int threads) {
  std::vector<int> widths = fma_vector_widths();
  return widths.empty() ? 0 : measured_fma_peak_gflops(widths.back(), threads);
}

int run_peak_bench(const PeakBenchOptions& options) {
  std::vector<int> widths = fma_vector_widths();
  if (widths.empty()) {
    std::printf("this CPU reports no FMA instructions: no peak to measure\n");
    return 1;
  }
  if (!options.json)
    std::printf(
        "float32 FMA peak, measured on registers (GFLOP/s; 2 FLOPs per lane per FMA)\n"
        "%-8s %7s %9s %12s\n",
        "width", "threads", "GFLOP/s", "per thread");
  std::vector<double> widest_peak;  // per entry of options.threads
  for (int width : widths)
    for (int threads : options.threads) {
      double gf = measured_fma_peak_gflops(width, threads, 0.2);
      if (width == widths.back()) widest_peak.push_back(gf);
      if (options.json)
        std::printf("{\"measure\":\"fma\",\"width_bits\":%d,\"threads\":%d,\"gflops\":%.2f}\n",
                    width, threads, gf);
      else
        std::printf("%-8s %7d %9.1f %12.1f\n", (std::to_string(width) + " bit").c_str(), threads,
                    gf, gf / threads);
      std::fflush(stdout);
    }
  // The ceiling of the products: the GEMM's own tile, against the widest FMA's peak.
  for (size_t i = 0; i < options.threads.size(); ++i) {
    const int threads = options.threads[i];
    const TileCeiling tile = measured_tile_ceiling(threads, 0.2);
    const double share = 100 * tile.gflops / widest_peak[i];
    if (options.json) {
      std::printf(
          "{\"measure\":\"tile\",\"kernel\":\"%s\",\"depth\":%lld,\"threads\":%d,"
          "\"gflops\":%.2f,\"of_fma_peak\":%.4f}\n",
          tile.kernel.c_str(), static_cast<long long>(tile.depth), threads, tile.gflops,
          share / 100);
      continue;
    }
    if (i == 0)
      std::printf(
          "\nqkv's GEMM register tile (%s, depth %lld) on its packed panels in L1: the most its "
          "products can reach\n%7s %9s %17s\n",
          tile.kernel.c_str(), static_cast<long long>(tile.depth), "threads", "GFLOP/s",
          "of the FMA peak");
    std::printf("%7d %9.1f %16.1f%%\n", threads, tile.gflops, share);
    std::fflush(stdout);
  }
  // The yardstick of the ops that only move data: main memory's rate, at each thread count.
  const double mib = double(stream_bytes_per_array()) / (1 << 20);
  if (!options.json)
    std::printf(
        "\nmemory bandwidth, measured: a[i] = b[i] + c[i] over three arrays of %.0f MiB (GB/s "
        "of bytes read and written)\n%7s %9s\n",
        mib, "threads", "GB/s");
  for (int threads : options.threads) {
    const double gbs = measured_memory_gbs(threads);
    if (options.json)
      std::printf("{\"measure\":\"memory\",\"threads\":%d,\"array_mib\":%.0f,\"gbs\":%.2f}\n",
                  threads, mib, gbs);
    else
      std::printf("%7d %9.1f\n", threads, gbs);
    std::fflush(stdout);
  }
  if (std::find_if(options.threads.begin(), options.threads.end(), [](int t) { return t >= 2; }) !=
      options.threads.end())
    print_handoff(options.json);
  return 0;
}

}  // namespace qkv::bench
