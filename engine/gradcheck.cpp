#include "engine/gradcheck.h"

#include <cmath>
#include <sstream>

#include "engine/autograd.h"
#include "engine/error.h"
#include "engine/ops.h"

namespace qkv {

GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs_in,
                          const GradcheckOptions& opt) {
  // Private contiguous copies, so perturbing an element never touches the caller's tensors.
  std::vector<Tensor> inputs;
  for (const Tensor& t : inputs_in) {
    Tensor c = t.detach().clone();
    if (t.requires_grad()) {
      QKV_CHECK(t.dtype() == DType::f64 && t.device().is_cpu(), "gradcheck",
                "inputs that require grad must be float64 CPU tensors, got ", dtype_name(t.dtype()),
                " on ", t.device().str());
      c.requires_grad_();
    }
    inputs.push_back(c);
  }

  Tensor out = fn(inputs);
  QKV_CHECK(out.dtype() == DType::f64, "gradcheck", "the function must return float64, got ",
            dtype_name(out.dtype()));
  Generator gen(opt.seed);
  Tensor r = uniform(out.shape(), -1.0, 1.0, {DType::f64}, &gen);
  auto projected = [&](const std::vector<Tensor>& xs) { return sum(mul(fn(xs), r)); };

  GradcheckResult res;
  if (!out.requires_grad()) {
    res.ok = false;
    res.message = "the output does not depend on any input that requires grad";
    return res;
  }
  projected(inputs).backward();

  double worst_ratio = -1;
  NoGrad no_grad;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].requires_grad()) continue;
    Tensor analytic = inputs[i].grad();
    std::vector<double> a = analytic.defined() ? analytic.to_vector<double>()
                                               : std::vector<double>(inputs[i].numel(), 0.0);
    double* x = inputs[i].data<double>();
    for (int64_t j = 0; j < inputs[i].numel(); ++j) {
      const double saved = x[j];
      x[j] = saved + opt.eps;
      double plus = projected(inputs).item();
      x[j] = saved - opt.eps;
      double minus = projected(inputs).item();
      x[j] = saved;
      double numeric = (plus - minus) / (2 * opt.eps);
      double err = std::abs(a[j] - numeric);
      double rel = err / std::max(std::abs(numeric), opt.atol);
      double ratio = err / (opt.atol + opt.rtol * std::abs(numeric));
      if (!std::isfinite(a[j]) || !std::isfinite(numeric))
        ratio = INFINITY, err = INFINITY, rel = INFINITY;
      res.max_abs_err = std::max(res.max_abs_err, err);
      res.max_rel_err = std::max(res.max_rel_err, rel);
      if (ratio > worst_ratio) {
        worst_ratio = ratio;
        res.worst_input = int(i);
        res.worst_index = j;
        res.analytic = a[j];
        res.numeric = numeric;
      }
    }
  }
  res.ok = worst_ratio <= 1.0;
  std::ostringstream m;
  m << "worst element: input " << res.worst_input << " index " << res.worst_index << ": analytic "
    << res.analytic << " vs numeric " << res.numeric;
  res.message = m.str();
  return res;
}

namespace {

// The gradients of <fn(inputs), gy> with respect to the inputs that require grad, flattened and
// joined into one vector (an input the output does not reach contributes zeros).
Tensor joined_gradients(const GradcheckFn& fn, const std::vector<Tensor>& inputs, const Tensor& gy,
                        bool create_graph) {
  EnableGrad enable;  // gradcheck's finite differences run under NoGrad; this needs a graph
  Tensor out = fn(inputs);
  std::vector<Tensor> wrt;
  for (const Tensor& t : inputs)
    if (t.requires_grad()) wrt.push_back(t);
  std::vector<Tensor> g = grad(out, wrt, gy, /*retain_graph=*/false, create_graph);
  std::vector<Tensor> parts;
  for (size_t i = 0; i < wrt.size(); ++i)
    parts.push_back(reshape(g[i].defined() ? g[i] : zeros_like(wrt[i]), {-1}));
  return cat(parts, 0);
}

}  // namespace

GradcheckResult gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& opt) {
  Shape out_shape;
  {
    NoGrad no_grad;
    out_shape = fn(inputs).shape();
  }
  Generator gen(opt.seed + 1);
  Tensor gy = uniform(out_shape, -1.0, 1.0, {DType::f64}, &gen).requires_grad_();

  // The create_graph path of a rule may compute differently (it recomputes what the plain path
  // reads from saved tensors): both must give the same first derivative.
  std::vector<Tensor> fresh;
  for (const Tensor& t : inputs) {
    Tensor c = t.detach().clone();
    if (t.requires_grad()) c.requires_grad_();
    fresh.push_back(c);
  }
  std::vector<double> plain = joined_gradients(fn, fresh, gy.detach(), false).to_vector<double>();
  std::vector<double> graphed = joined_gradients(fn, fresh, gy, true).to_vector<double>();
  for (size_t i = 0; i < plain.size(); ++i) {
    if (std::abs(plain[i] - graphed[i]) <= 1e-9 * (1 + std::abs(plain[i]))) continue;
    GradcheckResult r;
    r.ok = false;
    r.worst_index = int64_t(i);
    r.analytic = graphed[i];
    r.numeric = plain[i];
    r.max_abs_err = std::abs(plain[i] - graphed[i]);
    std::ostringstream m;
    m << "the gradient with create_graph differs from the one without at element " << i << ": "
      << graphed[i] << " vs " << plain[i];
    r.message = m.str();
    return r;
  }

  std::vector<Tensor> with_gy = inputs;
  with_gy.push_back(gy);
  GradcheckFn first_derivative = [&fn](const std::vector<Tensor>& xs) {
    std::vector<Tensor> x(xs.begin(), xs.end() - 1);
    return joined_gradients(fn, x, xs.back(), true);
  };
  return gradcheck(first_derivative, with_gy, opt);
}

}  // namespace qkv
