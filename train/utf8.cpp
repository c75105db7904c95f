#include "train/utf8.h"

#include <cstdint>

namespace qkv::train {

namespace {

// The length of the well-formed UTF-8 sequence starting at text[i], or 0 when there is none
// (the ranges are those of the Unicode standard's table of well-formed byte sequences).
size_t sequence_length(std::string_view text, size_t i) {
  auto byte = [&](size_t k) { return k < text.size() ? uint8_t(text[k]) : uint8_t(0); };
  auto continuation = [&](size_t k, uint8_t low = 0x80, uint8_t high = 0xBF) {
    const uint8_t b = byte(k);
    return k < text.size() && b >= low && b <= high;
  };
  const uint8_t lead = byte(i);
  if (lead < 0x80) return 1;
  if (lead >= 0xC2 && lead <= 0xDF) return continuation(i + 1) ? 2 : 0;
  if (lead >= 0xE0 && lead <= 0xEF) {
    // E0 needs A0..BF next (no overlong forms), ED needs 80..9F (no surrogates)
    const uint8_t low = lead == 0xE0 ? 0xA0 : 0x80, high = lead == 0xED ? 0x9F : 0xBF;
    return continuation(i + 1, low, high) && continuation(i + 2) ? 3 : 0;
  }
  if (lead >= 0xF0 && lead <= 0xF4) {
    // F0 needs 90..BF next (no overlong forms), F4 needs 80..8F (nothing above U+10FFFF)
    const uint8_t low = lead == 0xF0 ? 0x90 : 0x80, high = lead == 0xF4 ? 0x8F : 0xBF;
    return continuation(i + 1, low, high) && continuation(i + 2) && continuation(i + 3) ? 4 : 0;
  }
  return 0;  // a continuation byte, C0/C1 (overlong) or F5..FF
}

}  // namespace

bool is_valid_utf8(std::string_view text) {
  for (size_t i = 0; i < text.size();) {
    const size_t n = sequence_length(text, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::vector<std::string> split_utf8(std::string_view text) {
  std::vector<std::string> pieces;
  for (size_t i = 0; i < text.size();) {
    const size_t n = sequence_length(text, i);
    const size_t take = n == 0 ? 1 : n;
    pieces.emplace_back(text.substr(i, take));
    i += take;
  }
  return pieces;
}

std::string pad_right(std::string_view text, size_t width) {
  const size_t characters = split_utf8(text).size();
  std::string padded(text);
  if (characters < width) padded.append(width - characters, ' ');
  return padded;
}

}  // namespace qkv::train
