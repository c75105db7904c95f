#include "train/data/idx.h"

#include <sys/mman.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <memory>

#include "engine/error.h"
#include "engine/ops.h"

namespace qkv::train {

namespace {

struct GzCloser {
  void operator()(gzFile_s* f) const { gzclose(f); }
};
using GzFile = std::unique_ptr<gzFile_s, GzCloser>;

// Reads exactly `n` bytes; false when the file ends first.
bool read_exactly(gzFile f, void* dest, size_t n, const std::string& path) {
  auto* out = static_cast<unsigned char*>(dest);
  while (n > 0) {
    unsigned chunk = unsigned(std::min<size_t>(n, 1u << 30));
    int got = gzread(f, out, chunk);
    if (got < 0) {
      int code = 0;
      throw Error(path + ": cannot decompress: " + gzerror(f, &code));
    }
    if (got == 0) return false;
    out += got;
    n -= size_t(got);
  }
  return true;
}

uint32_t big_endian(const unsigned char* b) {
  return uint32_t(b[0]) << 24 | uint32_t(b[1]) << 16 | uint32_t(b[2]) << 8 | uint32_t(b[3]);
}

// The one reader behind both entry points; `path` names the file in errors.
IdxArray read_idx(gzFile f, const std::string& path) {
  unsigned char magic[4];
  if (!read_exactly(f, magic, 4, path)) throw Error(path + ": too short for an IDX header");
  if (magic[0] != 0 || magic[1] != 0)
    throw Error(path + ": not an IDX file (magic number does not start with two zero bytes)");
  if (magic[2] != 0x08)
    throw Error(path + ": IDX type code " + std::to_string(magic[2]) +
                " is not 8 (unsigned byte), the only type supported");
  int ndims = magic[3];
  if (ndims < 1 || ndims > 4)
    throw Error(path + ": IDX files here have 1 to 4 dimensions, this one says " +
                std::to_string(ndims));
  IdxArray a;
  size_t numel = 1;
  for (int d = 0; d < ndims; ++d) {
    unsigned char b[4];
    if (!read_exactly(f, b, 4, path)) throw Error(path + ": truncated IDX header");
    uint32_t n = big_endian(b);
    // 2^31 bytes is far beyond any data set of this format; a larger size means a corrupt header.
    if (n == 0 || numel * n > (size_t(1) << 31))
      throw Error(path + ": implausible dimension " + std::to_string(d) + " of size " +
                  std::to_string(n));
    a.dims.push_back(n);
    numel *= n;
  }
  // The data grows chunk by chunk as it arrives: a 30-byte file whose header promises 2 GiB must
  // fail on its missing data, not first allocate 2 GiB (compressed size says nothing about the
  // decompressed size, so it cannot be checked up front).
  constexpr size_t kChunk = size_t(1) << 20;
  for (size_t have = 0; have < numel;) {
    size_t want = std::min(kChunk, numel - have);
    a.data.resize(have + want);
    if (!read_exactly(f, a.data.data() + have, want, path))
      throw Error(path + ": truncated: the header promises " + std::to_string(numel) +
                  " bytes of data and the file ends before that");
    have += want;
  }
  unsigned char extra;
  if (read_exactly(f, &extra, 1, path))
    throw Error(path + ": more data than the header's dimensions say");
  return a;
}

}  // namespace

IdxArray read_idx_gz(const std::string& path) {
  if (!std::filesystem::exists(path)) throw Error(path + ": no such file");
  GzFile f(gzopen(path.c_str(), "rb"));
  if (!f) throw Error(path + ": cannot open");
  return read_idx(f.get(), path);
}

IdxArray parse_idx_gz(std::string_view bytes, const std::string& what) {
  // zlib's gz* reader (which also passes plain files through) needs a file descriptor; an
  // anonymous in-memory file gives it one without touching the file system.
  int fd = ::memfd_create("qkv-idx", MFD_CLOEXEC);
  if (fd < 0) throw Error(what + ": memfd_create failed: " + std::strerror(errno));
  for (size_t done = 0; done < bytes.size();) {
    ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n <= 0) {
      ::close(fd);
      throw Error(what + ": cannot buffer the bytes: " + std::strerror(errno));
    }
    done += size_t(n);
  }
  ::lseek(fd, 0, SEEK_SET);
  GzFile f(gzdopen(fd, "rb"));  // owns fd from here: gzclose closes it
  if (!f) {
    ::close(fd);
    throw Error(what + ": cannot open");
  }
  return read_idx(f.get(), what);
}

ImageDataset load_fashion_mnist(const std::string& split, const std::string& dir) {
  QKV_CHECK(split == "train" || split == "test", "fashion-mnist",
            "split must be train or test, got '", split, "'");
  const std::string prefix = dir + "/" + (split == "train" ? "train" : "t10k");
  const std::string images_path = prefix + "-images-idx3-ubyte.gz";
  const std::string labels_path = prefix + "-labels-idx1-ubyte.gz";
  for (const auto& p : {images_path, labels_path})
    if (!std::filesystem::exists(p))
      throw Error("fashion-mnist: " + p +
                  " not found (Debian package dataset-fashion-mnist); install it with: make deps "
                  "DATA=fashion-mnist");
  IdxArray images = read_idx_gz(images_path), labels = read_idx_gz(labels_path);
  if (images.dims.size() != 3) throw Error(images_path + ": expected 3 dimensions [N, H, W]");
  if (labels.dims.size() != 1) throw Error(labels_path + ": expected 1 dimension [N]");
  if (images.dims[0] != labels.dims[0])
    throw Error("fashion-mnist: " + std::to_string(images.dims[0]) + " images but " +
                std::to_string(labels.dims[0]) + " labels");
  ImageDataset d;
  d.count = images.dims[0];
  d.height = images.dims[1];
  d.width = images.dims[2];
  d.pixels = std::move(images.data);
  d.class_names = {"t-shirt/top", "trouser", "pullover", "dress", "coat",
                   "sandal",      "shirt",   "sneaker",  "bag",   "ankle boot"};
  for (uint8_t l : labels.data) {
    if (l >= d.class_names.size())
      throw Error(labels_path + ": label " + std::to_string(l) + " is not in 0..9");
    d.labels.push_back(l);
  }
  return d;
}

Tensor images_tensor(const ImageDataset& data, const std::vector<size_t>& indices) {
  const size_t plane = size_t(data.height * data.width);
  std::vector<double> values;
  values.reserve(indices.size() * plane);
  for (size_t i : indices) {
    QKV_CHECK(i < size_t(data.count), "images_tensor", "index ", i, " out of range");
    for (size_t k = 0; k < plane; ++k) values.push_back(data.pixels[i * plane + k] / 255.0);
  }
  return tensor(values, {int64_t(indices.size()), 1, data.height, data.width});
}

Tensor labels_tensor(const ImageDataset& data, const std::vector<size_t>& indices) {
  std::vector<int64_t> labels;
  for (size_t i : indices) labels.push_back(data.labels.at(i));
  return tensor_i64(labels, {int64_t(labels.size())});
}

}  // namespace qkv::train
