// Views and shape changes. A view shares storage with its input; its backward maps the output's
// gradient back to the input's shape (reshape back, inverse permutation, pad, sum over expansion).
#include <algorithm>
#include <numeric>

#include "engine/op_declaration.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"

namespace qkv {

namespace detail {

Tensor broadcast_view(const Tensor& t, const Shape& shape) {
  if (t.shape() == shape) return t.detach();
  const size_t rank = shape.size(), lead = rank - t.shape().size();
  Strides strides(rank, 0);
  for (size_t d = 0; d < t.shape().size(); ++d)
    strides[lead + d] = t.shape()[d] == 1 && shape[lead + d] != 1 ? 0 : t.strides()[d];
  return make_view(t, shape, strides, t.offset());
}

}  // namespace detail

namespace {

// Fills in a -1 and checks the element count.
Shape infer_shape(const Tensor& x, Shape shape, const char* op) {
  int64_t known = 1, infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      QKV_CHECK(infer < 0, op, "only one dimension can be -1 in ", shape_str(shape));
      infer = int64_t(i);
    } else {
      QKV_CHECK(shape[i] >= 0, op, "invalid size ", shape[i], " in ", shape_str(shape));
      known *= shape[i];
    }
  }
  if (infer >= 0) {
    QKV_CHECK(known != 0 && x.numel() % known == 0, op, "cannot reshape ", shape_str(x.shape()),
              " (", x.numel(), " elements) to ", shape_str(shape));
    shape[infer] = x.numel() / known;
  }
  QKV_CHECK(numel(shape) == x.numel(), op, "cannot reshape ", shape_str(x.shape()), " (", x.numel(),
            " elements) to ", shape_str(shape), " (", numel(shape), " elements)");
  return shape;
}

// Strides that view x's data with `shape` without copying, if any exist (PyTorch's rule: each
// group of old dims that is merged or split must be contiguous within itself).
bool view_strides(const Tensor& x, const Shape& shape, Strides& out) {
  if (x.numel() == 0 || x.is_contiguous()) {
    out = contiguous_strides(shape);
    return true;
  }
  const Shape& os = x.shape();
  const Strides& ost = x.strides();
  out.assign(shape.size(), 0);
  int64_t view_d = int64_t(shape.size()) - 1;
  int64_t chunk_base_stride = ost.empty() ? 1 : ost.back();
  int64_t tensor_numel = 1, view_numel = 1;
  for (int64_t d = int64_t(os.size()) - 1; d >= 0; --d) {
    tensor_numel *= os[d];
    if (d == 0 || (os[d - 1] != 1 && ost[d - 1] != tensor_numel * chunk_base_stride)) {
      while (view_d >= 0 && (view_numel < tensor_numel || shape[view_d] == 1)) {
        out[view_d] = view_numel * chunk_base_stride;
        view_numel *= shape[view_d];
        --view_d;
      }
      if (view_numel != tensor_numel) return false;
      if (d > 0) {
        chunk_base_stride = ost[d - 1];
        tensor_numel = 1;
        view_numel = 1;
      }
    }
  }
  return view_d == -1;
}

QKV_RECORDED_OP("reshape", "engine", composed);
QKV_RECORDED_OP("view", "engine", composed);
Tensor reshape_impl(const Tensor& x, const Shape& requested, bool allow_copy, const char* op) {
  detail::check_defined(x, op);
  Shape shape = infer_shape(x, requested, op);
  Strides strides;
  Tensor y;
  if (view_strides(x, shape, strides)) {
    y = make_view(x, shape, strides, x.offset());
  } else {
    QKV_CHECK(allow_copy, op, "the input of shape ", shape_str(x.shape()),
              " is not contiguous in a way that allows viewing it as ", shape_str(shape),
              "; call contiguous() first or use reshape");
    y = detail::contiguous_data(x);
    y = make_view(y, shape, contiguous_strides(shape), y.offset());
  }
  Shape in_shape = x.shape();
  return record(op, {x}, y, [in_shape](const Tensor& gy) { return grads{reshape(gy, in_shape)}; });
}

}  // namespace

Tensor reshape(const Tensor& x, const Shape& shape) {
  return reshape_impl(x, shape, true, "reshape");
}
Tensor view(const Tensor& x, const Shape& shape) { return reshape_impl(x, shape, false, "view"); }

QKV_RECORDED_OP("permute", "engine", composed);
Tensor permute(const Tensor& x, const std::vector<int>& dims) {
  detail::check_defined(x, "permute");
  QKV_CHECK(int(dims.size()) == x.dim(), "permute", "got ", dims.size(),
            " dims for a tensor of rank ", x.dim());
  std::vector<int> d(dims.size()), inverse(dims.size());
  std::vector<bool> used(dims.size(), false);
  Shape shape(dims.size());
  Strides strides(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) {
    d[i] = normalize_dim(dims[i], x.dim(), "permute");
    QKV_CHECK(!used[d[i]], "permute", "dim ", d[i], " repeated");
    used[d[i]] = true;
    shape[i] = x.shape()[d[i]];
    strides[i] = x.strides()[d[i]];
    inverse[d[i]] = int(i);
  }
  Tensor y = make_view(x, shape, strides, x.offset());
  return record("permute", {x}, y,
                [inverse](const Tensor& gy) { return grads{permute(gy, inverse)}; });
}

Tensor transpose(const Tensor& x, int dim0, int dim1) {
  detail::check_defined(x, "transpose");
  std::vector<int> dims(x.dim());
  std::iota(dims.begin(), dims.end(), 0);
  if (x.dim() == 0) return x;
  std::swap(dims[normalize_dim(dim0, x.dim(), "transpose")],
            dims[normalize_dim(dim1, x.dim(), "transpose")]);
  return permute(x, dims);
}

QKV_RECORDED_OP("narrow", "engine", composed);
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length) {
  detail::check_defined(x, "narrow");
  QKV_CHECK(x.dim() > 0, "narrow", "cannot narrow a 0-d tensor");
  int d = normalize_dim(dim, x.dim(), "narrow");
  const int64_t size = x.shape()[d];
  if (start < 0) start += size;
  QKV_CHECK(start >= 0 && length >= 0 && start + length <= size, "narrow", "range [", start, ", ",
            start + length, ") is out of bounds for dim ", d, " of size ", size, " (shape ",
            shape_str(x.shape()), ")");
  Shape shape = x.shape();
  shape[d] = length;
  Tensor y = make_view(x, shape, x.strides(), x.offset() + start * x.strides()[d]);
  Shape in_shape = x.shape();
  return record("narrow", {x}, y, [in_shape, d, start, length](const Tensor& gy) {
    // pad the gradient back to the input's size with zeros on both sides
    std::vector<Tensor> parts;
    Shape s = in_shape;
    if (start > 0) {
      s[d] = start;
      parts.push_back(zeros(s, {gy.dtype(), gy.device()}));
    }
    parts.push_back(gy);
    if (start + length < in_shape[d]) {
      s[d] = in_shape[d] - start - length;
      parts.push_back(zeros(s, {gy.dtype(), gy.device()}));
    }
    return grads{parts.size() == 1 ? gy : cat(parts, d)};
  });
}

Tensor select(const Tensor& x, int dim, int64_t index) {
  int d = normalize_dim(dim, x.dim(), "select");
  return squeeze(narrow(x, d, index, 1), d);
}

QKV_RECORDED_OP("expand", "engine", composed);
Tensor expand(const Tensor& x, const Shape& requested) {
  detail::check_defined(x, "expand");
  QKV_CHECK(requested.size() >= size_t(x.dim()), "expand", "cannot expand ", shape_str(x.shape()),
            " to fewer dims ", shape_str(requested));
  Shape shape = requested;
  const size_t lead = shape.size() - x.dim();
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i < lead) {
      QKV_CHECK(shape[i] >= 0, "expand", "size -1 not allowed in a new leading dim");
      continue;
    }
    int64_t have = x.shape()[i - lead];
    if (shape[i] == -1) shape[i] = have;
    QKV_CHECK(have == shape[i] || have == 1, "expand", "cannot expand ", shape_str(x.shape()),
              " to ", shape_str(requested), ": dim ", i - lead, " has size ", have);
  }
  Tensor y = detail::broadcast_view(x, shape);
  Shape in_shape = x.shape();
  return record("expand", {x}, y,
                [in_shape](const Tensor& gy) { return grads{sum_to(gy, in_shape)}; });
}

Tensor squeeze(const Tensor& x, int dim) {
  if (x.dim() == 0) return x;
  int d = normalize_dim(dim, x.dim(), "squeeze");
  if (x.shape()[d] != 1) return x;
  Shape s = x.shape();
  s.erase(s.begin() + d);
  return reshape(x, s);
}

Tensor unsqueeze(const Tensor& x, int dim) {
  int d = normalize_dim(dim, x.dim() + 1, "unsqueeze");
  Shape s = x.shape();
  s.insert(s.begin() + d, 1);
  return reshape(x, s);
}

Tensor flatten(const Tensor& x, int start_dim, int end_dim) {
  if (x.dim() == 0) return reshape(x, {1});
  int s = normalize_dim(start_dim, x.dim(), "flatten"),
      e = normalize_dim(end_dim, x.dim(), "flatten");
  QKV_CHECK(s <= e, "flatten", "start_dim ", s, " is after end_dim ", e);
  Shape shape(x.shape().begin(), x.shape().begin() + s);
  int64_t merged = 1;
  for (int d = s; d <= e; ++d) merged *= x.shape()[d];
  shape.push_back(merged);
  shape.insert(shape.end(), x.shape().begin() + e + 1, x.shape().end());
  return reshape(x, shape);
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  return clone(x);
}

QKV_RECORDED_OP("clone", "engine", composed);
Tensor clone(const Tensor& x) {
  detail::check_defined(x, "clone");
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  x.backend().copy(x, y);
  return record("clone", {x}, y, [](const Tensor& gy) { return grads{gy}; });
}

QKV_RECORDED_OP("cast", "engine", composed);
Tensor cast(const Tensor& x, DType dtype) {
  detail::check_defined(x, "to");
  if (x.dtype() == dtype) return x;
  Tensor y = Tensor::empty(x.shape(), dtype, x.device());
  x.backend().copy(x, y);
  if (!is_floating(dtype)) return y;  // integers and masks carry no gradient
  DType from = x.dtype();
  return record("cast", {x}, y, [from](const Tensor& gy) { return grads{cast(gy, from)}; });
}

QKV_RECORDED_OP("to_device", "engine", composed);
Tensor to_device(const Tensor& x, Device device) {
  detail::check_defined(x, "to");
  if (x.device() == device) return x;
  Tensor src = detail::contiguous_data(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), device);
  size_t bytes = size_t(x.numel()) * dtype_size(x.dtype());
  if (device.is_cpu())
    src.backend().copy_to_host(src.raw_data(), y.raw_data(), bytes);
  else if (x.device().is_cpu())
    y.backend().copy_from_host(src.raw_data(), y.raw_data(), bytes);
  else
    y = to_device(to_device(x, Device::cpu()), device);
  Device from = x.device();
  return record("to_device", {x}, y,
                [from](const Tensor& gy) { return grads{to_device(gy, from)}; });
}

Tensor sum_to(const Tensor& g, const Shape& shape) {
  if (g.shape() == shape) return g;
  const int lead = g.dim() - int(shape.size());
  QKV_CHECK(lead >= 0, "sum_to", "cannot sum ", shape_str(g.shape()), " to ", shape_str(shape));
  std::vector<int> dims;
  for (int d = 0; d < g.dim(); ++d)
    if (d < lead || (shape[d - lead] == 1 && g.shape()[d] != 1)) dims.push_back(d);
  Tensor s = dims.empty() ? g : sum(g, dims, true);
  return reshape(s, shape);
}

}  // namespace qkv
