// Drawing on an Image: rectangles, lines, text. Just enough for plots and attention maps.
#pragma once

#include <string>

#include "train/png.h"

namespace qkv::train {

inline constexpr Color kBlack{0, 0, 0}, kWhite{255, 255, 255}, kGray{128, 128, 128},
    kLightGray{225, 225, 225};

void fill_rect(Image& img, int x, int y, int w, int h, Color c);
void draw_rect(Image& img, int x, int y, int w, int h, Color c);  // 1-pixel outline
void draw_line(Image& img, int x0, int y0, int x1, int y1, Color c, int thickness = 1);

// Text with its top-left corner at (x, y), each font pixel drawn as scale x scale pixels.
void draw_text(Image& img, int x, int y, const std::string& text, Color c, int scale = 1);
// Text turned 90 degrees counter-clockwise (reading bottom to top), its bounding box's top-left
// corner at (x, y): for y-axis labels and column tokens.
void draw_text_up(Image& img, int x, int y, const std::string& text, Color c, int scale = 1);
int text_width(const std::string& text, int scale = 1);
int text_height(int scale = 1);

// Copies `src` into `dst` with its top-left corner at (x, y), clipped.
void blit(Image& dst, const Image& src, int x, int y);

// `text` cut to at most `max_chars` characters, with ".." marking the cut.
std::string shorten(const std::string& text, size_t max_chars);

}  // namespace qkv::train
