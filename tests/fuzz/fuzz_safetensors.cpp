// nn/safetensors: a checkpoint file's bytes. A file that parses must survive a save and a reload
// with the same tensors, bytes and metadata.
#include <unistd.h>

#include <cstring>
#include <filesystem>

#include "nn/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

using namespace qkv;

namespace {

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() &&
         std::memcmp(a.raw_data(), b.raw_data(), size_t(a.numel()) * dtype_size(a.dtype())) == 0;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nn::SafetensorsFile file;
  if (!fuzz::accepts("model.safetensors", [&] {
        file = nn::parse_safetensors(fuzz::as_text(data, size), "model.safetensors");
      }))
    return 0;
  static const std::string path = (std::filesystem::temp_directory_path() /
                                   ("qkv_fuzz_" + std::to_string(::getpid()) + ".safetensors"))
                                      .string();
  nn::save_safetensors(path, file.tensors, file.metadata);
  nn::SafetensorsFile again = nn::load_safetensors(path);
  std::filesystem::remove(path);
  FUZZ_CHECK(again.metadata == file.metadata);
  FUZZ_CHECK(again.tensors.size() == file.tensors.size());
  for (const auto& [name, t] : file.tensors) FUZZ_CHECK(same(t, again.tensors.at(name)));
  return 0;
}
