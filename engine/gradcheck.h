// Numerical gradient checking: analytic gradients from backward() against central differences.
//
// The check is PyTorch's, in float64 with the same defaults (eps 1e-6, atol 1e-5, rtol 1e-3),
// applied to a random projection of the output: L = sum(f(x) * r) for a fixed random r, so one
// backward gives the analytic dL/dx and two evaluations per input element give the numeric one.
// A wrong backward for any output element shows up in L for a random r.
//
// gradgradcheck is PyTorch's second-order check: it gradchecks the function
//   (inputs, gy) -> the gradients of <f(inputs), gy> with respect to the inputs, computed with
//   create_graph,
// so the derivative of every backward rule - in the inputs (second derivatives) and in gy - is
// compared with finite differences of the backward itself.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "engine/tensor.h"

namespace qkv {

struct GradcheckOptions {
  double eps = 1e-6;
  double atol = 1e-5;
  double rtol = 1e-3;
  uint64_t seed = 1234;
};

struct GradcheckResult {
  bool ok = true;
  double max_abs_err = 0;  // over all checked elements
  double max_rel_err = 0;  // |a - n| / max(|n|, atol)
  // the element that violated the tolerance most
  int worst_input = -1;
  int64_t worst_index = -1;
  double analytic = 0, numeric = 0;
  std::string message;  // a readable summary of the worst element
};

using GradcheckFn = std::function<Tensor(const std::vector<Tensor>&)>;

// Checks fn's gradients with respect to every input that requires grad. Inputs must be float64
// CPU tensors (others are passed through unchanged, e.g. int64 indices).
GradcheckResult gradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                          const GradcheckOptions& options = {});

// Second derivatives of fn (see above), with the same inputs and options. It also fails when the
// gradient computed with create_graph differs from the one computed without (a rule whose two
// paths disagree). A graph holding an op whose backward runs raw kernels throws qkv::Error naming
// that op (autograd.h).
GradcheckResult gradgradcheck(const GradcheckFn& fn, const std::vector<Tensor>& inputs,
                              const GradcheckOptions& options = {});

}  // namespace qkv
