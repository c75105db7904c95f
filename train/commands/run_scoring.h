// What `qkv eval` and `qkv quantize` share: scoring a translation run on its test split, and the
// INT8 model file a quantized run carries.
#pragma once

#include <cstdint>
#include <string>

#include "nn/module.h"
#include "train/dataset.h"
#include "train/trainer/translator.h"

namespace qkv::cli {

// Written by `qkv quantize` into the run folder, read by `qkv eval --int8`.
inline const char* kInt8ModelFile = "model.int8.safetensors";

struct ExactMatch {
  size_t correct = 0, total = 0;
  double fraction() const { return total ? double(correct) / double(total) : 0.0; }
};
// Translates the test split in batches of 256 (greedy or beam) and counts outputs equal to the
// reference (as the target vocabulary renders it, so unknown characters compare as UNK).
ExactMatch translation_exact_match(const train::Translator& t, const train::TranslationData& data,
                                   int64_t beam);

// Loads run_dir/model.int8.safetensors into `module` (built from the run's model.json), so its
// Linear layers run in int8. A missing file says how to make one.
void load_int8_model(nn::Module& module, const std::string& run_dir);

// The float weights file (kModelFile or best.safetensors) model.int8.safetensors was quantized
// from, as its "weights" metadata says (model.safetensors when it says none). Throws qkv::Error
// naming --int8 when that is not `weights_file`: the int8 Linear layers would sit in other
// weights.
void check_int8_source(const std::string& run_dir, const std::string& weights_file);

}  // namespace qkv::cli
