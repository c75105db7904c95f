// The names the classifiers (models/classifiers.h) are built from, for the config's choices,
// --help and model.json's check. Kept apart from classifiers.h so that a list of names needs no
// module headers.
#pragma once

#include <string>
#include <vector>

namespace qkv::models {

// The image classifiers: cnn (CnnClassifier), vit (VisionTransformer).
const std::vector<std::string>& image_classifier_names();

// TransformerClassifierConfig::pooling: cls (a learned [CLS] vector's final state), mean (the
// average of the non-pad positions' final states).
const std::vector<std::string>& pooling_names();

}  // namespace qkv::models
