// Where UTF-8 goes wrong: the byte offset an error message can name.
#pragma once

#include <cstddef>
#include <string_view>

namespace qkv::train {

// The offset of the first byte that does not start or continue a well-formed sequence (the rules
// of is_valid_utf8 in train/utf8.h), or npos when `text` is valid UTF-8.
size_t first_invalid_utf8(std::string_view text);

// The length of the well-formed sequence starting at text[i] (1..4), or 0 when there is none.
size_t utf8_sequence_length(std::string_view text, size_t i);

}  // namespace qkv::train
