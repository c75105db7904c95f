// One picture of what a CNN block's attention does to one input image: the input, the spatial
// attention (CBAM) as a heatmap with its colour bar and its range, the map laid over the input,
// and the channel weights (SE and CBAM) as bars, under a title naming the prediction.
//
// Both kinds of attention are sigmoid gates: each feature is multiplied by a weight in (0, 1).
// So the map and the overlay are coloured on that fixed 0..1 scale, not stretched to the map's
// own range: a map that gates every position alike looks uniform, and the panel says so in words.
#pragma once

#include <string>
#include <vector>

#include "train/png.h"

namespace qkv::train {

struct PanelInput {
  std::vector<float> gray;  // [height, width] in [0, 1]
  int height = 0, width = 0;
  std::string caption;  // what the image is, e.g. "test image 17"
};

struct BlockAttention {
  std::string heading;                  // e.g. "block 1 of 3: CBAM, 32 channels at 14x14"
  std::vector<double> channel_weights;  // this image's, one per channel; empty: none
  std::vector<double> channel_means;    // over a batch of images, drawn as marks; may be empty
  std::string means_of;                 // what the means are over, e.g. "256 test images"
  std::vector<float> spatial;           // [spatial_h, spatial_w]; empty: no spatial attention
  int spatial_h = 0, spatial_w = 0;
};

// A map whose values span less than this (on the gate's 0..1 scale) is reported as nearly
// constant: its colours would differ by under 5% of the colour bar.
inline constexpr double kNearlyConstantSpan = 0.05;

struct MapRange {
  double min = 0, max = 0;
  bool nearly_constant = false;
};
MapRange map_range(const std::vector<float>& map);
// "min 0.412, max 0.587", or "nearly constant: 0.497 to 0.503" (the panel writes it under the map).
std::string map_range_text(const MapRange& range);

// `title`, e.g. "predicted Sneaker (p = 0.93), true Sneaker", heads the panel in large letters.
Image attention_block_panel(const std::string& title, const PanelInput& input,
                            const BlockAttention& block);

}  // namespace qkv::train
