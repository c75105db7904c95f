#include "train/trainer/classifier.h"

#include <filesystem>
#include <sstream>

#include "engine/error.h"
#include "engine/ops.h"
#include "nn/safetensors.h"
#include "train/atomic_file.h"
#include "train/dataset.h"
#include "train/run_lock.h"
#include "train/scaled_defaults.h"
#include "train/trainer/model_files.h"
#include "train/trainer/translator.h"

namespace qkv::train {

namespace {

const char* kVocabFile = "vocab.json";

ClassificationSet prepare_images(const Config& c) {
  const std::string dir = c.data.empty() ? kFashionMnistDir : c.data;
  ImageDataset train = load_fashion_mnist("train", dir), test = load_fashion_mnist("test", dir);
  const int64_t valid_size = generated_holdout_size(c.valid_size);
  const int64_t test_size = generated_holdout_size(c.test_size);
  QKV_CHECK(valid_size < train.count, "--valid-size", valid_size,
            " leaves no training images (the training file has ", train.count, ")");
  ClassificationSet s;
  s.images = true;
  s.labels = train.class_names;
  s.pixels = train;  // the test file's images go after the training file's
  s.pixels.pixels.insert(s.pixels.pixels.end(), test.pixels.begin(), test.pixels.end());
  s.pixels.labels.insert(s.pixels.labels.end(), test.labels.begin(), test.labels.end());
  s.pixels.count += test.count;
  auto row = [&](int64_t r) { return Example{{r}, {}, s.pixels.labels[size_t(r)]}; };
  const int64_t first_valid = train.count - valid_size;
  for (int64_t r = 0; r < std::min(c.train_size, first_valid); ++r) s.train.push_back(row(r));
  for (int64_t r = first_valid; r < train.count; ++r) s.valid.push_back(row(r));
  for (int64_t r = 0; r < std::min(test_size, test.count); ++r)
    s.test.push_back(row(train.count + r));
  return s;
}

std::vector<int64_t> parse_channels(const std::string& text) {
  std::vector<int64_t> widths;
  std::stringstream in(text);
  std::string part;
  while (std::getline(in, part, ','))
    if (part.find_first_not_of(' ') != std::string::npos) widths.push_back(std::stoll(part));
  QKV_CHECK(!widths.empty(), "--channels", "expected widths such as 16,32, got '", text, "'");
  for (int64_t w : widths) QKV_CHECK(w > 0, "--channels", "widths must be positive: '", text, "'");
  return widths;
}

}  // namespace

ClassificationSet prepare_classification_set(const Config& c) {
  if (task_kind(c.task) == TaskKind::image_classification) return prepare_images(c);
  ClassificationData d = prepare_classification_data(c);
  ClassificationSet s;
  s.labels = std::move(d.labels);
  s.vocab = std::move(d.vocab);
  s.train = std::move(d.train), s.valid = std::move(d.valid), s.test = std::move(d.test);
  return s;
}

ClassifierBatch make_classifier_batch(const ClassificationSet& set,
                                      const std::vector<Example>& split,
                                      const std::vector<size_t>& indices, int64_t max_len) {
  ClassifierBatch b;
  if (set.images) {
    std::vector<size_t> rows;
    for (size_t i : indices) rows.push_back(size_t(split[i].src[0]));
    b.inputs = images_tensor(set.pixels, rows);
    b.labels = labels_tensor(set.pixels, rows);
    return b;
  }
  Batch text = make_batch(split, indices, max_len);
  b.inputs = text.src, b.pad_mask = text.src_pad_mask, b.labels = text.labels;
  return b;
}

nn::Module& Classifier::module() const {
  if (text) return *text;
  if (cnn) return *cnn;
  QKV_CHECK(vit != nullptr, "classifier", "no model");
  return *vit;
}

std::string Classifier::architecture() const { return module().describe(); }

Tensor Classifier::forward(const ClassifierBatch& b) const {
  Tensor x = b.inputs.to(device);
  if (text) return text->forward(x, b.pad_mask.to(device));
  return cnn ? cnn->forward(x) : vit->forward(x);
}

double Classifier::accuracy(const ClassificationSet& set, const std::vector<Example>& split,
                            size_t limit) const {
  const size_t n = std::min(limit, split.size());
  if (n == 0) return 0;
  NoGrad no_grad;
  module().eval();
  size_t correct = 0;
  for (size_t start = 0; start < n; start += 256) {
    std::vector<size_t> indices;
    for (size_t i = start; i < std::min(n, start + 256); ++i) indices.push_back(i);
    ClassifierBatch b = make_classifier_batch(set, split, indices, config.max_len);
    Tensor logits = forward(b).to(Device::cpu()).contiguous();
    const int64_t classes = logits.size(1);
    std::vector<float> values = logits.to_vector<float>();
    std::vector<int64_t> labels = b.labels.to_vector<int64_t>();
    for (size_t r = 0; r < indices.size(); ++r) {
      auto row = values.begin() + int64_t(r) * classes;
      correct += std::max_element(row, row + classes) - row == labels[r];
    }
  }
  module().train();
  return double(correct) / double(n);
}

void Classifier::move_to(Device to) {
  if (to == device) return;
  module().to(to);
  device = to;
}

Classifier make_classifier(const Config& c, const ClassificationSet& set) {
  Classifier k;
  k.config = c;
  k.labels = set.labels;
  k.vocab = set.vocab;
  k.device = parse_device(c.device);
  const int64_t classes = int64_t(set.labels.size());
  if (!set.images) {
    k.text = std::make_shared<models::TransformerClassifier>(
        text_classifier_config(c, int64_t(set.vocab.size()), classes));
  } else if (c.model == "vit") {
    QKV_CHECK(set.pixels.height % c.patch_size == 0, "--patch-size", c.patch_size,
              " does not divide the image size ", set.pixels.height);
    k.vit = std::make_shared<models::VisionTransformer>(vit_config(c, set.pixels.height, classes));
  } else {
    k.cnn = std::make_shared<models::CnnClassifier>(cnn_config(c, set.pixels.height, classes));
  }
  if (!k.device.is_cpu()) k.module().to(k.device);
  return k;
}

models::TransformerClassifierConfig text_classifier_config(const Config& c, int64_t vocab,
                                                           int64_t classes) {
  models::TransformerClassifierConfig m;
  m.vocab = vocab, m.num_classes = classes;
  m.d_model = c.d_model, m.num_heads = c.heads, m.num_layers = c.layers;
  m.dim_feedforward = c.ff_dim, m.dropout = c.dropout;
  m.max_len = c.max_len, m.positional = c.positional, m.pooling = c.pooling;
  return m;
}

models::VisionTransformerConfig vit_config(const Config& c, int64_t image_size, int64_t classes) {
  models::VisionTransformerConfig m;
  m.image_size = image_size, m.patch_size = c.patch_size, m.num_classes = classes;
  m.d_model = c.d_model, m.num_heads = c.heads, m.num_layers = c.layers;
  m.dim_feedforward = c.ff_dim, m.dropout = c.dropout;
  return m;
}

models::CnnClassifierConfig cnn_config(const Config& c, int64_t image_size, int64_t classes) {
  models::CnnClassifierConfig m;
  m.image_size = image_size, m.num_classes = classes;
  m.channels = parse_channels(c.channels), m.attention = c.attention;
  return m;
}

nlohmann::json model_config_json(const Classifier& k) {
  if (k.text) return k.text->config;
  if (k.cnn) return k.cnn->config;
  QKV_CHECK(k.vit != nullptr, "classifier", "no model");
  return k.vit->config;
}

void save_classifier_files(const Classifier& k, const std::string& run_dir) {
  nlohmann::json j = {
      {"architecture", k.architecture()}, {"config", model_config_json(k)}, {"labels", k.labels}};
  namespace fs = std::filesystem;
  write_file_atomic((fs::path(run_dir) / kModelJson).string(), j.dump(2) + "\n");
  if (k.text) k.vocab.save((fs::path(run_dir) / kVocabFile).string());
}

std::string run_architecture(const std::string& run_dir) {
  namespace fs = std::filesystem;
  QKV_CHECK(fs::is_directory(run_dir), "--run", "no run folder at '", run_dir, "'");
  std::string path = (fs::path(run_dir) / kModelJson).string();
  QKV_CHECK(fs::exists(path), "--run", run_dir, " has no ", kModelJson,
            " (was it made by `qkv train`?)");
  return parse_model_architecture(read_file(path, "--run"), path);
}

Classifier load_classifier(const std::string& run_dir, const std::string& weights_file) {
  namespace fs = std::filesystem;
  auto path = [&](const std::string& name) {
    std::string p = (fs::path(run_dir) / name).string();
    QKV_CHECK(fs::exists(p), "--run", run_dir, " has no ", name,
              " (was it made by `qkv train classify`, and did it save a checkpoint?)");
    return p;
  };
  run_architecture(run_dir);  // the folder and model.json exist
  const CheckpointLock no_switch_while_loading(run_dir, CheckpointLock::read);
  Classifier k;
  k.config = load_config(path("config.json"));
  ClassifierModelJson m =
      parse_classifier_model_json(read_file(path(kModelJson), "--run"), path(kModelJson));
  k.labels = m.labels;
  const nn::TensorMap weights = nn::load_safetensors(path(weights_file)).tensors;
  check_model_fits_weights(m.text  ? estimated_parameters(*m.text)
                           : m.cnn ? estimated_parameters(*m.cnn)
                                   : estimated_parameters(*m.vit),
                           weights, path(kModelJson), path(weights_file));
  if (m.text) {
    k.vocab = Vocab::load(path(kVocabFile));
    check_vocab_tokenizer(k.vocab, run_tokenizers(k.config).source, path(kVocabFile));
    QKV_CHECK(int64_t(k.vocab.size()) == m.text->vocab, "--run", run_dir, ": the vocabulary (",
              k.vocab.size(), " tokens) does not match the model (", m.text->vocab, ")");
    k.text = std::make_shared<models::TransformerClassifier>(*m.text);
  }
  if (m.cnn) k.cnn = std::make_shared<models::CnnClassifier>(*m.cnn);
  if (m.vit) k.vit = std::make_shared<models::VisionTransformer>(*m.vit);
  // The weights fit a model.json edited to other heads just as well: config.json says which.
  const int64_t classes = int64_t(m.labels.size());
  const nlohmann::json built =
      m.text  ? nlohmann::json(text_classifier_config(k.config, m.text->vocab, classes))
      : m.cnn ? nlohmann::json(cnn_config(k.config, m.cnn->image_size, classes))
              : nlohmann::json(vit_config(k.config, m.vit->image_size, classes));
  const std::string differences = model_config_differences(model_config_json(k), built);
  QKV_CHECK(differences.empty(), "--run", path(kModelJson),
            " does not describe the model the run's config.json builds: ", differences,
            " (was model.json edited?)");
  k.module().load_state_dict(weights);
  k.module().eval();
  return k;
}

}  // namespace qkv::train
