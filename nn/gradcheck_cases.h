// The nn layer's gradcheck cases (see engine/op_registry.h): one or more per module and loss.
#pragma once

#include "engine/op_registry.h"

namespace qkv::nn {

void register_gradcheck_cases(qkv::OpRegistry& registry);

}  // namespace qkv::nn
