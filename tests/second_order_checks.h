// The second-order check the engine and nn suites share: every runnable case of a layer passes
// gradgradcheck, or stops at an op whose backward is a kernel, named in the error (never a silent
// zero). Boost.Test checks; returns how many cases ran to second order and how many stopped.
#pragma once

#include <boost/test/unit_test.hpp>
#include <string>
#include <vector>

#include "engine/error.h"
#include "engine/op_registry.h"

namespace qkv::test {

struct SecondOrderCounts {
  int composed = 0, stopped_at_kernel = 0;
};

inline SecondOrderCounts check_second_order(const std::vector<GradcheckCase>& cases,
                                            const std::string& layer) {
  SecondOrderCounts counts;
  for (const GradcheckCase& c : cases) {
    if (c.layer != layer || !OpRegistry::runnable(c)) continue;
    try {
      GradcheckResult r = OpRegistry::run_second_order(c);
      BOOST_CHECK_MESSAGE(
          r.ok, c.op << " (second order): max abs err " << r.max_abs_err << "; " << r.message);
      ++counts.composed;
    } catch (const Error& e) {
      const std::string m = e.what();
      const std::string prefix = "backward: create_graph through op '";
      BOOST_REQUIRE_MESSAGE(m.rfind(prefix, 0) == 0, c.op << ": " << m);
      const std::string op = m.substr(prefix.size(), m.find('\'', prefix.size()) - prefix.size());
      const OpDeclaration* d = find_declared_op(op);
      BOOST_CHECK_MESSAGE(d && d->backward == OpBackward::kernel,
                          c.op << ": stopped by '" << op << "', not declared kernel");
      ++counts.stopped_at_kernel;
    }
  }
  return counts;
}

}  // namespace qkv::test
