// Attention heatmaps of a translation model for one input: one PNG per layer and kind (encoder
// self-attention, decoder self-attention, cross-attention), each a grid of the heads and their
// average, with the tokens along both axes.
#pragma once

#include <string>
#include <vector>

#include "train/trainer/translator.h"

namespace qkv::train {

// Translates `text`, re-runs the model on (text, translation) recording attention, and writes the
// maps into `out_dir`. Returns the paths written.
std::vector<std::string> write_attention_maps(const Translator& translator, const std::string& text,
                                              const std::string& out_dir);

}  // namespace qkv::train
