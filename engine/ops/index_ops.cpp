// Joining and indexing: cat, stack, split/chunk, index_select, gather.
#include <algorithm>

#include "engine/op_declaration.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"

namespace qkv {

namespace detail {
void check_index_range(const Tensor& index, int64_t size, const char* op, const char* what) {
  if (index.numel() == 0) return;
  int64_t lo = 0, hi = 0;
  if (index.device().is_cpu() && index.dtype() == DType::i64 && index.is_contiguous()) {
    // Read in place: two reductions and two item() calls cost more than the gather itself when
    // a decoding step embeds one token.
    const int64_t* p = index.data<int64_t>();
    lo = hi = p[0];
    for (int64_t i = 1; i < index.numel(); ++i) lo = std::min(lo, p[i]), hi = std::max(hi, p[i]);
  } else {
    Tensor flat = reshape(index.detach(), {-1});
    lo = int64_t(amin(flat).item()), hi = int64_t(amax(flat).item());
  }
  QKV_CHECK(lo >= 0, op, "index ", lo, " is out of range for ", what, " of size ", size);
  QKV_CHECK(hi < size, op, "index ", hi, " is out of range for ", what, " of size ", size);
}
}  // namespace detail

QKV_RECORDED_OP("cat", "engine", composed);
Tensor cat(const std::vector<Tensor>& tensors, int dim) {
  QKV_CHECK(!tensors.empty(), "cat", "needs at least one tensor");
  const Tensor& first = tensors[0];
  for (const Tensor& t : tensors) detail::check_defined(t, "cat");
  QKV_CHECK(first.dim() > 0, "cat", "zero-dimensional tensors cannot be concatenated");
  int d = normalize_dim(dim, first.dim(), "cat");
  Shape out_shape = first.shape();
  out_shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    detail::check_same_device(first, t, "cat");
    detail::check_same_dtype(first, t, "cat");
    bool ok = t.dim() == first.dim();
    for (int k = 0; ok && k < t.dim(); ++k) ok = k == d || t.shape()[k] == first.shape()[k];
    QKV_CHECK(ok, "cat", "tensor ", i, " has shape ", shape_str(t.shape()), ", which differs from ",
              shape_str(first.shape()), " outside dim ", d);
    out_shape[d] += t.shape()[d];
  }
  Tensor y = Tensor::empty(out_shape, first.dtype(), first.device());
  std::vector<int64_t> sizes;
  int64_t at = 0;
  for (const Tensor& t : tensors) {
    Shape s = out_shape;
    s[d] = t.shape()[d];
    if (t.numel() > 0) first.backend().copy(t, make_view(y, s, y.strides(), at * y.strides()[d]));
    at += t.shape()[d];
    sizes.push_back(t.shape()[d]);
  }
  return record("cat", tensors, y, [d, sizes](const Tensor& gy) {
    grads g;
    int64_t start = 0;
    for (int64_t s : sizes) {
      g.push_back(narrow(gy, d, start, s));
      start += s;
    }
    return g;
  });
}

Tensor stack(const std::vector<Tensor>& tensors, int dim) {
  QKV_CHECK(!tensors.empty(), "stack", "needs at least one tensor");
  int d = normalize_dim(dim, tensors[0].dim() + 1, "stack");
  std::vector<Tensor> parts;
  for (size_t i = 0; i < tensors.size(); ++i) {
    QKV_CHECK(tensors[i].shape() == tensors[0].shape(), "stack", "tensor ", i, " has shape ",
              shape_str(tensors[i].shape()), ", expected ", shape_str(tensors[0].shape()));
    parts.push_back(unsqueeze(tensors[i], d));
  }
  return cat(parts, d);
}

std::vector<Tensor> split(const Tensor& x, int64_t split_size, int dim) {
  QKV_CHECK(split_size > 0, "split", "split_size must be positive, got ", split_size);
  int d = normalize_dim(dim, x.dim(), "split");
  std::vector<Tensor> parts;
  for (int64_t start = 0; start < x.shape()[d]; start += split_size)
    parts.push_back(narrow(x, d, start, std::min(split_size, x.shape()[d] - start)));
  return parts;
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int dim) {
  QKV_CHECK(chunks > 0, "chunk", "chunks must be positive, got ", chunks);
  int d = normalize_dim(dim, x.dim(), "chunk");
  return split(x, std::max<int64_t>(1, (x.shape()[d] + chunks - 1) / chunks), d);
}

// The backward scatters with a raw index_add kernel.
QKV_RECORDED_OP("index_select", "engine", kernel);
Tensor index_select(const Tensor& x, int dim, const Tensor& index) {
  detail::check_defined(x, "index_select");
  detail::check_defined(index, "index_select");
  detail::check_index(index, "index_select");
  detail::check_same_device(x, index, "index_select");
  QKV_CHECK(index.dim() <= 1, "index_select", "index must be 0-D or 1-D, got ",
            shape_str(index.shape()));
  QKV_CHECK(x.dim() >= 1, "index_select", "input must have at least one dim");
  int d = normalize_dim(dim, x.dim(), "index_select");
  detail::check_index_range(index, x.shape()[d], "index_select", "a dim");
  Tensor idx = detail::contiguous_data(reshape(index, {-1}));
  Shape out_shape = x.shape();
  out_shape[d] = idx.numel();
  Tensor y = Tensor::empty(out_shape, x.dtype(), x.device());
  x.backend().index_select(detail::contiguous_data(x), d, idx, y);
  return record("index_select", {x}, y, [in = x.shape(), d, idx](const Tensor& gy) {
    Tensor gx = zeros(in, {gy.dtype(), gy.device()});
    gy.backend().index_add(gx, d, idx, detail::contiguous_data(gy));
    return grads{gx};
  });
}

// The backward scatters with a raw scatter_add kernel.
QKV_RECORDED_OP("gather", "engine", kernel);
Tensor gather(const Tensor& x, int dim, const Tensor& index) {
  detail::check_defined(x, "gather");
  detail::check_defined(index, "gather");
  detail::check_index(index, "gather");
  detail::check_same_device(x, index, "gather");
  int d = normalize_dim(dim, x.dim(), "gather");
  bool ok = index.dim() == x.dim();
  for (int k = 0; ok && k < x.dim(); ++k) ok = k == d || index.shape()[k] == x.shape()[k];
  QKV_CHECK(ok, "gather", "index shape ", shape_str(index.shape()), " must match input ",
            shape_str(x.shape()), " in every dim but ", d);
  detail::check_index_range(index, x.shape()[d], "gather", "a dim");
  Tensor idx = detail::contiguous_data(index);
  Tensor y = Tensor::empty(index.shape(), x.dtype(), x.device());
  x.backend().gather(detail::contiguous_data(x), d, idx, y);
  return record("gather", {x}, y, [in = x.shape(), d, idx](const Tensor& gy) {
    Tensor gx = zeros(in, {gy.dtype(), gy.device()});
    gy.backend().scatter_add(gx, d, idx, detail::contiguous_data(gy));
    return grads{gx};
  });
}

}  // namespace qkv
