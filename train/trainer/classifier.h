// A classifier as a run folder holds it, and the data it is trained on.
//
// Text tasks (order, classify) train a TransformerClassifier over token ids; fashion-mnist trains
// a CnnClassifier (with none/SE/CBAM attention) or a VisionTransformer, as `model` says. model.json
// records the architecture, its config and the label names, so `qkv eval --run` rebuilds the
// model without flags.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/classifiers.h"
#include "train/batching.h"
#include "train/checkpoint_dir.h"
#include "train/config.h"
#include "train/data/idx.h"
#include "train/tokenizer.h"

namespace qkv::train {

// The splits of a classification task, text or images, in one shape: each split is a list of
// Examples with their label. For images an Example's `src` holds one number, the row of its
// image in `pixels` (which is the training file's images followed by the test file's), so the
// batching and shuffling code of the text tasks serves the images unchanged.
struct ClassificationSet {
  bool images = false;
  std::vector<std::string> labels;
  Vocab vocab;  // text tasks
  std::vector<Example> train, valid, test;
  ImageDataset pixels;  // images
};

// Text: prepare_classification_data. Images: valid is the last valid_size images of the training
// file, train up to train_size of the ones before it, test the first test_size of the test file.
ClassificationSet prepare_classification_set(const Config& config);

struct ClassifierBatch {
  Tensor inputs;    // int64 ids [B, T] or float images [B, 1, H, W]
  Tensor pad_mask;  // bool [B, T], true = pad (text only)
  Tensor labels;    // int64 [B]
};
ClassifierBatch make_classifier_batch(const ClassificationSet& set,
                                      const std::vector<Example>& split,
                                      const std::vector<size_t>& indices, int64_t max_len);

struct Classifier {
  Config config;
  std::vector<std::string> labels;
  Vocab vocab;  // text only
  // Exactly one of these is set.
  std::shared_ptr<models::TransformerClassifier> text;
  std::shared_ptr<models::CnnClassifier> cnn;
  std::shared_ptr<models::VisionTransformer> vit;
  Device device = Device::cpu();

  nn::Module& module() const;
  void move_to(Device to);  // the model's parameters and buffers; forward() then runs there
  std::string architecture() const;  // "TransformerClassifier", "CnnClassifier", ...
  Tensor forward(const ClassifierBatch& batch) const;  // logits [B, classes]
  // Fraction of the first `limit` examples of `split` whose largest logit is their label
  // (eval mode, no gradients; the model is put back in training mode after).
  double accuracy(const ClassificationSet& set, const std::vector<Example>& split,
                  size_t limit = SIZE_MAX) const;
};

// The model the config asks for, sized for the data (vocabulary, classes, image size).
Classifier make_classifier(const Config& config, const ClassificationSet& set);

// The config of the model the options ask for, sized by `vocab` (text), `image_size` and
// `classes`: what model.json's "config" holds.
models::TransformerClassifierConfig text_classifier_config(const Config& c, int64_t vocab,
                                                           int64_t classes);
models::VisionTransformerConfig vit_config(const Config& c, int64_t image_size, int64_t classes);
models::CnnClassifierConfig cnn_config(const Config& c, int64_t image_size, int64_t classes);
// model.json's "config" of the classifier's model.
nlohmann::json model_config_json(const Classifier& k);

// model.json: {"architecture", "config", "labels"}; vocab.json for text models.
void save_classifier_files(const Classifier& c, const std::string& run_dir);
// Rebuilds the model from a run folder and loads its weights from `weights_file` there
// (model.safetensors, the last checkpoint, or best.safetensors: train/trainer/best_model.h).
// Errors name the folder and file.
Classifier load_classifier(const std::string& run_dir,
                           const std::string& weights_file = kModelFile);

// The "architecture" of a run folder's model.json ("Seq2SeqTransformer", "CnnClassifier", ...),
// which tells `qkv eval` what kind of run it is.
std::string run_architecture(const std::string& run_dir);

}  // namespace qkv::train
