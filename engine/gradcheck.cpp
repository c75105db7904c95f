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

}  // namespace qkv
