// Tensor factories: constants, ranges, random tensors and tensors from host values.
#include <cmath>
#include <utility>

#include "engine/backend.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"
#include "engine/profiler.h"

namespace qkv {

namespace {
Tensor finish(Tensor t, const TensorOptions& opts) {
  if (opts.requires_grad) t.requires_grad_();
  return t;
}
}  // namespace

Tensor full(const Shape& shape, double value, TensorOptions opts) {
  Tensor t = Tensor::empty(shape, opts.dtype, opts.device);
  t.backend().fill(t, value);
  return finish(t, opts);
}
Tensor zeros(const Shape& shape, TensorOptions opts) { return full(shape, 0.0, opts); }
Tensor ones(const Shape& shape, TensorOptions opts) { return full(shape, 1.0, opts); }
Tensor zeros_like(const Tensor& t) { return full(t.shape(), 0.0, {t.dtype(), t.device()}); }
Tensor ones_like(const Tensor& t) { return full(t.shape(), 1.0, {t.dtype(), t.device()}); }
Tensor full_like(const Tensor& t, double value) {
  return full(t.shape(), value, {t.dtype(), t.device()});
}

Tensor arange(double start, double end, double step, TensorOptions opts) {
  QKV_CHECK(step != 0, "arange", "step must be non-zero");
  int64_t n = std::max<int64_t>(0, int64_t(std::ceil((end - start) / step)));
  std::vector<double> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = start + double(i) * step;
  return tensor(values, {n}, opts);
}
Tensor arange(int64_t end, TensorOptions opts) { return arange(0.0, double(end), 1.0, opts); }

Tensor tensor(const std::vector<double>& values, const Shape& shape, TensorOptions opts) {
  Shape s = shape.empty() ? Shape{int64_t(values.size())} : shape;
  QKV_CHECK(numel(s) == int64_t(values.size()), "tensor", values.size(),
            " values do not fill shape ", shape_str(s));
  Tensor host = Tensor::empty(s, DType::f64, Device::cpu());
  std::copy(values.begin(), values.end(), host.data<double>());
  Tensor out = Tensor::empty(s, opts.dtype, Device::cpu());
  out.backend().copy(host, out);
  return finish(opts.device.is_cpu() ? out : to_device(out, opts.device), opts);
}

Tensor tensor_i64(const std::vector<int64_t>& values, const Shape& shape, Device device) {
  Shape s = shape.empty() ? Shape{int64_t(values.size())} : shape;
  QKV_CHECK(numel(s) == int64_t(values.size()), "tensor", values.size(),
            " values do not fill shape ", shape_str(s));
  Tensor out = Tensor::empty(s, DType::i64, Device::cpu());
  std::copy(values.begin(), values.end(), out.data<int64_t>());
  return device.is_cpu() ? out : to_device(out, device);
}

Tensor scalar_tensor(double value, TensorOptions opts) { return full({}, value, opts); }

namespace {
Generator& pick(Generator* gen) { return gen ? *gen : default_generator(); }
}  // namespace

Tensor uniform(const Shape& shape, double low, double high, TensorOptions opts, Generator* gen) {
  Tensor t = Tensor::empty(shape, opts.dtype, opts.device);
  Generator& g = pick(gen);
  t.backend().random_uniform(t, g.seed(), g.take(t.numel()), low, high);
  // Random fills record no node, but the profiler should see them (dropout's mask, init).
  if (profiling()) profile_hooks::op_finished("uniform", {}, t);
  return finish(t, opts);
}
Tensor rand(const Shape& shape, TensorOptions opts, Generator* gen) {
  return uniform(shape, 0.0, 1.0, opts, gen);
}
Tensor randn(const Shape& shape, TensorOptions opts, Generator* gen) {
  Tensor t = Tensor::empty(shape, opts.dtype, opts.device);
  Generator& g = pick(gen);
  t.backend().random_normal(t, g.seed(), g.take(t.numel()), 0.0, 1.0);
  if (profiling()) profile_hooks::op_finished("randn", {}, t);
  return finish(t, opts);
}
Tensor bernoulli(const Shape& shape, double p, TensorOptions opts, Generator* gen, double value) {
  QKV_CHECK(p >= 0 && p <= 1, "bernoulli", "probability ", p, " is outside [0, 1]");
  Tensor t = Tensor::empty(shape, opts.dtype, opts.device);
  Generator& g = pick(gen);
  t.backend().random_bernoulli(t, g.seed(), g.take(t.numel()), p, value);
  if (profiling()) profile_hooks::op_finished("bernoulli", {}, t);
  return t;
}

Generator& default_generator() {
  static Generator gen;
  return gen;
}
void manual_seed(uint64_t seed) { default_generator().manual_seed(seed); }

namespace {
// Elements [first, last] of the storage that `t` can touch (all strides are >= 0 in qkv).
std::pair<int64_t, int64_t> element_span(const Tensor& t) {
  int64_t last = t.offset();
  for (int i = 0; i < t.dim(); ++i) last += (t.size(i) - 1) * t.strides()[size_t(i)];
  return {t.offset(), last};
}
}  // namespace

void copy_(const Tensor& dst, const Tensor& src) {
  detail::check_same_device(dst, src, "copy_");
  Shape s = broadcast_shapes(dst.shape(), src.shape(), "copy_");
  QKV_CHECK(s == dst.shape(), "copy_", "source of shape ", shape_str(src.shape()),
            " does not broadcast to destination ", shape_str(dst.shape()));
  if (dst.numel() == 0) return;
  // Several elements of dst in one place (an expanded view): which write lands is up to the
  // kernel's threads. PyTorch refuses it too.
  for (int i = 0; i < dst.dim(); ++i)
    QKV_CHECK(dst.size(i) == 1 || dst.strides()[size_t(i)] != 0, "copy_", "the destination ",
              shape_str(dst.shape()), " has strides ", shape_str(dst.strides()),
              ": its elements share memory (an expanded view); copy into a tensor of its own");
  // Source and destination in overlapping memory (x[1:] = x[:-1]): the kernels read and write in
  // any order, so read the source into a copy of its own first. Copying a view onto itself is a
  // no-op.
  Tensor from = src;
  if (src.numel() > 0 && dst.same_storage(src)) {
    if (dst.offset() == src.offset() && dst.shape() == src.shape() &&
        dst.strides() == src.strides() && dst.dtype() == src.dtype())
      return;
    const auto [d0, d1] = element_span(dst);
    const auto [s0, s1] = element_span(src);
    if (d0 <= s1 && s0 <= d1) from = src.clone();
  }
  dst.backend().copy(detail::broadcast_view(from, dst.shape()), dst);
}

void fill_(const Tensor& dst, double value) {
  if (dst.is_contiguous()) {
    dst.backend().fill(dst, value);
  } else {
    dst.backend().copy(full({}, value, {dst.dtype(), dst.device()}).expand(dst.shape()).detach(),
                       dst);
  }
}

}  // namespace qkv
