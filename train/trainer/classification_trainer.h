// `qkv train classify`: the training loop of a classifier, for text (order, classify) and images
// (fashion-mnist with a CNN or a ViT).
//
// One step: a batch -> logits -> cross entropy (with label smoothing) -> backward -> gradient
// clipping -> AdamW step with the scheduled learning rate. Every eval_every steps: accuracy on the
// validation split, a checkpoint, and a fresh loss.png. At the end: test accuracy and the pictures
// of what the model attends to (classification_pictures.h). The loop mirrors the translation
// trainer's, and resumes the same way: same data order, same random stream.
#pragma once

#include "train/config.h"
#include "train/trainer/translation_trainer.h"  // TrainResult

namespace qkv::train {

// The run folder's modes as for train_translation.
TrainResult train_classification(const Config& config, RunMode mode);
inline TrainResult train_classification(const Config& config, bool resume = false) {
  return train_classification(config, resume ? RunMode::resume : RunMode::fresh);
}

}  // namespace qkv::train
