// Random fills.
#include <algorithm>
#include <cmath>

#include "engine/cpu/bernoulli_avx512.h"
#include "engine/cpu/bernoulli_range.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/dispatch.h"
#include "engine/error.h"
#include "engine/example_draws.h"
#include "engine/parallel.h"
#include "engine/random.h"

namespace qkv::cpu {

namespace {
template <typename F>
void fill_with(const Tensor& out, F value_at) {
  QKV_DISPATCH_FLOAT(out.dtype(), "random", [&] {
    T* p = out.data<T>();
    parallel_for(0, out.numel(), 16384, [&](int64_t b, int64_t e) {
      // Philox is straight-line integer arithmetic on the counter: the lanes are independent and
      // the vectorized loop gives bit-identical numbers (docs/CPU_KERNELS.md, "Dropout masks").
      _Pragma("omp simd") for (int64_t i = b; i < e; ++i) p[i] = T(value_at(i));
    });
  });
}
// Whole blocks from the start of `blocks`, sixteen at a time where the CPU has AVX-512 (float32
// only); returns how many it wrote, and the caller's loop does the rest.
int64_t fill_bernoulli_vectorized(float* out, uint64_t seed, uint64_t first_block, int64_t blocks,
                                  uint64_t threshold, float value, uint64_t high = 0) {
  static const bool available = bernoulli_avx512_available();
  return available ? fill_bernoulli_avx512(out, seed, first_block, blocks, threshold, value, high)
                   : 0;
}
template <typename T>
int64_t fill_bernoulli_vectorized(T*, uint64_t, uint64_t, int64_t, uint64_t, T, uint64_t = 0) {
  return 0;
}
}  // namespace

void CpuBackend::random_uniform(const Tensor& out, uint64_t seed, uint64_t offset, double low,
                                double high) {
  fill_with(out, [&](int64_t i) {
    return philox::uniform_between(low, high, philox::uniform(seed, offset + i));
  });
}

void CpuBackend::random_normal(const Tensor& out, uint64_t seed, uint64_t offset, double mean,
                               double std) {
  fill_with(out, [&](int64_t i) {
    return philox::normal_with(mean, std, philox::normal(seed, offset + i));
  });
}

template <typename T>
void fill_bernoulli_range(T* out, uint64_t seed, uint64_t offset, uint64_t first, int64_t count,
                          uint64_t threshold, T value) {
  // The range may start or end inside a block: those few elements draw their block on their own.
  auto one = [&](uint64_t i) {
    out[i - first] = philox::bernoulli(seed, offset, i, threshold) ? value : T(0);
  };
  const uint64_t end = first + uint64_t(count);
  const uint64_t first_block = (first + 3) / 4, end_block = end / 4;
  if (first_block >= end_block) {
    for (uint64_t i = first; i < end; ++i) one(i);
    return;
  }
  for (uint64_t i = first; i < 4 * first_block; ++i) one(i);
  T* blocks = out + (4 * first_block - first);  // element 4 * first_block
  const int64_t vectorized = fill_bernoulli_vectorized(
      blocks, seed, offset + first_block, int64_t(end_block - first_block), threshold, value);
  _Pragma("omp simd") for (int64_t k = vectorized; k < int64_t(end_block - first_block); ++k) {
    const philox::Block w = philox::generate(seed, offset + first_block + uint64_t(k));
    for (int j = 0; j < 4; ++j) blocks[4 * k + j] = w.v[j] < threshold ? value : T(0);
  }
  for (uint64_t i = 4 * end_block; i < end; ++i) one(i);
}
template void fill_bernoulli_range<float>(float*, uint64_t, uint64_t, uint64_t, int64_t, uint64_t,
                                          float);
template void fill_bernoulli_range<double>(double*, uint64_t, uint64_t, uint64_t, int64_t, uint64_t,
                                           double);

template <typename T>
void fill_bernoulli_example_line(T* out, uint64_t key, uint64_t example, uint64_t c1, uint64_t c2,
                                 uint64_t c3, uint64_t width, uint64_t threshold, T value) {
  // the line's blocks: counters example_position(c1, c2, c3, 4 k) = first + k, high word example
  const uint64_t first = philox::example_position(c1, c2, c3, 0), blocks = width / 4;
  const int64_t vectorized =
      fill_bernoulli_vectorized(out, key, first, int64_t(blocks), threshold, value, example);
  for (uint64_t k = uint64_t(vectorized); k < blocks; ++k) {
    const philox::Block w = philox::generate(key, first + k, example);
    for (int j = 0; j < 4; ++j) out[4 * k + uint64_t(j)] = w.v[j] < threshold ? value : T(0);
  }
  if (width % 4 == 0) return;
  const philox::Block w = philox::generate(key, first + blocks, example);
  for (uint64_t c = 4 * blocks; c < width; ++c) out[c] = w.v[c % 4] < threshold ? value : T(0);
}
namespace {
// Line `line` of a row-major tensor of layout `l` whose row b holds example examples[b]: its
// coordinates (c1, c2, c3) and its row's example; next() steps to the line after it. The first
// line's coordinates come by division, each next one's by a carry from c3 to c2, c1 and the row
// (the divisions cost more than a short line's draws). The row's example is read when asked for,
// so stepping past the tensor's last line reads nothing.
class ExampleLines {
 public:
  ExampleLines(const int64_t* examples, const philox::ExampleLayout& l, uint64_t line)
      : examples_(examples), l_(l) {
    const uint64_t lines_per_row = l.d[0] * l.d[1] * l.d[2], rest = line % lines_per_row;
    row_ = line / lines_per_row;
    c1_ = rest / (l.d[2] * l.d[1]), c2_ = rest / l.d[2] % l.d[1], c3_ = rest % l.d[2];
  }
  uint64_t example() const { return uint64_t(examples_[row_]); }
  uint64_t c1() const { return c1_; }
  uint64_t c2() const { return c2_; }
  uint64_t c3() const { return c3_; }
  // the line's first block's counter
  uint64_t first_block() const { return philox::example_position(c1_, c2_, c3_, 0); }
  void next() {
    if (++c3_ < l_.d[2]) return;
    c3_ = 0;
    if (++c2_ < l_.d[1]) return;
    c2_ = 0;
    if (++c1_ < l_.d[0]) return;
    c1_ = 0;
    ++row_;
  }

 private:
  const int64_t* examples_;
  const philox::ExampleLayout& l_;
  uint64_t row_, c1_, c2_, c3_;
};
}  // namespace

template <typename T>
void fill_bernoulli_example_line_at(T* out, uint64_t key, const int64_t* examples,
                                    const philox::ExampleLayout& l, uint64_t line,
                                    uint64_t threshold, T value) {
  const ExampleLines e(examples, l, line);
  fill_bernoulli_example_line(out, key, e.example(), e.c1(), e.c2(), e.c3(), l.d[3], threshold,
                              value);
}

namespace {
// Short lines' blocks gathered a few hundred at a time (on the stack) for the AVX-512 fill; the
// last few, under a vector's sixteen, drawn one by one.
bool fill_short_example_lines(float* out, uint64_t key, const int64_t* examples,
                              const philox::ExampleLayout& l, uint64_t first_line, int64_t lines,
                              uint64_t threshold, float value) {
  static const bool available = bernoulli_avx512_available();
  const uint64_t width = l.d[3], per_line = (width + 3) / 4;
  if (!available || per_line >= 16) return false;
  constexpr int64_t kBatch = 256;  // a multiple of 16: a full batch is drawn whole
  PhiloxBlockAt blocks[kBatch];
  int64_t n = 0;
  auto draw = [&] {
    for (int64_t i = fill_bernoulli_blocks_avx512(blocks, n, key, threshold, value); i < n; ++i) {
      const philox::Block w = philox::generate(key, blocks[i].counter, blocks[i].high);
      for (int j = 0; j < blocks[i].count; ++j)
        blocks[i].out[j] = w.v[j] < threshold ? value : 0.0f;
    }
    n = 0;
  };
  ExampleLines line(examples, l, first_line);
  for (int64_t i = 0; i < lines; ++i, line.next()) {
    const uint64_t first = line.first_block(), example = line.example();
    for (uint64_t k = 0; k < per_line; ++k) {
      blocks[n++] = {first + k, example, out + i * int64_t(width) + int64_t(4 * k),
                     int(std::min<uint64_t>(4, width - 4 * k))};
      if (n == kBatch) draw();
    }
  }
  draw();
  return true;
}
template <typename T>
bool fill_short_example_lines(T*, uint64_t, const int64_t*, const philox::ExampleLayout&, uint64_t,
                              int64_t, uint64_t, T) {
  return false;
}
}  // namespace

template <typename T>
void fill_bernoulli_example_lines(T* out, uint64_t key, const int64_t* examples,
                                  const philox::ExampleLayout& l, uint64_t first_line,
                                  int64_t lines, uint64_t threshold, T value) {
  if (fill_short_example_lines(out, key, examples, l, first_line, lines, threshold, value)) return;
  for (int64_t i = 0; i < lines; ++i)
    fill_bernoulli_example_line_at(out + i * int64_t(l.d[3]), key, examples, l,
                                   first_line + uint64_t(i), threshold, value);
}

void bernoulli_example_line_words(uint64_t* words, uint64_t key, const int64_t* examples,
                                  const philox::ExampleLayout& l, uint64_t first_line,
                                  int64_t lines, uint64_t threshold) {
  static const bool available = bernoulli_avx512_available();
  const uint64_t width = l.d[3], per_line = (width + 3) / 4;
  QKV_CHECK(width >= 1 && width <= 64, "bernoulli_example_line_words",
            "needs lines of 1 to 64 elements, got ", width);
  const uint64_t line_bits = width == 64 ? ~uint64_t(0) : (uint64_t(1) << width) - 1;
  // A batch holds whole lines, their blocks one after the other, so line j's bits are bits
  // 4 per_line j on of the batch's bit string (four bits a block, in block order).
  constexpr int64_t kBlocks = 256;
  const int64_t lines_per_batch = kBlocks / int64_t(per_line);
  uint64_t counters[kBlocks], highs[kBlocks], bits[kBlocks / 16];
  ExampleLines line(examples, l, first_line);
  for (int64_t i0 = 0; i0 < lines; i0 += lines_per_batch) {
    const int64_t batch_lines = std::min(lines_per_batch, lines - i0);
    int64_t n = 0;
    for (int64_t j = 0; j < batch_lines; ++j, line.next()) {
      const uint64_t first = line.first_block(), example = line.example();
      for (uint64_t k = 0; k < per_line; ++k, ++n) counters[n] = first + k, highs[n] = example;
    }
    const int64_t drawn =
        available ? bernoulli_block_bits_avx512(counters, highs, n, key, threshold, bits) : 0;
    for (int64_t b = drawn; b < n; ++b) {  // the blocks short of a vector, one at a time
      if (b % 16 == 0) bits[b / 16] = 0;
      const philox::Block w = philox::generate(key, counters[b], highs[b]);
      for (int j = 0; j < 4; ++j)
        bits[b / 16] |= uint64_t(w.v[j] < threshold) << (4 * (b % 16) + j);
    }
    for (int64_t j = 0; j < batch_lines; ++j) {
      const uint64_t at = uint64_t(j) * 4 * per_line, word = at / 64, shift = at % 64;
      uint64_t line_word = bits[word] >> shift;
      if (shift + 4 * per_line > 64) line_word |= bits[word + 1] << (64 - shift);
      words[i0 + j] = line_word & line_bits;
    }
  }
}

template void fill_bernoulli_example_lines<float>(float*, uint64_t, const int64_t*,
                                                  const philox::ExampleLayout&, uint64_t, int64_t,
                                                  uint64_t, float);
template void fill_bernoulli_example_lines<double>(double*, uint64_t, const int64_t*,
                                                   const philox::ExampleLayout&, uint64_t, int64_t,
                                                   uint64_t, double);
template void fill_bernoulli_example_line_at<float>(float*, uint64_t, const int64_t*,
                                                    const philox::ExampleLayout&, uint64_t,
                                                    uint64_t, float);
template void fill_bernoulli_example_line_at<double>(double*, uint64_t, const int64_t*,
                                                     const philox::ExampleLayout&, uint64_t,
                                                     uint64_t, double);

template void fill_bernoulli_example_line<float>(float*, uint64_t, uint64_t, uint64_t, uint64_t,
                                                 uint64_t, uint64_t, uint64_t, float);
template void fill_bernoulli_example_line<double>(double*, uint64_t, uint64_t, uint64_t, uint64_t,
                                                  uint64_t, uint64_t, uint64_t, double);

void CpuBackend::random_bernoulli(const Tensor& out, uint64_t seed, uint64_t offset, double p,
                                  double value) {
  const uint64_t threshold = philox::bernoulli_threshold(p);
  QKV_DISPATCH_FLOAT(out.dtype(), "random_bernoulli", [&] {
    T* o = out.data<T>();
    parallel_for(0, out.numel(), 16384, [&](int64_t b, int64_t e) {
      fill_bernoulli_range(o + b, seed, offset, uint64_t(b), e - b, threshold, T(value));
    });
  });
}

void CpuBackend::random_bernoulli_by_example(const Tensor& out, uint64_t key,
                                             const Tensor& examples, double p, double value) {
  const philox::ExampleLayout l = example_layout(out.shape(), size_t(examples.numel()), "dropout");
  if (out.numel() == 0) return;
  const uint64_t threshold = philox::bernoulli_threshold(p);
  const int64_t* example = examples.data<int64_t>();
  const uint64_t width = l.d[3];
  const int64_t lines = out.numel() / int64_t(width);
  QKV_DISPATCH_FLOAT(out.dtype(), "random_bernoulli_by_example", [&] {
    T* o = out.data<T>();
    const T v = T(value);
    parallel_for(0, lines, std::max<int64_t>(1, 16384 / int64_t(width)), [&](int64_t b, int64_t e) {
      for (int64_t line = b; line < e; ++line)  // one line of the last dim
        fill_bernoulli_example_line_at(o + line * int64_t(width), key, example, l, uint64_t(line),
                                       threshold, v);
    });
  });
}

}  // namespace qkv::cpu
