// Every op that records itself in the autograd graph is declared once, beside its definition:
//
//   QKV_RECORDED_OP("exp", "engine", composed);   // at namespace scope, in the .cpp defining exp
//
// The declaration is what the guards check, independently of any gradcheck case:
// - record() refuses a name that is not declared (qkv::Error naming the op), so no op can enter a
//   graph undeclared;
// - OpRegistry::ops_without_case() lists every declared op of a layer that has no case, and the
//   test suites fail naming each one (tests/engine/test_gradcheck.cpp,
//   tests/nn/test_gradcheck.cpp);
// - tests/models/test_registry_scan.cpp reads the sources, so an op declared, or recorded under a
//   literal name, in a file no test links is still found (a name passed in a variable is checked
//   by record() when the op runs, as every op does in its case).
//
// The third argument says how the op's backward is written, which decides whether a gradient
// computed through it can itself be differentiated (grad(..., create_graph=true)):
//   composed - built of recorded ops, so it is differentiable again;
//   kernel   - runs raw backend kernels: create_graph through it throws qkv::Error naming the op.
// docs/ARCHITECTURE.md lists the kernel ones.
#pragma once

#include <string_view>
#include <vector>

namespace qkv {

enum class OpBackward { composed, kernel };

struct OpDeclaration {
  std::string_view name;
  std::string_view layer;  // "engine", "nn", ...: the layer whose cases must cover the op
  OpBackward backward = OpBackward::composed;
  std::string_view file;
  int line = 0;
};

// Every declaration linked into this program, sorted by name.
std::vector<OpDeclaration> declared_ops();

// The declaration of `name`, or nullptr if there is none.
const OpDeclaration* find_declared_op(std::string_view name);

// Registers a declaration during static initialization (use QKV_RECORDED_OP). Declaring a name
// twice is allowed only with the same layer and backward (two backends of one op); a conflicting
// declaration stops the program at startup with a message naming both places.
struct OpDeclarer {
  explicit OpDeclarer(const OpDeclaration& declaration);
};

}  // namespace qkv

#define QKV_OP_CONCAT_(a, b) a##b
#define QKV_OP_CONCAT(a, b) QKV_OP_CONCAT_(a, b)
#define QKV_RECORDED_OP(name, layer, backward)                                            \
  static const ::qkv::OpDeclarer QKV_OP_CONCAT(qkv_declared_op_, __LINE__) {              \
    ::qkv::OpDeclaration { name, layer, ::qkv::OpBackward::backward, __FILE__, __LINE__ } \
  }
