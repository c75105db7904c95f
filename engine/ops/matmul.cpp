// matmul with torch.matmul's rules: 1-D operands are promoted to matrices (and the added dim
// removed again), batch dimensions broadcast. The backward is two more matmuls:
//   dA = dC @ B^T,  dB = A^T @ dC   (then summed over broadcast batch dims).
//
// Under autocast (engine/autocast.h) float32 operands are rounded to bfloat16 first and the backend
// multiplies them with float32 accumulation into a float32 result; the backward products run the
// same way because autograd replays each node under the autocast dtype it was recorded with.
#include <optional>

#include "engine/autocast.h"
#include "engine/op_declaration.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"

namespace qkv {

namespace {

// The dtype the product of float32 operands is computed in here: bfloat16 under autocast.
DType product_dtype(const Tensor& operand) {
  return operand.dtype() == DType::f32 ? autocast_dtype() : operand.dtype();
}

// Whether the backend rounds float32 operands to bfloat16 inside its GEMM when the product runs
// in `compute`, so that no rounded copies need to be made here.
bool rounds_in_kernel(const Tensor& operand, DType compute) {
  return compute == DType::bf16 && operand.dtype() == DType::f32 &&
         operand.backend().supports_matmul_rounding_to_bf16();
}

// `t` ready for a product in `compute`: itself when it already has that dtype or the backend
// rounds it in its kernel, else a rounded copy. A transposed view (a Linear layer's weight, K^T in
// attention, the backward's A^T) is rounded in its own memory order and handed back transposed:
// the kernel reads transposed operands in place, and a copy that walks the source in order runs
// several times faster than one that transposes it.
Tensor as_product_operand(const Tensor& t, DType compute) {
  if (t.dtype() == compute || rounds_in_kernel(t, compute)) return t;
  if (t.dim() >= 2 && !t.is_contiguous() && t.transpose(-1, -2).is_contiguous())
    return as_product_operand(t.transpose(-1, -2), compute).transpose(-1, -2);
  Tensor rounded = Tensor::empty(t.shape(), compute, t.device());
  if (rounded.numel() > 0) t.backend().copy(t, rounded);
  return rounded;
}

// The backend's product of two operands prepared by as_product_operand: float32 ones left there
// under bf16 are rounded by the kernel.
void backend_matmul(const Tensor& a, const Tensor& b, const Tensor& out, DType compute,
                    bool accumulate = false) {
  if (compute == DType::bf16 && a.dtype() == DType::f32)
    a.backend().matmul_rounding_to_bf16(a, b, out, accumulate);
  else
    a.backend().matmul(a, b, out, accumulate);
}

// One stride that walks dims [begin, end) of `v` in order of their flattened index, if there is
// one. Dims of size 1 do not count; dims broadcast together give 0.
std::optional<int64_t> collapsed_stride(const Tensor& v, int begin, int end) {
  int64_t stride = 0, expect = 0;
  bool have = false;
  for (int d = end - 1; d >= begin; --d) {
    if (v.shape()[d] == 1) continue;
    if (!have) {
      stride = v.strides()[d];
      have = true;
    } else if (v.strides()[d] != expect) {
      return std::nullopt;
    }
    expect = v.strides()[d] * v.shape()[d];
  }
  return stride;
}

// A [batch..., r, c] operand as a [batch, r, c] view (broadcast, not copied).
Tensor broadcast_matrices(const Tensor& t, const Shape& batch) {
  Shape full = batch;
  full.push_back(t.shape()[t.dim() - 2]);
  full.push_back(t.shape()[t.dim() - 1]);
  return detail::broadcast_view(t, full);
}

// `v`, [batch..., r, c], as a view the backend's matmul reads in place (backend.h): unit stride
// along one of the two matrix dims, and the batch as one dim with one stride ([count, r, c]), or
// with `two_batch_dims` as [outer, inner, r, c] where inner is the last batch dim and outer all
// the others. Empty when `v` cannot be read that way.
std::optional<Tensor> batch_view(const Tensor& v, bool two_batch_dims) {
  const int r = v.dim() - 2;
  const int64_t rows = v.shape()[r], cols = v.shape()[r + 1];
  if (!(v.strides()[r + 1] == 1 || cols == 1 || v.strides()[r] == 1 || rows == 1))
    return std::nullopt;
  // Degenerate matrix dims are normalized so the kernel's "unit stride in one dim" rule holds.
  int64_t row_stride = v.strides()[r], col_stride = v.strides()[r + 1];
  if (cols == 1)
    col_stride = 1;
  else if (rows == 1 && col_stride != 1)
    row_stride = 1;
  int64_t count = 1;
  for (int d = 0; d < r; ++d) count *= v.shape()[d];
  if (!two_batch_dims) {
    const std::optional<int64_t> stride = collapsed_stride(v, 0, r);
    if (!stride) return std::nullopt;
    return make_view(v, {count, rows, cols}, {*stride, row_stride, col_stride}, v.offset());
  }
  const std::optional<int64_t> outer = collapsed_stride(v, 0, r - 1);
  if (!outer) return std::nullopt;
  const int64_t inner_count = v.shape()[r - 1], inner = inner_count == 1 ? 0 : v.strides()[r - 1];
  return make_view(v, {count / inner_count, inner_count, rows, cols},
                   {*outer, inner, row_stride, col_stride}, v.offset());
}

// batch_view of `v` (broadcast_matrices' result): in place when it can be, else of a contiguous
// copy (of the broadcast, so that the copy has every batch entry).
Tensor as_batched_matrix(const Tensor& v, bool two_batch_dims = false) {
  if (std::optional<Tensor> view = batch_view(v, two_batch_dims)) return *view;
  return *batch_view(detail::contiguous_data(v), two_batch_dims);
}

Tensor matmul_nd(const Tensor& a_in, const Tensor& b_in) {
  const DType out_dtype = a_in.dtype(), compute = product_dtype(a_in);
  const Tensor a = as_product_operand(a_in, compute), b = as_product_operand(b_in, compute);
  const int64_t m = a.shape()[a.dim() - 2], k = a.shape()[a.dim() - 1];
  const int64_t k2 = b.shape()[b.dim() - 2], n = b.shape()[b.dim() - 1];
  QKV_CHECK(k == k2, "matmul", "inner dimensions differ: ", shape_str(a.shape()), " @ ",
            shape_str(b.shape()));
  Shape batch_a(a.shape().begin(), a.shape().end() - 2),
      batch_b(b.shape().begin(), b.shape().end() - 2);
  Shape batch = broadcast_shapes(batch_a, batch_b, "matmul");
  const int64_t batch_count = numel(batch);
  Shape out_shape = batch;
  out_shape.push_back(m);
  out_shape.push_back(n);
  Tensor out = Tensor::empty(out_shape, out_dtype, a.device());
  if (out.numel() == 0) return out;
  if (k == 0) {
    out.backend().fill(out, 0.0);
    return out;
  }
  // A 2-D right operand (a Linear layer's weight) folds the batch into M: one big GEMM.
  if (b.dim() == 2 && a.dim() > 2 && a.is_contiguous()) {
    Tensor a2 = make_view(a, {1, batch_count * m, k}, {0, k, 1}, a.offset());
    Tensor b2 = as_batched_matrix(broadcast_matrices(b, {1}));
    backend_matmul(a2, b2, make_view(out, {1, batch_count * m, n}, {0, n, 1}, 0), compute);
    return out;
  }
  // Operands whose batch dims take two strides (attention's heads) are read in place where the
  // backend can; elsewhere they are copied to contiguous memory.
  const Tensor a_batched = broadcast_matrices(a, batch), b_batched = broadcast_matrices(b, batch);
  const bool two_batch_dims = batch.size() >= 2 &&
                              out.backend().supports_matmul_with_two_batch_dims() &&
                              (!batch_view(a_batched, false) || !batch_view(b_batched, false));
  const int64_t inner_count = two_batch_dims ? batch.back() : 1;
  const Tensor out_view = two_batch_dims
                              ? make_view(out, {batch_count / inner_count, inner_count, m, n},
                                          {inner_count * m * n, m * n, n, 1}, 0)
                              : make_view(out, {batch_count, m, n}, {m * n, n, 1}, 0);
  backend_matmul(as_batched_matrix(a_batched, two_batch_dims),
                 as_batched_matrix(b_batched, two_batch_dims), out_view, compute);
  return out;
}

}  // namespace

QKV_RECORDED_OP("matmul", "engine", composed);
Tensor matmul(const Tensor& a_in, const Tensor& b_in) {
  detail::check_defined(a_in, "matmul");
  detail::check_defined(b_in, "matmul");
  detail::check_same_device(a_in, b_in, "matmul");
  detail::check_same_dtype(a_in, b_in, "matmul");
  detail::check_f32_or_f64(a_in, "matmul");
  QKV_CHECK(a_in.dim() >= 1 && b_in.dim() >= 1, "matmul",
            "both operands need at least one dim, got ", shape_str(a_in.shape()), " @ ",
            shape_str(b_in.shape()));
  // 1-D operands: a vector on the left is a row, on the right a column; the result drops them.
  if (a_in.dim() == 1) return squeeze(matmul(unsqueeze(a_in, 0), b_in), -2);
  if (b_in.dim() == 1) return squeeze(matmul(a_in, unsqueeze(b_in, 1)), -1);
  Tensor y = matmul_nd(a_in.detach(), b_in.detach());
  return record("matmul", {a_in, b_in}, y, [a = a_in, b = b_in](const Tensor& gy) {
    Tensor ga, gb;
    if (a.requires_grad()) ga = sum_to(matmul(gy, transpose(b, -1, -2)), a.shape());
    if (b.requires_grad()) {
      if (b.dim() == 2 && a.dim() > 2) {  // fold the batch: one [K, B*M] @ [B*M, N] product
        const int64_t k = a.shape().back(), n = gy.shape().back();
        gb = matmul(transpose(reshape(a, {-1, k}), 0, 1), reshape(gy, {-1, n}));
      } else {
        gb = sum_to(matmul(transpose(a, -1, -2), gy), b.shape());
      }
    }
    return grads{ga, gb};
  });
}

namespace {

// y = x @ weight^T + bias, then max(y, 0) with relu: the forward of linear and linear_relu.
Tensor linear_product(const Tensor& x_in, const Tensor& weight_in, const Tensor& bias_in, bool relu,
                      const char* op) {
  detail::check_defined(x_in, op);
  detail::check_defined(weight_in, op);
  detail::check_same_device(x_in, weight_in, op);
  detail::check_same_dtype(x_in, weight_in, op);
  detail::check_f32_or_f64(x_in, op);
  QKV_CHECK(weight_in.dim() == 2, op, "weight must be [out, in], got ",
            shape_str(weight_in.shape()));
  QKV_CHECK(x_in.dim() >= 1 && x_in.shape().back() == weight_in.size(1), op, "input ",
            shape_str(x_in.shape()), " does not end in the weight's in_features (weight ",
            shape_str(weight_in.shape()), ")");
  const int64_t in = weight_in.size(1), out_features = weight_in.size(0);
  if (bias_in.defined()) {
    detail::check_same_device(x_in, bias_in, op);
    detail::check_same_dtype(x_in, bias_in, op);
    QKV_CHECK(bias_in.dim() == 1 && bias_in.size(0) == out_features, op, "bias must be [",
              out_features, "], got ", shape_str(bias_in.shape()));
  }
  // Every leading dim of x folds into the rows of one [rows, in] @ [in, out] product.
  const DType compute = product_dtype(x_in);
  const Tensor x = as_product_operand(detail::contiguous_data(x_in.detach()), compute);
  Shape out_shape(x.shape().begin(), x.shape().end() - 1);
  const int64_t rows = numel(out_shape);
  out_shape.push_back(out_features);
  Tensor y = Tensor::empty(out_shape, x_in.dtype(), x.device());
  if (y.numel() > 0) {
    Tensor y3 = make_view(y, {1, rows, out_features}, {0, out_features, 1}, 0);
    const Tensor bias = bias_in.defined() ? bias_in.detach() : Tensor();
    // y = the bias repeated on every row, for the paths that accumulate the product over it
    auto start_from_bias = [&] {
      y.backend().copy(
          make_view(bias, {1, rows, out_features}, {0, 0, bias.strides()[0]}, bias.offset()), y3);
    };
    bool relu_applied = false;  // by the GEMM's epilogue
    if (in == 0) {              // no product: the bias alone (or zeros)
      if (bias.defined())
        start_from_bias();
      else
        y.backend().fill(y, 0.0);
    } else {
      const Tensor w = as_product_operand(weight_in.detach(), compute);
      // weight^T read in place: [in, out] with unit stride down its rows.
      Tensor w_t =
          make_view(w, {1, in, out_features}, {0, w.strides()[1], w.strides()[0]}, w.offset());
      if (w.strides()[1] != 1 && w.strides()[0] != 1)
        w_t = make_view(detail::contiguous_data(w), {1, in, out_features}, {0, 1, in}, 0);
      const Tensor x3 = make_view(x, {1, rows, in}, {0, in, 1}, x.offset());
      if (!bias.defined()) {
        backend_matmul(x3, w_t, y3, compute);
      } else if (compute == x3.dtype() && compute == y3.dtype()) {
        y.backend().matmul_plus_bias(x3, w_t, bias, y3, relu);  // the GEMM's epilogue
        relu_applied = true;
      } else {
        start_from_bias();  // bfloat16 products: the GEMM accumulates over the bias
        backend_matmul(x3, w_t, y3, compute, /*accumulate=*/true);
      }
    }
    if (relu && !relu_applied) y.backend().unary(UnaryOp::relu, y, y, 0);
  }
  return y;
}

// With g = dL/dy as [rows, out]: dx = g @ W, dW = g^T @ x, db = column sums of g.
grads linear_gradients(const Tensor& gy, const Tensor& x, const Tensor& w, const Tensor& b) {
  const int64_t in = w.size(1), out_features = w.size(0);
  Tensor g2 = reshape(gy, {-1, out_features});
  Tensor gx, gw, gb;
  if (x.requires_grad()) gx = reshape(matmul(g2, w), x.shape());
  if (w.requires_grad()) gw = matmul(transpose(g2, 0, 1), reshape(x, {-1, in}));
  if (b.defined() && b.requires_grad()) gb = sum(g2, {0});
  return grads{gx, gw, gb};
}

}  // namespace

QKV_RECORDED_OP("linear", "engine", composed);
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor y = linear_product(x, weight, bias, /*relu=*/false, "linear");
  return record("linear", {x, weight, bias}, y, [x, weight, bias](const Tensor& gy) {
    return linear_gradients(gy, x, weight, bias);
  });
}

// relu(linear(x, weight, bias)) with the ReLU in the GEMM's epilogue; the backward masks the
// gradient by the output (y > 0 exactly where x W^T + b > 0) and is linear's.
QKV_RECORDED_OP("linear_relu", "engine", composed);
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  Tensor y = linear_product(x, weight, bias, /*relu=*/true, "linear_relu");
  return record("linear_relu", {x, weight, bias}, y,
                [x, weight, bias, y = y.detach()](const Tensor& gy) {
                  return linear_gradients(relu_backward(gy, y), x, weight, bias);
                });
}

}  // namespace qkv
