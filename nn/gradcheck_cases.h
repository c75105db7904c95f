// The nn layer's gradcheck cases (see engine/op_registry.h): one or more per module and loss.
#pragma once

#include <memory>

#include "engine/dtype.h"
#include "engine/op_registry.h"

namespace qkv::nn {

void register_gradcheck_cases(qkv::OpRegistry& registry);

// A module's parameters and buffers moved to float64, where gradcheck runs; the module returned,
// for the cases of nn and models.
template <typename M>
std::shared_ptr<M> in_f64(std::shared_ptr<M> m) {
  m->to(DType::f64);
  return m;
}

}  // namespace qkv::nn
