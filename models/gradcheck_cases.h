// The models layer's gradcheck cases (see engine/op_registry.h): one or more per model type, each
// named "models.<Type>[.<variant>]".
#pragma once

#include "engine/op_registry.h"

namespace qkv::models {

void register_gradcheck_cases(qkv::OpRegistry& registry);

}  // namespace qkv::models
