// The attention a ResidualBlock can hold (nn/residual_block.h), for the config's choices, --help
// and model.json's check. Kept apart from residual_block.h so that a list of names needs no
// module headers.
#pragma once

#include <string>
#include <vector>

namespace qkv::nn {

// none, se (SEBlock), cbam (CBAM).
const std::vector<std::string>& block_attention_names();

}  // namespace qkv::nn
