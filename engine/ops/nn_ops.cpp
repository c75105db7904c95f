// Neural-network primitives: softmax, log_softmax, layer_norm, embedding, cross_entropy (dropout
// has a file of its own, engine/ops/dropout.cpp). softmax and layer_norm run fused row kernels
// forward and backward; the others are composed from primitive ops, so their backward comes from
// the primitives'.
#include "engine/op_declaration.h"
#include "engine/ops.h"
#include "engine/ops/op_helpers.h"

namespace qkv {

namespace {

// Both backwards are the fused softmax_backward kernel.
QKV_RECORDED_OP("softmax", "engine", kernel);
QKV_RECORDED_OP("log_softmax", "engine", kernel);

// Softmax family over any dim: the kernel works on the last dim of a contiguous tensor, so other
// dims are moved last first (and back after).
Tensor softmax_impl(const Tensor& x, int dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  detail::check_defined(x, name);
  detail::check_f32_or_f64(x, name);
  if (x.dim() == 0) return softmax_impl(reshape(x, {1}), 0, log).reshape({});
  int d = normalize_dim(dim, x.dim(), name);
  if (d != x.dim() - 1) return transpose(softmax_impl(transpose(x, d, -1), -1, log), d, -1);
  Tensor xc = detail::contiguous_data(x);
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  x.backend().softmax(xc, y, log);
  return record(name, {x}, y, [y = y.detach(), log](const Tensor& gy) {
    Tensor gx = Tensor::empty(y.shape(), y.dtype(), y.device());
    y.backend().softmax_backward(detail::contiguous_data(gy), y, gx, log);
    return grads{gx};
  });
}

}  // namespace

Tensor softmax(const Tensor& x, int dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int dim) { return softmax_impl(x, dim, true); }

// The backward is the fused layer_norm_backward kernel.
QKV_RECORDED_OP("layer_norm", "engine", kernel);
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight,
                  const Tensor& bias, double eps) {
  detail::check_defined(x, "layer_norm");
  detail::check_f32_or_f64(x, "layer_norm");
  const int nd = int(normalized_shape.size());
  QKV_CHECK(
      nd >= 1 && nd <= x.dim() && Shape(x.shape().end() - nd, x.shape().end()) == normalized_shape,
      "layer_norm", "normalized_shape ", shape_str(normalized_shape),
      " does not match the trailing dims of the input ", shape_str(x.shape()));
  for (const Tensor* p : {&weight, &bias}) {
    if (!p->defined()) continue;
    QKV_CHECK(p->shape() == normalized_shape, "layer_norm", (p == &weight ? "weight" : "bias"),
              " has shape ", shape_str(p->shape()), ", expected ", shape_str(normalized_shape));
    detail::check_same_dtype(x, *p, "layer_norm");
    detail::check_same_device(x, *p, "layer_norm");
  }
  const int64_t cols = numel(normalized_shape), rows = cols ? x.numel() / cols : 0;
  Tensor xc = detail::contiguous_data(x);
  Tensor wc = weight.defined() ? detail::contiguous_data(weight) : Tensor();
  Tensor bc = bias.defined() ? detail::contiguous_data(bias) : Tensor();
  Tensor y = Tensor::empty(x.shape(), x.dtype(), x.device());
  Tensor mu = Tensor::empty({rows}, x.dtype(), x.device());
  Tensor rstd = Tensor::empty({rows}, x.dtype(), x.device());
  x.backend().layer_norm(xc, wc, bc, eps, y, mu, rstd);
  return record("layer_norm", {x, weight, bias}, y, [xc, wc, mu, rstd, bias](const Tensor& gy) {
    Tensor gx = Tensor::empty(xc.shape(), xc.dtype(), xc.device());
    Tensor gw = wc.defined() ? Tensor::empty(wc.shape(), wc.dtype(), wc.device()) : Tensor();
    Tensor gb =
        bias.defined() ? Tensor::empty(bias.shape(), bias.dtype(), bias.device()) : Tensor();
    xc.backend().layer_norm_backward(detail::contiguous_data(gy), xc, wc, mu, rstd, gx, gw, gb);
    return grads{gx, gw, gb};
  });
}

Tensor embedding(const Tensor& weight, const Tensor& indices) {
  detail::check_defined(weight, "embedding");
  detail::check_defined(indices, "embedding");
  detail::check_index(indices, "embedding");
  QKV_CHECK(weight.dim() == 2, "embedding", "weight must be 2-D [num_embeddings, dim], got ",
            shape_str(weight.shape()));
  detail::check_same_device(weight, indices, "embedding");
  // Checked here too (index_select would) so the message names the op the caller used.
  detail::check_index_range(indices, weight.size(0), "embedding", "an embedding table");
  return reshape(index_select(weight, 0, reshape(indices, {-1})), [&] {
    Shape s = indices.shape();
    s.push_back(weight.shape()[1]);
    return s;
  }());
}

Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index,
                Reduction reduction) {
  detail::check_defined(log_probs, "nll_loss");
  detail::check_defined(target, "nll_loss");
  detail::check_index(target, "nll_loss");
  QKV_CHECK(log_probs.dim() >= 1, "nll_loss", "input must have a class dim");
  // Accept [N, C, d...] by moving the class dim last, and [C] with a 0-d target.
  Tensor lp = log_probs;
  if (lp.dim() == 1) lp = unsqueeze(lp, 0);
  if (lp.dim() > 2) {
    std::vector<int> order{0};
    for (int d = 2; d < lp.dim(); ++d) order.push_back(d);
    order.push_back(1);
    lp = permute(lp, order);
  }
  Shape expected(lp.shape().begin(), lp.shape().end() - 1);
  Tensor t = target.dim() == 0 ? reshape(target, {1}) : target;
  QKV_CHECK(t.shape() == expected, "nll_loss", "target shape ", shape_str(target.shape()),
            " does not match input ", shape_str(log_probs.shape()), " (expected ",
            shape_str(expected), ")");
  const int64_t classes = lp.shape().back();
  Tensor flat_lp = reshape(lp, {-1, classes});
  Tensor flat_t = reshape(t, {-1});
  Tensor valid = logical_not(eq(flat_t, double(ignore_index)));
  Tensor safe_t = where(valid, flat_t, zeros({}, {DType::i64, t.device()}));
  detail::check_index_range(safe_t, classes, "nll_loss", "the number of classes");
  Tensor picked = reshape(gather(flat_lp, 1, unsqueeze(safe_t, 1)), {-1});
  Tensor w = valid.to(lp.dtype());
  Tensor losses = mul(neg(picked), w);
  switch (reduction) {
    case Reduction::none:
      return reshape(losses, t.shape());
    case Reduction::sum:
      return sum(losses);
    case Reduction::mean:
    default: {
      // divide by the number of targets that are not ignored (PyTorch's convention)
      return div(sum(losses), maximum(sum(w), full({}, 1e-12, {lp.dtype(), lp.device()})));
    }
  }
}

Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index,
                     double label_smoothing, Reduction reduction) {
  detail::check_defined(logits, "cross_entropy");
  detail::check_f32_or_f64(logits, "cross_entropy");
  QKV_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy", "label_smoothing ",
            label_smoothing, " is outside [0, 1]");
  QKV_CHECK(logits.dim() >= 1, "cross_entropy", "logits need a class dim");
  const int class_dim = logits.dim() == 1 ? 0 : 1;
  QKV_CHECK(logits.size(class_dim) > 0, "cross_entropy", "logits ", shape_str(logits.shape()),
            " have no classes (dim ", class_dim, " is empty)");
  Tensor logp = log_softmax(logits, class_dim);
  Tensor nll = nll_loss(logp, target, ignore_index, Reduction::none);
  if (label_smoothing == 0) {
    if (reduction == Reduction::none) return nll;
    return nll_loss(logp, target, ignore_index, reduction);
  }
  // Smoothed target: (1-eps) on the label plus eps/C on every class, so
  //   loss = (1-eps) * nll + eps * mean_c(-log p_c)   per position (ignored positions excluded).
  Tensor uniform = neg(mean(logp, {class_dim}));
  Tensor t = target.dim() == 0 ? reshape(target, {}) : target;
  Tensor valid = logical_not(eq(t, double(ignore_index))).to(logits.dtype());
  if (uniform.shape() != valid.shape()) uniform = reshape(uniform, valid.shape());
  Tensor per = add(mul(nll, 1 - label_smoothing), mul(mul(uniform, valid), label_smoothing));
  switch (reduction) {
    case Reduction::none:
      return per;
    case Reduction::sum:
      return sum(per);
    case Reduction::mean:
    default:
      return div(sum(per), maximum(sum(valid), full({}, 1e-12, {logits.dtype(), logits.device()})));
  }
}

}  // namespace qkv
