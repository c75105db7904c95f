// Reductions over any set of dims. The reduced dims are moved together (a permute, which copies
// only if they are not already adjacent) so the kernel sees a [outer, reduced, inner] block.
#include <algorithm>
#include <numeric>

#include "engine/op_declaration.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"

namespace qkv {

namespace {

std::vector<int> normalize_dims(const Tensor& x, std::vector<int> dims, const char* op) {
  if (dims.empty()) {
    dims.resize(x.dim());
    std::iota(dims.begin(), dims.end(), 0);
  }
  for (int& d : dims) d = normalize_dim(d, x.dim(), op);
  std::sort(dims.begin(), dims.end());
  QKV_CHECK(std::adjacent_find(dims.begin(), dims.end()) == dims.end(), op, "a dim is repeated");
  return dims;
}

Shape reduced_shape(const Tensor& x, const std::vector<int>& dims, bool keepdim) {
  Shape s;
  for (int d = 0; d < x.dim(); ++d) {
    bool reduced = std::binary_search(dims.begin(), dims.end(), d);
    if (!reduced)
      s.push_back(x.shape()[d]);
    else if (keepdim)
      s.push_back(1);
  }
  return s;
}

// Runs the reduction kernel; returns the result with keepdim shape.
Tensor reduce_kernel(ReduceOp op, const Tensor& x, const std::vector<int>& dims, const char* name) {
  detail::check_defined(x, name);
  Shape keep = reduced_shape(x, dims, true);
  bool adjacent = dims.empty() || dims.back() - dims.front() + 1 == int(dims.size());
  Tensor src = x.detach();
  int first = dims.empty() ? 0 : dims.front();
  if (!adjacent) {
    // move the reduced dims to the end: [kept..., reduced...]
    std::vector<int> order;
    for (int d = 0; d < x.dim(); ++d)
      if (!std::binary_search(dims.begin(), dims.end(), d)) order.push_back(d);
    first = int(order.size());
    order.insert(order.end(), dims.begin(), dims.end());
    src = permute(src, order);
  }
  src = detail::contiguous_data(src);
  const Split3 block = split_at(src.shape(), first, first + int(dims.size()) - 1);
  const int64_t reduced = block.mid;
  QKV_CHECK(reduced > 0 || op == ReduceOp::sum, name,
            "cannot reduce over an empty dimension (shape ", shape_str(x.shape()), ")");
  bool index = op == ReduceOp::argmax || op == ReduceOp::argmin;
  Tensor out = Tensor::empty(keep, index ? DType::i64 : x.dtype(), x.device());
  if (reduced == 0) {
    x.backend().fill(out, 0.0);
    return out;
  }
  x.backend().reduce(op, detail::block_view(src, block), out);
  return out;
}

}  // namespace

QKV_RECORDED_OP("sum", "engine", composed);
Tensor sum(const Tensor& x, std::vector<int> dims, bool keepdim) {
  detail::check_defined(x, "sum");
  dims = normalize_dims(x, dims, "sum");
  Tensor kept = reduce_kernel(ReduceOp::sum, x, dims, "sum");
  Tensor y = keepdim ? kept
                     : make_view(kept, reduced_shape(x, dims, false),
                                 contiguous_strides(reduced_shape(x, dims, false)), 0);
  return record("sum", {x}, y, [in = x.shape(), keep = kept.shape()](const Tensor& gy) {
    return grads{expand(reshape(gy, keep), in)};
  });
}

Tensor mean(const Tensor& x, std::vector<int> dims, bool keepdim) {
  detail::check_defined(x, "mean");
  detail::check_f32_or_f64(x, "mean");
  dims = normalize_dims(x, dims, "mean");
  int64_t count = 1;
  for (int d : dims) count *= x.shape()[d];
  QKV_CHECK(count > 0, "mean", "mean over an empty dimension (shape ", shape_str(x.shape()), ")");
  return mul(sum(x, dims, keepdim), 1.0 / double(count));
}

Tensor var(const Tensor& x, std::vector<int> dims, bool unbiased, bool keepdim) {
  detail::check_f32_or_f64(x, "var");
  dims = normalize_dims(x, dims, "var");
  int64_t count = 1;
  for (int d : dims) count *= x.shape()[d];
  QKV_CHECK(count > (unbiased ? 1 : 0), "var", "needs more than ", unbiased ? 1 : 0,
            " elements per reduction, got ", count);
  Tensor centered = sub(x, mean(x, dims, true));
  return mul(sum(square(centered), dims, keepdim), 1.0 / double(count - (unbiased ? 1 : 0)));
}

namespace {
QKV_RECORDED_OP("amax", "engine", composed);
QKV_RECORDED_OP("amin", "engine", composed);
Tensor extreme(const Tensor& x, std::vector<int> dims, bool keepdim, bool is_max) {
  const char* name = is_max ? "amax" : "amin";
  detail::check_defined(x, name);
  dims = normalize_dims(x, dims, name);
  Tensor kept = reduce_kernel(is_max ? ReduceOp::max : ReduceOp::min, x, dims, name);
  Shape out_shape = reduced_shape(x, dims, keepdim);
  Tensor y = make_view(kept, out_shape, contiguous_strides(out_shape), 0);
  return record(name, {x}, y, [x, kept, dims](const Tensor& gy) {
    Tensor g = reshape(gy, kept.shape());
    // A create_graph backward (grad enabled) records the composed formula, which can be
    // differentiated again; otherwise adjacent dims take the backend's one-pass kernel.
    const bool adjacent = !dims.empty() && dims.back() - dims.front() + 1 == int(dims.size());
    if (grad_enabled() || !adjacent) return grads{detail::extreme_gradient(x, kept, g, dims)};
    const Split3 block = split_at(x.shape(), dims.front(), dims.back());
    Tensor gx = Tensor::empty(x.shape(), x.dtype(), x.device());
    x.backend().extreme_backward(detail::block_view(detail::contiguous_data(x), block),
                                 detail::reduced_block_view(kept, block),
                                 detail::reduced_block_view(detail::contiguous_data(g), block),
                                 detail::block_view(gx, block));
    return grads{gx};
  });
}
}  // namespace

namespace detail {
Tensor extreme_gradient(const Tensor& x, const Tensor& kept, const Tensor& gy,
                        const std::vector<int>& dims) {
  // every element equal to the extremum shares the gradient equally: (gy / count) * hit, as
  // PyTorch computes it (gy divided once per reduced value, not 1 / count per element: one
  // full-size pass fewer, and gy / 3 rather than (1 / 3) * gy)
  Tensor hit = eq(x, kept).to(gy.dtype());
  return mul(hit, div(gy, sum(hit, dims, true)));
}
}  // namespace detail

Tensor amax(const Tensor& x, std::vector<int> dims, bool keepdim) {
  return extreme(x, dims, keepdim, true);
}

Tensor amin(const Tensor& x, std::vector<int> dims, bool keepdim) {
  return extreme(x, dims, keepdim, false);
}

namespace detail {
Tensor mean_amax_gradient(const Tensor& x, const Tensor& out, const Tensor& gy,
                          const std::vector<int>& dims) {
  const Shape keep = reduced_shape(x, dims, true);
  const int pair = dims.front();
  int64_t count = 1;
  for (int d : dims) count *= x.shape()[d];
  // mean = sum * (1 / count): mul's gradient by the scalar, then sum's (broadcast)
  Tensor g_mean = expand(mul(reshape(select(gy, pair, 0), keep), 1.0 / double(count)), x.shape());
  Tensor g_max = extreme_gradient(x, reshape(select(out, pair, 1), keep),
                                  reshape(select(gy, pair, 1), keep), dims);
  return add(g_mean, g_max);
}
}  // namespace detail

// The backward is one kernel (Backend::mean_amax_backward), or with create_graph the composed
// formula, which can be differentiated again.
QKV_RECORDED_OP("mean_amax", "engine", composed);
Tensor mean_amax(const Tensor& x, std::vector<int> dims) {
  const char* name = "mean_amax";
  detail::check_defined(x, name);
  detail::check_f32_or_f64(x, name);
  QKV_CHECK(!dims.empty(), name, "needs the dims to reduce, got none");
  dims = normalize_dims(x, dims, name);
  QKV_CHECK(dims.back() - dims.front() + 1 == int(dims.size()), name,
            "the dims must be adjacent (the pair's axis takes their place)");
  const Split3 block = split_at(x.shape(), dims.front(), dims.back());
  QKV_CHECK(block.mid > 0, name, "cannot reduce over an empty dimension (shape ",
            shape_str(x.shape()), ")");
  Shape shape = reduced_shape(x, dims, true);
  shape.erase(shape.begin() + dims.front(), shape.begin() + dims.back());
  shape[size_t(dims.front())] = 2;  // [..., 2, ...]: mean, then max
  Tensor out = Tensor::empty(shape, x.dtype(), x.device());
  const Tensor xc = detail::contiguous_data(x);
  const Split3 pairs{block.outer, 2, block.inner};
  if (out.numel() > 0)
    x.backend().mean_amax(detail::block_view(xc, block), detail::block_view(out, pairs));
  // the lambda keeps out's values without its autograd edge: no cycle through the node
  const Tensor kept = out.detach();
  return record(name, {x}, out, [xc, kept, dims, block, pairs](const Tensor& gy) {
    if (grad_enabled()) return grads{detail::mean_amax_gradient(xc, kept, gy, dims)};
    // into the sum of x's other gradients where the sweep offers it (CBAM's pools: x also feeds a
    // product), else a new tensor
    const Tensor sum = detail::offered_gradient_sum(0, xc);
    const bool into_sum = sum.defined();
    Tensor gx = into_sum ? sum : Tensor::empty(xc.shape(), xc.dtype(), xc.device());
    if (gx.numel() > 0)
      xc.backend().mean_amax_backward(detail::block_view(xc, block),
                                      detail::block_view(kept, pairs),
                                      detail::block_view(detail::contiguous_data(gy), pairs),
                                      detail::block_view(gx, block), into_sum);
    return grads{gx};
  });
}

namespace {
Tensor arg_extreme(const Tensor& x, int dim, bool keepdim, bool is_max) {
  const char* name = is_max ? "argmax" : "argmin";
  detail::check_defined(x, name);
  std::vector<int> dims{normalize_dim(dim, x.dim(), name)};
  Tensor kept = reduce_kernel(is_max ? ReduceOp::argmax : ReduceOp::argmin, x, dims, name);
  Shape s = reduced_shape(x, dims, keepdim);
  return make_view(kept, s, contiguous_strides(s), 0);
}
}  // namespace

Tensor argmax(const Tensor& x, int dim, bool keepdim) { return arg_extreme(x, dim, keepdim, true); }
Tensor argmin(const Tensor& x, int dim, bool keepdim) {
  return arg_extreme(x, dim, keepdim, false);
}

ValuesIndices max(const Tensor& x, int dim, bool keepdim) {
  return {amax(x, {dim}, keepdim), argmax(x, dim, keepdim)};
}
ValuesIndices min(const Tensor& x, int dim, bool keepdim) {
  return {amin(x, {dim}, keepdim), argmin(x, dim, keepdim)};
}

}  // namespace qkv
