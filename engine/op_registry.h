// The op registry: every differentiable op, and the gradcheck case that proves its backward.
//
// Each op is declared once by name with one case: the input shapes, a domain the inputs are drawn
// from (log needs positive numbers, abs must stay away from its kink) and a function building the
// op from those inputs. `qkv gradcheck` and the test suite run every case in float64, and a test
// fails if a declared op has no case - so adding an op is: forward, backward, kernel, one case.
//
// Cases live next to their layer: engine/gradcheck_cases.cpp for the engine's ops, nn's for its
// modules (registered by nn::register_gradcheck_cases).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "engine/gradcheck.h"

namespace qkv {

enum class Domain {
  real,      // uniform in [-2, 2]
  positive,  // uniform in [0.5, 2]
  unit,      // uniform in (0.05, 0.95)
  away,      // |x| in [0.3, 2] with random sign: clear of kinks at 0
  index,     // int64 in [0, high)
  mask,      // bool, random (about one in four true)
};

struct InputSpec {
  Shape shape;
  Domain domain = Domain::real;
  int64_t high = 0;  // for Domain::index
};

struct GradcheckCase {
  std::string op;     // the op's name, as recorded in the graph where it records one
  std::string layer;  // "engine", "nn", ...
  std::vector<InputSpec> inputs;
  GradcheckFn fn;
  GradcheckOptions options{};
};

class OpRegistry {
 public:
  // Declares a differentiable op that must have a case.
  void declare(const std::string& op, const std::string& layer);
  // Adds the case of a declared (or newly declared) op.
  void add(GradcheckCase c);
  // Declared ops without a case (should be empty).
  std::vector<std::string> ops_without_case() const;
  const std::vector<GradcheckCase>& cases() const { return cases_; }
  bool declared(const std::string& op) const { return declared_.count(op) > 0; }
  size_t size() const { return declared_.size(); }

  // Inputs drawn for a case (float64 with requires_grad for floating domains).
  static std::vector<Tensor> make_inputs(const GradcheckCase& c, uint64_t seed = 42);
  static GradcheckResult run(const GradcheckCase& c);

  // The process-wide registry, holding the engine's cases from the start.
  static OpRegistry& global();

 private:
  std::map<std::string, std::string> declared_;  // op -> layer
  std::vector<GradcheckCase> cases_;
};

void register_engine_gradcheck_cases(OpRegistry& registry);

}  // namespace qkv
