#include "train/canvas.h"

#include <cstdlib>

#include "train/font.h"

namespace qkv::train {

void fill_rect(Image& img, int x, int y, int w, int h, Color c) {
  for (int j = y; j < y + h; ++j)
    for (int i = x; i < x + w; ++i) img.set(i, j, c);
}

void draw_rect(Image& img, int x, int y, int w, int h, Color c) {
  fill_rect(img, x, y, w, 1, c);
  fill_rect(img, x, y + h - 1, w, 1, c);
  fill_rect(img, x, y, 1, h, c);
  fill_rect(img, x + w - 1, y, 1, h, c);
}

void draw_line(Image& img, int x0, int y0, int x1, int y1, Color c, int thickness) {
  // Bresenham: step along the longer axis, carry the error of the shorter one.
  int dx = std::abs(x1 - x0), dy = -std::abs(y1 - y0);
  int sx = x0 < x1 ? 1 : -1, sy = y0 < y1 ? 1 : -1;
  int err = dx + dy;
  int half = (thickness - 1) / 2;
  while (true) {
    fill_rect(img, x0 - half, y0 - half, thickness, thickness, c);
    if (x0 == x1 && y0 == y1) break;
    int e2 = 2 * err;
    if (e2 >= dy) err += dy, x0 += sx;
    if (e2 <= dx) err += dx, y0 += sy;
  }
}

namespace {

// Calls plot(column, row) for each ink pixel of `text` laid out left to right from (0, 0).
template <typename Plot>
void for_each_ink_pixel(const std::string& text, Plot plot) {
  for (size_t k = 0; k < text.size(); ++k) {
    const auto& bits = glyph(text[k]);
    for (int row = 0; row < kGlyphHeight; ++row)
      for (int col = 0; col < kGlyphWidth; ++col)
        if (bits[size_t(row)] & (1 << (kGlyphWidth - 1 - col)))
          plot(int(k) * kCellWidth + col, row);
  }
}

}  // namespace

void draw_text(Image& img, int x, int y, const std::string& text, Color c, int scale) {
  for_each_ink_pixel(text, [&](int col, int row) {
    fill_rect(img, x + col * scale, y + row * scale, scale, scale, c);
  });
}

void draw_text_up(Image& img, int x, int y, const std::string& text, Color c, int scale) {
  // Turning counter-clockwise maps text column -> image row counted from the bottom, and text row
  // -> image column.
  int length = text_width(text, 1);
  for_each_ink_pixel(text, [&](int col, int row) {
    fill_rect(img, x + row * scale, y + (length - 1 - col) * scale, scale, scale, c);
  });
}

int text_width(const std::string& text, int scale) {
  return text.empty() ? 0 : (int(text.size()) * kCellWidth - 1) * scale;
}

int text_height(int scale) { return kGlyphHeight * scale; }

void blit(Image& dst, const Image& src, int x, int y) {
  for (int j = 0; j < src.height; ++j)
    for (int i = 0; i < src.width; ++i) dst.set(x + i, y + j, src.at(i, j));
}

std::string shorten(const std::string& text, size_t max_chars) {
  if (text.size() <= max_chars) return text;
  if (max_chars <= 2) return text.substr(0, max_chars);
  return text.substr(0, max_chars - 2) + "..";
}

}  // namespace qkv::train
