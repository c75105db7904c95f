// A small bitmap font, so pictures can carry text without a font library.
//
// Glyphs are 5 pixels wide and 8 tall (7 above the baseline, 1 for descenders) and drawn in a 6x9
// cell, which leaves one pixel between letters and lines. Printable ASCII only; any other byte
// (e.g. part of a UTF-8 character) draws as a hollow box, so an unknown token is visible, not
// blank.
#pragma once

#include <array>
#include <cstdint>
#include <string>

namespace qkv::train {

inline constexpr int kGlyphWidth = 5, kGlyphHeight = 8;
inline constexpr int kCellWidth = 6, kCellHeight = 9;

// Row bits of the glyph for `c`: bit 4 is the leftmost pixel of a row, row 0 the top.
const std::array<uint8_t, kGlyphHeight>& glyph(char c);

}  // namespace qkv::train
