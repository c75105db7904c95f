#include "engine/op_registry.h"

#include <set>

#include "engine/error.h"
#include "engine/ops.h"

namespace qkv {

void OpRegistry::declare(const std::string& op, const std::string& layer) { declared_[op] = layer; }

void OpRegistry::add(GradcheckCase c) {
  declare(c.op, c.layer);
  cases_.push_back(std::move(c));
}

std::vector<std::string> OpRegistry::ops_without_case() const {
  std::set<std::string> covered;
  for (const auto& c : cases_) covered.insert(c.op);
  std::vector<std::string> missing;
  for (const auto& [op, layer] : declared_)
    if (!covered.count(op)) missing.push_back(op);
  return missing;
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

OpRegistry& OpRegistry::global() {
  static OpRegistry* registry = [] {
    auto* r = new OpRegistry();
    register_engine_gradcheck_cases(*r);
    return r;
  }();
  return *registry;
}

}  // namespace qkv
