// The names of the positional encodings make_positional_encoding knows (nn/positional.h), for the
// config's choices and --help. Kept apart from positional.h so that a list of names needs no
// module headers.
#pragma once

#include <string>
#include <vector>

namespace qkv::nn {

// sinusoidal, learned (added to the input), relative, rope, alibi (inside attention).
const std::vector<std::string>& positional_encoding_names();

}  // namespace qkv::nn
