// Checkpoints in the safetensors format, so a qkv checkpoint opens in PyTorch (and back).
//
// The file is: 8 bytes little-endian header length N, N bytes of JSON mapping each tensor name to
// {"dtype": "F32"|"F64"|"I64"|"BF16"|"BOOL"|"I8", "shape": [...], "data_offsets": [begin, end]}
// (byte offsets into the data that follows, relative to its start), an optional "__metadata__"
// object of string to string, then the raw little-endian tensor bytes.
#pragma once

#include <map>
#include <string>
#include <string_view>

#include "engine/tensor.h"

namespace qkv::nn {

using TensorMap = std::map<std::string, Tensor>;

// The whole file as bytes (tensors are copied to the host), for a caller that writes it itself.
std::string safetensors_bytes(const TensorMap& tensors,
                              const std::map<std::string, std::string>& metadata = {});

// Writes atomically: a temporary file in the same folder, then rename, so a crash mid-write never
// leaves a half checkpoint under the real name.
void save_safetensors(const std::string& path, const TensorMap& tensors,
                      const std::map<std::string, std::string>& metadata = {});

struct SafetensorsFile {
  TensorMap tensors;  // CPU tensors
  std::map<std::string, std::string> metadata;
};

// Validates everything before trusting it (header length, JSON, dtypes, shapes against byte spans,
// offsets in range and not overlapping) and throws qkv::Error naming the file and the fault.
SafetensorsFile load_safetensors(const std::string& path);
// The same checks on a file's bytes already in memory; `what` (the file name) starts every error.
// load_safetensors reads the file and calls this; the fuzz target calls it directly.
SafetensorsFile parse_safetensors(std::string_view bytes, const std::string& what);

}  // namespace qkv::nn
