// IDX files (the MNIST family's format) and the Fashion-MNIST data set.
//
// An IDX file is a 4-byte magic number (two zero bytes, a type code, the number of dimensions),
// one big-endian uint32 per dimension, then the data in row-major order. Fashion-MNIST ships
// gzipped IDX files of unsigned bytes: images [N, 28, 28] and labels [N]. Debian packages them as
// dataset-fashion-mnist, under /usr/share/datasets/fashion-mnist/.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "engine/tensor.h"

namespace qkv::train {

struct IdxArray {
  std::vector<int64_t> dims;
  std::vector<uint8_t> data;  // numel(dims) bytes
};

// Reads a gzipped (or plain: zlib reads both) IDX file of unsigned bytes. Throws qkv::Error naming
// the file for a missing file, a wrong magic number, a type other than ubyte, or data shorter or
// longer than the dimensions say.
IdxArray read_idx_gz(const std::string& path);
// The same on a file's bytes already in memory (gzipped or plain); `what` (a file name) starts
// every error. For tests and the fuzz target: it goes through the same zlib reader as read_idx_gz.
IdxArray parse_idx_gz(std::string_view bytes, const std::string& what);

inline const char* kFashionMnistDir = "/usr/share/datasets/fashion-mnist";

struct ImageDataset {
  std::vector<uint8_t> pixels;  // [count, height, width], row-major
  std::vector<int64_t> labels;  // [count]
  int64_t count = 0, height = 0, width = 0;
  std::vector<std::string> class_names;
};

// split is "train" (60000 images) or "test" (10000). A missing directory or file gives an error
// that says how to install the package: "install it with: make deps DATA=fashion-mnist".
ImageDataset load_fashion_mnist(const std::string& split,
                                const std::string& dir = kFashionMnistDir);

// Images `indices` as float32 [B, 1, H, W] scaled to [0, 1], and their labels as int64 [B].
Tensor images_tensor(const ImageDataset& data, const std::vector<size_t>& indices);
Tensor labels_tensor(const ImageDataset& data, const std::vector<size_t>& indices);

}  // namespace qkv::train
