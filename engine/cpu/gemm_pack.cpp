#include "engine/cpu/gemm_pack.h"

#include <algorithm>

namespace qkv::cpu {
namespace {

// Copies `depth` runs of W values, `stride` apart, into one contiguous panel. W is a compile-time
// constant so the compiler turns each run into a few full-width vector moves.
template <int W, typename T>
void copy_runs(const T* src, int64_t stride, int64_t depth, T* dst) {
  for (int64_t p = 0; p < depth; ++p, src += stride, dst += W)
    for (int q = 0; q < W; ++q) dst[q] = src[q];
}

}  // namespace

template <typename T>
void pack_panels(const T* src, int64_t line_stride, int64_t depth_stride, int64_t lines,
                 int64_t depth, int width, T* dst, PackTransposed<T> transposed) {
  for (int64_t t0 = 0; t0 < lines; t0 += width, dst += width * depth) {
    const int64_t full = std::min<int64_t>(width, lines - t0);
    const T* s = src + t0 * line_stride;
    if (line_stride == 1 && full == width) {
      // The lines sit side by side in memory (B as stored, or A transposed): each depth step is
      // one contiguous run of `width` values.
      // The microkernels' tile widths (gemm_kernel_*.cpp): 32, 16 or 8 columns, 12 or 6 rows.
      switch (width) {
        case 32:
          copy_runs<32>(s, depth_stride, depth, dst);
          continue;
        case 16:
          copy_runs<16>(s, depth_stride, depth, dst);
          continue;
        case 12:
          copy_runs<12>(s, depth_stride, depth, dst);
          continue;
        case 8:
          copy_runs<8>(s, depth_stride, depth, dst);
          continue;
        case 6:
          copy_runs<6>(s, depth_stride, depth, dst);
          continue;
        default:
          break;
      }
      for (int64_t p = 0; p < depth; ++p) {
        const T* run = s + p * depth_stride;
        T* out = dst + p * width;
        for (int q = 0; q < width; ++q) out[q] = run[q];
      }
      continue;
    }
    if (depth_stride == 1 && transposed) {
      transposed(s, line_stride, full, depth, width, dst);
      continue;
    }
    // Each line runs along depth (A as stored, or B transposed): a transpose. Reading a line at a
    // time keeps the reads sequential; the strided writes land in a panel small enough for L1.
    for (int64_t q = 0; q < full; ++q) {
      const T* line = s + q * line_stride;
      for (int64_t p = 0; p < depth; ++p) dst[p * width + q] = line[p * depth_stride];
    }
    for (int64_t q = full; q < width; ++q)
      for (int64_t p = 0; p < depth; ++p) dst[p * width + q] = T(0);
  }
}

template void pack_panels<float>(const float*, int64_t, int64_t, int64_t, int64_t, int, float*,
                                 PackTransposed<float>);
template void pack_panels<double>(const double*, int64_t, int64_t, int64_t, int64_t, int, double*,
                                  PackTransposed<double>);

}  // namespace qkv::cpu
