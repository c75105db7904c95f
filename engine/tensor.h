// Tensor: a cheap, shared handle to an n-dimensional strided array with an autograd record.
//
// A Tensor is a std::shared_ptr to a TensorImpl. Copying a Tensor copies the handle, not the data
// (as in PyTorch); views (reshape, permute, narrow, expand, ...) make a new TensorImpl that shares
// the Storage and differs only in offset, shape and strides. Operations are free functions in
// engine/ops.h; the member functions here are the small, PyTorch-like conveniences over them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/device.h"
#include "engine/dtype.h"
#include "engine/shape.h"

namespace qkv {

class Backend;
struct Node;
class Tensor;

// A buffer on one device, handed back to its backend's allocator when the last view goes away.
struct Storage {
  void* data = nullptr;
  size_t bytes = 0;
  Backend* backend = nullptr;
  Storage(Backend* backend, size_t bytes);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
};

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  int64_t offset = 0;  // in elements
  Shape shape;
  Strides strides;  // in elements
  DType dtype = DType::f32;
  bool requires_grad = false;
  std::shared_ptr<TensorImpl> grad;  // accumulated gradient of a leaf
  std::shared_ptr<Node> grad_fn;     // the op that produced this tensor (null for leaves)
};

struct TensorOptions {
  DType dtype = DType::f32;
  Device device = Device::cpu();
  bool requires_grad = false;
  TensorOptions& with(DType t) {
    dtype = t;
    return *this;
  }
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // An uninitialized contiguous tensor.
  static Tensor empty(const Shape& shape, DType dtype = DType::f32, Device device = Device::cpu());

  bool defined() const { return impl_ != nullptr; }
  TensorImpl* impl() const { return impl_.get(); }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

  // ---- metadata -------------------------------------------------------------------------------
  const Shape& shape() const { return impl_->shape; }
  const Strides& strides() const { return impl_->strides; }
  int64_t offset() const { return impl_->offset; }
  int dim() const { return int(impl_->shape.size()); }
  int64_t size(int dim) const;
  int64_t numel() const { return qkv::numel(impl_->shape); }
  DType dtype() const { return impl_->dtype; }
  Device device() const;
  Backend& backend() const { return *impl_->storage->backend; }
  bool is_contiguous() const;
  bool same_storage(const Tensor& other) const { return impl_->storage == other.impl_->storage; }

  // Pointer to the first element, for kernels. T must match dtype (checked).
  template <typename T>
  T* data() const;
  void* raw_data() const;

  // ---- autograd -------------------------------------------------------------------------------
  bool requires_grad() const { return impl_->requires_grad; }
  Tensor& requires_grad_(bool on = true);
  bool is_leaf() const { return impl_->grad_fn == nullptr; }
  const std::shared_ptr<Node>& grad_fn() const { return impl_->grad_fn; }
  Tensor grad() const { return Tensor(impl_->grad); }
  void set_grad(const Tensor& g) { impl_->grad = g.impl_; }
  void zero_grad() { impl_->grad.reset(); }
  // Reverse-mode sweep from this tensor; see engine/autograd.h.
  void backward(const Tensor& gradient = Tensor(), bool retain_graph = false,
                bool create_graph = false) const;
  // Same data, cut from the graph.
  Tensor detach() const;

  // ---- conversions ----------------------------------------------------------------------------
  Tensor to(DType dtype) const;
  Tensor to(Device device) const;
  Tensor cpu() const { return to(Device::cpu()); }
  Tensor contiguous() const;
  Tensor clone() const;
  double item() const;  // value of a one-element tensor, as double
  template <typename T>
  std::vector<T> to_vector() const;  // all elements in row-major order, converted to T
  std::string str() const;           // PyTorch-like repr

  // ---- view conveniences (differentiable; see engine/ops.h) ------------------------------------
  Tensor reshape(const Shape& shape) const;
  Tensor view(const Shape& shape) const;
  Tensor permute(const std::vector<int>& dims) const;
  Tensor transpose(int dim0, int dim1) const;
  Tensor narrow(int dim, int64_t start, int64_t length) const;
  Tensor expand(const Shape& shape) const;
  Tensor squeeze(int dim) const;
  Tensor unsqueeze(int dim) const;
  Tensor flatten(int start_dim = 0, int end_dim = -1) const;

 private:
  std::shared_ptr<TensorImpl> impl_;
};

std::ostream& operator<<(std::ostream& out, const Tensor& t);

// Makes a strided view of `base` (shares storage; no autograd record - see ops for that).
Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides, int64_t offset);

}  // namespace qkv
