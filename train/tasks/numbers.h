// Numbers in English words, for the numbers task.
#pragma once

#include <cstdint>
#include <string>

namespace qkv::train {

// 0..999999 in words, without "and" or hyphens, so every word is one whitespace token:
// 1047 -> "one thousand forty seven", 700000 -> "seven hundred thousand".
std::string number_to_words(int64_t n);

}  // namespace qkv::train
