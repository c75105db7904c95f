// Dropout in one pass over memory. Each thread draws its stretch of the keep decisions a thousand
// elements at a time into a buffer that stays in L1, with the Bernoulli fills' own code
// (engine/cpu/bernoulli_range.h, AVX-512 Philox where the CPU has it), so the decisions are the
// fill's bit for bit; then it multiplies x by the buffer, writing y, and one byte per element (1:
// kept) for the backward. The composed path writes a float mask to memory, reads it back in the
// multiply and again in the multiply's backward; here the backward reads a quarter of that.
//
// The same pass applies gelu first when the feed-forward block asks for dropout of gelu(x): the
// activation is computed as x is read, and the backward multiplies by gelu'(x) as it applies the
// mask, so the hidden activation and its gradient are never written out and read back. And a
// residual block's sum, residual + dropout(x), adds the residual in the same pass, so the dropped
// tensor is never written out and read back by an add.
#include <algorithm>
#include <type_traits>
#include <vector>

#include "engine/cpu/bernoulli_range.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/prefetch.h"
#include "engine/cpu/vec_math.h"
#include "engine/dispatch.h"
#include "engine/example_draws.h"
#include "engine/gelu.h"
#include "engine/parallel.h"
#include "engine/random.h"

namespace qkv::cpu {

namespace {

constexpr int64_t kStretch = 1024;  // elements drawn at a time (a multiple of 64: whole groups)

// What the mask multiplies: x itself (dropout), or gelu(x) computed as the unary kernel does.
struct Identity {
  template <typename T>
  T operator()(T v) const {
    return v;
  }
};
struct GeluErf {
  template <typename T>
  T operator()(T v) const {
    return gelu_erf<CpuMath>(v);
  }
  template <typename T>
  static T derivative(T v) {
    return gelu_erf_grad<CpuMath>(v);
  }
};
struct GeluTanh {
  template <typename T>
  T operator()(T v) const {
    return gelu_tanh(v);
  }
  template <typename T>
  static T derivative(T v) {
    return gelu_tanh_grad(v);
  }
};

// y = act(x) * mask and keep = (mask != 0) over n elements: mask is the fill's value (the scale)
// or 0, so y is bitwise the composed multiply (of the activation the unary kernel writes). With a
// residual, y = residual + that: added by a second loop over the stretch, still in L1, because in
// one expression the compiler would fuse the multiply and the add into an FMA, rounding once
// where the two ops round twice.
template <typename T, typename Act>
void apply(const T* x, const T* mask, const T* residual, T* y, uint8_t* keep, int64_t n, Act act) {
  _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) {
    y[i] = act(x[i]) * mask[i];
    keep[i] = mask[i] != T(0);
  }
  if (residual) {
    _Pragma("omp simd") for (int64_t i = 0; i < n; ++i) y[i] = residual[i] + y[i];
  }
}

// Elements [begin, end) of the sequential stream, in stretches aligned to kStretch so that the
// fill's sixteen-block groups start on whole blocks.
template <typename T, typename Act>
void dropout_sequential(const T* x, const T* residual, T* y, uint8_t* keep, uint64_t seed,
                        uint64_t offset, int64_t begin, int64_t end, uint64_t threshold, T scale,
                        Act act) {
  T mask[kStretch];
  for (int64_t first = begin; first < end;) {
    const int64_t last = std::min(end, (first / kStretch + 1) * kStretch);
    fill_bernoulli_range(mask, seed, offset, uint64_t(first), last - first, threshold, scale);
    apply(x + first, mask, residual ? residual + first : nullptr, y + first, keep + first,
          last - first, act);
    first = last;
  }
}

// Lines [begin, end) of the last dim (width l.d[3]) of a fill by example. The next line's output
// lines are asked for while this line's decisions are drawn: in a training step y and keep are
// blocks the allocator hands back, last written by either core, and a write to a line the other
// core holds waits for it; asked for ahead, those waits overlap the drawing (docs/CPU_KERNELS.md,
// "Adam in one job, dropout's writes asked for early"). The sequential path was not measured in
// a step.
template <typename T, typename Act>
void dropout_by_example(const T* x, const T* residual, T* y, uint8_t* keep, uint64_t key,
                        const int64_t* examples, const philox::ExampleLayout& l, int64_t begin,
                        int64_t end, uint64_t threshold, T scale, Act act) {
  const uint64_t width = l.d[3];
  std::vector<T> mask(width);
  for (int64_t line = begin; line < end; ++line) {
    const int64_t at = line * int64_t(width);
    if (line + 1 < end) {
      prefetch_for_writing(y + at + int64_t(width), int64_t(width));
      prefetch_for_writing(keep + at + int64_t(width), int64_t(width));
    }
    fill_bernoulli_example_line_at(mask.data(), key, examples, l, uint64_t(line), threshold, scale);
    apply(x + at, mask.data(), residual ? residual + at : nullptr, y + at, keep + at,
          int64_t(width), act);
  }
}

// out = act(x) * mask, plus the residual where one is given, in one pass; returns the one-byte
// mask.
template <typename Act>
Tensor masked_forward(const Tensor& x, const Tensor& residual, const DropoutDraws& draws, double p,
                      const Tensor& out, Act act, const char* op) {
  Tensor keep = Tensor::empty(x.shape(), DType::b8, x.device());
  const int64_t n = x.numel();
  if (n == 0) return keep;
  // the probabilities and the scale exactly as the composed fill computes them
  const uint64_t threshold = philox::bernoulli_threshold(1 - p);
  const double scale = 1.0 / (1 - p);
  uint8_t* k = keep.data<uint8_t>();
  QKV_DISPATCH_FLOAT(x.dtype(), op, [&] {
    const T* xp = x.data<T>();
    const T* rp = residual.defined() ? residual.data<T>() : nullptr;
    T* yp = out.data<T>();
    if (!draws.examples.defined()) {
      parallel_for(0, n, 16384, [&](int64_t b, int64_t e) {
        dropout_sequential(xp, rp, yp, k, draws.seed, draws.offset, b, e, threshold, T(scale), act);
      });
      return;
    }
    const philox::ExampleLayout l = example_layout(x.shape(), size_t(draws.examples.numel()), op);
    const int64_t width = int64_t(l.d[3]);
    const int64_t* examples = draws.examples.data<int64_t>();
    parallel_for(0, n / width, std::max<int64_t>(1, 16384 / width), [&](int64_t b, int64_t e) {
      dropout_by_example(xp, rp, yp, k, draws.key, examples, l, b, e, threshold, T(scale), act);
    });
  });
  return keep;
}

// gx = (gy * mask) * act'(x), or gy * mask without an activation (Act = Identity).
template <typename Act>
void masked_backward(const Tensor& gy, const Tensor& x, const Tensor& mask, double p,
                     const Tensor& gx, const char* op) {
  const double scale = 1.0 / (1 - p);
  const uint8_t* k = mask.data<uint8_t>();
  QKV_DISPATCH_FLOAT(gy.dtype(), op, [&] {
    const T* g = gy.data<T>();
    const T* xp = x.defined() ? x.data<T>() : nullptr;
    T* o = gx.data<T>();
    const T kept = T(scale);
    parallel_for(0, gy.numel(), 16384, [&](int64_t b, int64_t e) {
      // g times the mask's value, kept * 1 or kept * 0 = +0: bitwise the composed backward's
      // multiply, without a branch on the random decision; then gelu's backward of that
      if constexpr (std::is_same_v<Act, Identity>) {
        _Pragma("omp simd") for (int64_t i = b; i < e; ++i) o[i] = g[i] * (T(k[i]) * kept);
      } else {
        _Pragma("omp simd") for (int64_t i = b; i < e; ++i) {
          o[i] = (g[i] * (T(k[i]) * kept)) * Act::derivative(xp[i]);
        }
      }
    });
  });
}

bool fused_dtype(const Tensor& t) { return t.dtype() == DType::f32 || t.dtype() == DType::f64; }

}  // namespace

Tensor CpuBackend::dropout_forward(const Tensor& x, const DropoutDraws& draws, double p,
                                   const Tensor& out) {
  if (!fused_dtype(x)) return Backend::dropout_forward(x, draws, p, out);
  return masked_forward(x, Tensor(), draws, p, out, Identity{}, "dropout");
}

void CpuBackend::dropout_backward(const Tensor& gy, const Tensor& mask, double p,
                                  const Tensor& gx) {
  if (mask.dtype() != DType::b8) return Backend::dropout_backward(gy, mask, p, gx);
  masked_backward<Identity>(gy, Tensor(), mask, p, gx, "dropout_backward");
}

Tensor CpuBackend::gelu_dropout_forward(const Tensor& x, UnaryOp gelu, const DropoutDraws& draws,
                                        double p, const Tensor& out) {
  if (!fused_dtype(x)) return Backend::gelu_dropout_forward(x, gelu, draws, p, out);
  if (gelu == UnaryOp::gelu_tanh)
    return masked_forward(x, Tensor(), draws, p, out, GeluTanh{}, "gelu_dropout");
  return masked_forward(x, Tensor(), draws, p, out, GeluErf{}, "gelu_dropout");
}

void CpuBackend::gelu_dropout_backward(const Tensor& gy, const Tensor& x, UnaryOp gelu,
                                       const Tensor& mask, double p, const Tensor& gx) {
  if (mask.dtype() != DType::b8) return Backend::gelu_dropout_backward(gy, x, gelu, mask, p, gx);
  if (gelu == UnaryOp::gelu_tanh)
    return masked_backward<GeluTanh>(gy, x, mask, p, gx, "gelu_dropout_backward");
  masked_backward<GeluErf>(gy, x, mask, p, gx, "gelu_dropout_backward");
}

Tensor CpuBackend::dropout_add_forward(const Tensor& x, const Tensor& residual,
                                       const DropoutDraws& draws, double p, const Tensor& out) {
  if (!fused_dtype(x)) return Backend::dropout_add_forward(x, residual, draws, p, out);
  return masked_forward(x, residual, draws, p, out, Identity{}, "dropout_add");
}

}  // namespace qkv::cpu
