// RGB images and PNG files.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace qkv::train {

struct Color {
  uint8_t r = 0, g = 0, b = 0;
  bool operator==(const Color&) const = default;
};

// 8-bit RGB pixels, row-major, top row first.
struct Image {
  int width = 0, height = 0;
  std::vector<uint8_t> rgb;  // width * height * 3

  Image() = default;
  Image(int width, int height, Color fill = {255, 255, 255});
  Color at(int x, int y) const;
  // Out-of-bounds writes are dropped, so drawing code need not clip.
  void set(int x, int y, Color c);
};

// The PNG file's bytes (encoded by stb_image_write).
std::string encode_png(const Image& image);
// Writes `image` to `path` as PNG, atomically. Throws qkv::Error naming the path on failure.
void write_png(const std::string& path, const Image& image);

}  // namespace qkv::train
