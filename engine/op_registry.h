// The op registry: the gradcheck cases that prove every differentiable op's backward.
//
// Which ops exist is not the registry's business: every op that records itself is declared beside
// its definition (QKV_RECORDED_OP, engine/op_declaration.h), and every nn::Module type is found in
// the sources (tests/models/test_registry_scan.cpp). The registry holds the cases: input shapes,
// the ranges the inputs are drawn from (log needs positive numbers, abs must stay away from its
// kink, a numerically stable op needs large |x| to reach its other branch) and a function building
// the op from those inputs. `qkv gradcheck` and the test suites run every case in float64, and a
// test fails, naming the op, for each declared op of a layer that has no case named after it -
// whether or not another case happens to call it. Adding an op is: forward, backward, kernel,
// declaration, one case.
//
// Cases live next to their layer: engine/gradcheck_cases.cpp for the engine's ops, nn's and
// models' for their ops and module types (nn::register_gradcheck_cases,
// models::register_gradcheck_cases). A module type's cases are named "nn.<Type>" or
// "nn.<Type>.<variant>" ("models.<Type>..." for models).
#pragma once

#include <functional>
#include <set>
#include <string>
#include <vector>

#include "engine/gradcheck.h"
#include "engine/op_declaration.h"

namespace qkv {

enum class Domain {
  real,      // uniform in [-2, 2]
  positive,  // uniform in [0.5, 2]
  unit,      // uniform in (0.05, 0.95)
  away,      // |x| in [0.3, 2] with random sign: clear of kinks at 0
  index,     // int64 in [0, high)
  mask,      // bool, random (about one in four true)
  range,     // uniform in [low, high] given by the case (see in_range)
};

struct InputSpec {
  Shape shape;
  Domain domain = Domain::real;
  int64_t high = 0;                      // for Domain::index
  double range_low = 0, range_high = 0;  // for Domain::range
};

// An input drawn uniformly from [low, high]: for a formula whose branches or hazards lie outside
// [-2, 2] (saturated sigmoid and tanh, logits whose exp overflows unless the max is subtracted).
inline InputSpec in_range(Shape shape, double low, double high) {
  return {std::move(shape), Domain::range, 0, low, high};
}

struct GradcheckCase {
  std::string op;     // the op's name, as recorded in the graph where it records one
  std::string layer;  // "engine", "nn", ...
  std::vector<InputSpec> inputs;
  GradcheckFn fn;
  GradcheckOptions options{};
  bool needs_cuda = false;  // the case moves data to a CUDA device: skipped without one
};

class OpRegistry {
 public:
  void add(GradcheckCase c);
  // The ops declared with QKV_RECORDED_OP for `layer` ("" = every layer) that no case of this
  // registry is named after (should be empty).
  std::vector<OpDeclaration> ops_without_case(const std::string& layer = "") const;
  const std::vector<GradcheckCase>& cases() const { return cases_; }
  // Whether a case is named `op`, or `op` is a declared recorded op.
  bool declared(const std::string& op) const;
  bool has_case(const std::string& op) const { return case_names_.count(op) > 0; }
  size_t size() const { return case_names_.size(); }  // distinct case names

  // Inputs drawn for a case (float64 with requires_grad for floating domains).
  static std::vector<Tensor> make_inputs(const GradcheckCase& c, uint64_t seed = 42);
  // Whether this machine can run the case (a CUDA case needs a CUDA backend).
  static bool runnable(const GradcheckCase& c);
  static GradcheckResult run(const GradcheckCase& c);
  // Second derivatives through the case (gradgradcheck); throws qkv::Error naming the op when
  // the case's graph holds an op whose backward is a raw kernel.
  static GradcheckResult run_second_order(const GradcheckCase& c);

  // The process-wide registry, holding the engine's cases from the start.
  static OpRegistry& global();

 private:
  std::set<std::string> case_names_;
  std::vector<GradcheckCase> cases_;
};

// Adds the cases of one layer: add(name, inputs, fn[, options]) registers "<prefix><name>" for
// `layer` (prefix "nn." names "nn.Linear"), so every layer's register_gradcheck_cases says it once.
struct LayerCases {
  OpRegistry& registry;
  std::string layer, prefix;
  void operator()(std::string name, std::vector<InputSpec> inputs, GradcheckFn fn,
                  GradcheckOptions options = {}) const {
    registry.add({prefix + std::move(name), layer, std::move(inputs), std::move(fn), options});
  }
};

void register_engine_gradcheck_cases(OpRegistry& registry);

}  // namespace qkv
