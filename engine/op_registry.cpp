#include "engine/op_registry.h"

#include "engine/backend.h"
#include "engine/error.h"
#include "engine/ops.h"

namespace qkv {

void OpRegistry::add(GradcheckCase c) {
  case_names_.insert(c.op);
  cases_.push_back(std::move(c));
}

std::vector<OpDeclaration> OpRegistry::ops_without_case(const std::string& layer) const {
  std::vector<OpDeclaration> missing;
  for (const OpDeclaration& d : declared_ops())
    if ((layer.empty() || d.layer == layer) && !has_case(std::string(d.name))) missing.push_back(d);
  return missing;
}

bool OpRegistry::declared(const std::string& op) const {
  return has_case(op) || find_declared_op(op) != nullptr;
}

bool OpRegistry::runnable(const GradcheckCase& c) {
  return !c.needs_cuda || has_backend(DeviceKind::cuda);
}

std::vector<Tensor> OpRegistry::make_inputs(const GradcheckCase& c, uint64_t seed) {
  Generator gen(seed);
  std::vector<Tensor> inputs;
  for (const InputSpec& s : c.inputs) {
    TensorOptions f64{DType::f64};
    Tensor t;
    switch (s.domain) {
      case Domain::real:
        t = uniform(s.shape, -2, 2, f64, &gen);
        break;
      case Domain::positive:
        t = uniform(s.shape, 0.5, 2, f64, &gen);
        break;
      case Domain::unit:
        t = uniform(s.shape, 0.05, 0.95, f64, &gen);
        break;
      case Domain::range:
        QKV_CHECK(s.range_low < s.range_high, "gradcheck", "input range of op ", c.op,
                  " is empty: [", s.range_low, ", ", s.range_high, "]");
        t = uniform(s.shape, s.range_low, s.range_high, f64, &gen);
        break;
      case Domain::away: {
        Tensor mag = uniform(s.shape, 0.3, 2, f64, &gen);
        Tensor sign = sub(mul(bernoulli(s.shape, 0.5, f64, &gen), 2.0), ones(s.shape, f64));
        t = mul(mag, sign);
        break;
      }
      case Domain::index: {
        QKV_CHECK(s.high > 0, "gradcheck", "index input of op ", c.op, " needs a positive high");
        Tensor u = uniform(s.shape, 0, double(s.high), f64, &gen);
        std::vector<double> v = u.to_vector<double>();
        std::vector<int64_t> iv(v.size());
        for (size_t i = 0; i < v.size(); ++i) iv[i] = std::min<int64_t>(int64_t(v[i]), s.high - 1);
        inputs.push_back(tensor_i64(iv, s.shape));
        continue;
      }
      case Domain::mask:
        inputs.push_back(bernoulli(s.shape, 0.25, f64, &gen).to(DType::b8));
        continue;
    }
    inputs.push_back(t.detach().requires_grad_());
  }
  return inputs;
}

GradcheckResult OpRegistry::run(const GradcheckCase& c) {
  return gradcheck(c.fn, make_inputs(c), c.options);
}

GradcheckResult OpRegistry::run_second_order(const GradcheckCase& c) {
  return gradgradcheck(c.fn, make_inputs(c), c.options);
}

OpRegistry& OpRegistry::global() {
  static OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    register_engine_gradcheck_cases(*r);
    return r;
  }();
  return *registry;
}

}  // namespace qkv
