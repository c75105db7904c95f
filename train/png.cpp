#include "train/png.h"

#include "engine/error.h"
#include "train/atomic_file.h"

// stb_image_write is a single-header library: its implementation is compiled here, once.
#define STB_IMAGE_WRITE_IMPLEMENTATION
#define STBI_WRITE_NO_STDIO  // we write the bytes ourselves, atomically
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
#pragma GCC diagnostic ignored "-Wunused-parameter"
#include <stb_image_write.h>
#pragma GCC diagnostic pop

namespace qkv::train {

Image::Image(int w, int h, Color fill) : width(w), height(h), rgb(size_t(w) * size_t(h) * 3) {
  QKV_CHECK(w > 0 && h > 0, "Image", "size must be positive, got ", w, "x", h);
  for (size_t i = 0; i < rgb.size(); i += 3)
    rgb[i] = fill.r, rgb[i + 1] = fill.g, rgb[i + 2] = fill.b;
}

Color Image::at(int x, int y) const {
  QKV_CHECK(x >= 0 && y >= 0 && x < width && y < height, "Image::at", "pixel (", x, ", ", y,
            ") outside a ", width, "x", height, " image");
  size_t i = (size_t(y) * size_t(width) + size_t(x)) * 3;
  return {rgb[i], rgb[i + 1], rgb[i + 2]};
}

void Image::set(int x, int y, Color c) {
  if (x < 0 || y < 0 || x >= width || y >= height) return;
  size_t i = (size_t(y) * size_t(width) + size_t(x)) * 3;
  rgb[i] = c.r, rgb[i + 1] = c.g, rgb[i + 2] = c.b;
}

std::string encode_png(const Image& image) {
  QKV_CHECK(image.width > 0 && image.height > 0 &&
                image.rgb.size() == size_t(image.width) * size_t(image.height) * 3,
            "encode_png", "image of ", image.width, "x", image.height, " has ", image.rgb.size(),
            " bytes");
  std::string bytes;
  auto append = [](void* context, void* data, int size) {
    static_cast<std::string*>(context)->append(static_cast<const char*>(data), size_t(size));
  };
  int ok = stbi_write_png_to_func(append, &bytes, image.width, image.height, 3, image.rgb.data(),
                                  image.width * 3);
  QKV_CHECK(ok != 0, "encode_png", "stb_image_write failed on a ", image.width, "x", image.height,
            " image");
  return bytes;
}

void write_png(const std::string& path, const Image& image) {
  write_file_atomic(path, encode_png(image));
}

}  // namespace qkv::train
