#include "engine/tensor.h"

#include <cmath>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "engine/autograd.h"
#include "engine/backend.h"
#include "engine/error.h"
#include "engine/ops.h"

namespace qkv {

Storage::Storage(Backend* b, size_t n) : bytes(n), backend(b) { data = b->allocate(n); }
Storage::~Storage() { backend->deallocate(data, bytes); }

Tensor Tensor::empty(const Shape& shape, DType dtype, Device device) {
  QKV_CHECK(shape.size() <= size_t(kMaxRank), "empty", "rank ", shape.size(),
            " exceeds the limit of ", kMaxRank);
  for (int64_t d : shape)
    QKV_CHECK(d >= 0, "empty", "negative dimension in shape ", shape_str(shape));
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(&backend_for(device),
                                            size_t(qkv::numel(shape)) * dtype_size(dtype));
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

Tensor make_view(const Tensor& base, const Shape& shape, const Strides& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = base.impl()->storage;
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = base.dtype();
  return Tensor(std::move(impl));
}

int64_t Tensor::size(int d) const { return shape()[normalize_dim(d, dim(), "size")]; }

Device Tensor::device() const { return impl_->storage->backend->device(); }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int d = dim() - 1; d >= 0; --d) {
    if (shape()[d] != 1 && strides()[d] != expected) return false;
    expected *= shape()[d];
  }
  return true;
}

void* Tensor::raw_data() const {
  return static_cast<char*>(impl_->storage->data) + impl_->offset * int64_t(dtype_size(dtype()));
}

namespace {
template <typename T>
constexpr DType dtype_of() {
  if constexpr (std::is_same_v<T, float>) return DType::f32;
  if constexpr (std::is_same_v<T, double>) return DType::f64;
  if constexpr (std::is_same_v<T, int64_t>) return DType::i64;
  if constexpr (std::is_same_v<T, uint8_t> || std::is_same_v<T, bool>) return DType::b8;
  if constexpr (std::is_same_v<T, bf16_t>) return DType::bf16;
  if constexpr (std::is_same_v<T, int8_t>) return DType::i8;
}
}  // namespace

template <typename T>
T* Tensor::data() const {
  QKV_CHECK(dtype() == dtype_of<T>(), "data", "tensor holds ", dtype_name(dtype()), ", asked for ",
            dtype_name(dtype_of<T>()));
  return static_cast<T*>(raw_data());
}
template float* Tensor::data<float>() const;
template double* Tensor::data<double>() const;
template int64_t* Tensor::data<int64_t>() const;
template uint8_t* Tensor::data<uint8_t>() const;
template bf16_t* Tensor::data<bf16_t>() const;
template int8_t* Tensor::data<int8_t>() const;

Tensor& Tensor::requires_grad_(bool on) {
  QKV_CHECK(!on || is_floating(dtype()), "requires_grad", "only floating tensors can require ",
            "gradients, this one is ", dtype_name(dtype()));
  QKV_CHECK(is_leaf(), "requires_grad", "can only be set on a leaf tensor");
  impl_->requires_grad = on;
  return *this;
}

void Tensor::backward(const Tensor& gradient, bool retain_graph, bool create_graph) const {
  run_backward(*this, gradient, retain_graph, create_graph);
}

Tensor Tensor::detach() const { return make_view(*this, shape(), strides(), offset()); }

Tensor Tensor::to(DType t) const { return cast(*this, t); }
Tensor Tensor::to(Device d) const { return to_device(*this, d); }
Tensor Tensor::contiguous() const { return qkv::contiguous(*this); }
Tensor Tensor::clone() const { return qkv::clone(*this); }

template <typename T>
std::vector<T> Tensor::to_vector() const {
  // Gather to a contiguous float64/int64 host copy, then convert.
  Tensor host = detach();
  DType wide = dtype() == DType::i64 || dtype() == DType::b8 || dtype() == DType::i8 ? DType::i64
                                                                                     : DType::f64;
  Tensor c = Tensor::empty(shape(), wide, device());
  backend().copy(host, c);
  std::vector<T> out(numel());
  if (wide == DType::i64) {
    std::vector<int64_t> tmp(numel());
    backend().copy_to_host(c.raw_data(), tmp.data(), tmp.size() * 8);
    for (size_t i = 0; i < tmp.size(); ++i) out[i] = T(tmp[i]);
  } else {
    std::vector<double> tmp(numel());
    backend().copy_to_host(c.raw_data(), tmp.data(), tmp.size() * 8);
    for (size_t i = 0; i < tmp.size(); ++i) out[i] = T(tmp[i]);
  }
  return out;
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<double> Tensor::to_vector<double>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<int> Tensor::to_vector<int>() const;

double Tensor::item() const {
  QKV_CHECK(numel() == 1, "item", "needs a tensor with one element, got shape ",
            shape_str(shape()));
  return to_vector<double>()[0];
}

Tensor Tensor::reshape(const Shape& s) const { return qkv::reshape(*this, s); }
Tensor Tensor::view(const Shape& s) const { return qkv::view(*this, s); }
Tensor Tensor::permute(const std::vector<int>& d) const { return qkv::permute(*this, d); }
Tensor Tensor::transpose(int a, int b) const { return qkv::transpose(*this, a, b); }
Tensor Tensor::narrow(int d, int64_t s, int64_t l) const { return qkv::narrow(*this, d, s, l); }
Tensor Tensor::expand(const Shape& s) const { return qkv::expand(*this, s); }
Tensor Tensor::squeeze(int d) const { return qkv::squeeze(*this, d); }
Tensor Tensor::unsqueeze(int d) const { return qkv::unsqueeze(*this, d); }
Tensor Tensor::flatten(int s, int e) const { return qkv::flatten(*this, s, e); }

// ---- printing, in the style of PyTorch's repr --------------------------------------------------
namespace {
void print_rec(std::ostringstream& out, const std::vector<double>& v, const Shape& shape, int dim,
               int64_t& pos, int indent, bool floating, int precision) {
  if (shape.empty()) {
    out << std::fixed << std::setprecision(floating ? precision : 0) << v[pos++];
    return;
  }
  out << "[";
  for (int64_t i = 0; i < shape[dim]; ++i) {
    if (i) {
      out << ",";
      if (dim + 1 < int(shape.size()))
        out << "\n" << std::string(indent + dim + 1, ' ');
      else
        out << " ";
    }
    if (dim + 1 == int(shape.size())) {
      double x = v[pos++];
      if (floating) {
        if (std::isnan(x))
          out << "nan";
        else if (std::isinf(x))
          out << (x > 0 ? "inf" : "-inf");
        else
          out << std::fixed << std::setprecision(precision) << x;
      } else {
        out << int64_t(x);
      }
    } else {
      print_rec(out, v, shape, dim + 1, pos, indent, floating, precision);
    }
  }
  out << "]";
}
}  // namespace

std::string Tensor::str() const {
  if (!defined()) return "tensor(undefined)";
  std::ostringstream out;
  out << "tensor(";
  std::vector<double> v = to_vector<double>();
  int64_t pos = 0;
  bool floating = is_floating(dtype());
  if (dtype() == DType::b8) {
    // booleans print as True/False
    std::ostringstream tmp;
    Shape s = shape();
    std::function<void(int)> rec = [&](int d) {
      if (s.empty()) {
        tmp << (v[pos++] ? "True" : "False");
        return;
      }
      tmp << "[";
      for (int64_t i = 0; i < s[d]; ++i) {
        if (i) tmp << ", ";
        if (d + 1 == int(s.size()))
          tmp << (v[pos++] ? "True" : "False");
        else
          rec(d + 1);
      }
      tmp << "]";
    };
    rec(0);
    out << tmp.str();
  } else {
    print_rec(out, v, shape(), 0, pos, 7, floating, 4);
  }
  if (dtype() != DType::f32 && dtype() != DType::i64 && dtype() != DType::b8)
    out << ", dtype=" << dtype_name(dtype());
  if (!device().is_cpu()) out << ", device='" << device().str() << "'";
  if (grad_fn())
    out << ", grad_fn=<" << grad_fn()->op << ">";
  else if (requires_grad())
    out << ", requires_grad=True";
  out << ")";
  return out.str();
}

std::ostream& operator<<(std::ostream& out, const Tensor& t) { return out << t.str(); }

}  // namespace qkv
