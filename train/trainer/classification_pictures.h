// What a trained classifier looks at, as PNG files in the run folder:
//   CNN + SE:   se_block<i>.png, one panel per block for the first test image: the image and
//               block i's channel weights for it (bars) beside their mean over a batch of test
//               images, titled with the predicted label, its probability and the true label
//   CNN + CBAM: cbam_block<i>.png, the same panel with block i's spatial attention as a heatmap
//               (colour bar, min and max) and laid over the image
//   text, ViT:  attention/encoder.<i>.self.png, every head of layer i for the first test example
#pragma once

#include <string>
#include <vector>

#include "train/trainer/classifier.h"

namespace qkv::train {

// The pictures of test example 0, in the run folder (as training ends). Returns the files
// written (none for a plain CNN).
std::vector<std::string> write_classifier_pictures(const Classifier& k,
                                                   const ClassificationSet& set,
                                                   const std::string& run_dir);

// The pictures of `examples[index]` (an image's row in set.pixels, or token ids) in out_dir,
// `caption` naming it in the titles. The channel weights' means are over the batch of up to 256
// examples starting there. Used by `qkv attention` on classifier runs.
std::vector<std::string> write_classifier_pictures(const Classifier& k,
                                                   const ClassificationSet& set,
                                                   const std::vector<Example>& examples,
                                                   size_t index, const std::string& caption,
                                                   const std::string& out_dir);

}  // namespace qkv::train
