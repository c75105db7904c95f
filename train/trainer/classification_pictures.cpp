#include "train/trainer/classification_pictures.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>

#include "engine/error.h"
#include "engine/ops.h"
#include "train/attention_panel.h"
#include "train/plots.h"
#include "train/png.h"

namespace qkv::train {

namespace {

namespace fs = std::filesystem;

std::string label_name(const ClassificationSet& set, int64_t label) {
  return label >= 0 && size_t(label) < set.labels.size() ? set.labels[size_t(label)]
                                                         : std::to_string(label);
}

// "predicted Sneaker (p = 0.93), true Sneaker" for the batch's first example.
std::string prediction_title(const ClassificationSet& set, const Tensor& logits,
                             int64_t true_label) {
  std::vector<float> p =
      softmax(logits.narrow(0, 0, 1), -1).to(Device::cpu()).contiguous().to_vector<float>();
  const size_t best = size_t(std::max_element(p.begin(), p.end()) - p.begin());
  char prob[32];
  std::snprintf(prob, sizeof prob, " (p = %.2f)", double(p[best]));
  return "predicted " + label_name(set, int64_t(best)) + prob + ", true " +
         label_name(set, true_label);
}

std::vector<double> row0(const Tensor& t) {  // [B, ...] -> the first example's values
  std::vector<float> v = t.narrow(0, 0, 1).to(Device::cpu()).contiguous().to_vector<float>();
  return {v.begin(), v.end()};
}

// One panel per block with SE or CBAM: the batch's first image, its spatial map (CBAM), and its
// channel weights beside their mean over the batch.
std::vector<std::string> cnn_block_panels(const Classifier& k, const ClassificationSet& set,
                                          const ClassifierBatch& b, const Tensor& logits,
                                          int64_t true_label, const std::string& caption,
                                          const std::string& dir) {
  PanelInput input;
  input.height = int(b.inputs.size(2)), input.width = int(b.inputs.size(3));
  std::vector<double> first = row0(b.inputs);  // channel 0 of the first image
  input.gray.assign(first.begin(), first.begin() + input.height * input.width);
  input.caption = caption;
  const std::string title = prediction_title(set, logits, true_label);
  const size_t blocks = k.cnn->blocks.size();
  std::vector<std::string> written;
  for (size_t i = 0; i < blocks; ++i) {
    const auto& block = *k.cnn->blocks[i];
    if (!block.se && !block.cbam) continue;
    const Tensor& weights = block.se ? block.se->last_weights : block.cbam->last_channel_weights;
    BlockAttention a;
    a.channel_weights = row0(weights);
    std::vector<float> mean_c =
        mean(weights, {0}).to(Device::cpu()).contiguous().to_vector<float>();
    a.channel_means.assign(mean_c.begin(), mean_c.end());
    a.means_of = std::to_string(weights.size(0)) + " test images";
    a.heading = "block " + std::to_string(i) + " of " + std::to_string(blocks) + ": " +
                (block.se ? "SE" : "CBAM") + ", " + std::to_string(a.channel_weights.size()) +
                " channels";
    if (block.cbam) {
      const Tensor& map = block.cbam->last_spatial_map;  // [B, H, W]
      a.spatial_h = int(map.size(-2)), a.spatial_w = int(map.size(-1));
      std::vector<double> m = row0(map);
      a.spatial.assign(m.begin(), m.end());
      a.heading += " at " + std::to_string(a.spatial_h) + "x" + std::to_string(a.spatial_w);
    }
    const std::string name = (block.se ? "se_block" : "cbam_block") + std::to_string(i) + ".png";
    const std::string path = (fs::path(dir) / name).string();
    write_png(path, attention_block_panel(title, input, a));
    written.push_back(path);
  }
  return written;
}

std::vector<std::string> attention_grids(const std::vector<models::AttentionMap>& maps,
                                         const std::vector<std::string>& tokens,
                                         const std::string& caption, const std::string& dir) {
  std::vector<std::string> written;
  fs::create_directories(dir);
  for (const auto& map : maps) {
    // map.weights: [1, H, T, T]
    const int64_t heads = map.weights.size(1), n = map.weights.size(2);
    std::vector<float> all = map.weights.contiguous().to_vector<float>();
    std::vector<std::vector<float>> per_head;
    for (int64_t h = 0; h < heads; ++h)
      per_head.emplace_back(all.begin() + h * n * n, all.begin() + (h + 1) * n * n);
    std::string path = (fs::path(dir) / (map.name + ".png")).string();
    write_png(path, attention_grid(per_head, tokens, tokens, map.name + ": " + caption));
    written.push_back(path);
  }
  return written;
}

}  // namespace

std::vector<std::string> write_classifier_pictures(const Classifier& k,
                                                   const ClassificationSet& set,
                                                   const std::string& run_dir) {
  if (set.test.empty()) return {};
  return write_classifier_pictures(k, set, set.test, 0,
                                   "test example 0 (" + set.labels[size_t(set.test[0].label)] + ")",
                                   run_dir);
}

std::vector<std::string> write_classifier_pictures(const Classifier& k,
                                                   const ClassificationSet& set,
                                                   const std::vector<Example>& examples,
                                                   size_t index, const std::string& caption,
                                                   const std::string& out_dir) {
  QKV_CHECK(index < examples.size(), "classifier pictures", "example ", index, " is out of range (",
            examples.size(), " examples)");
  NoGrad no_grad;
  k.module().eval();
  fs::create_directories(out_dir);
  std::vector<std::string> written;
  const std::string attention_dir = (fs::path(out_dir) / "attention").string();
  if (k.cnn) {
    std::vector<size_t> batch;  // the example first: the panels show the batch's first
    for (size_t i = index; i < std::min(examples.size(), index + 256); ++i) batch.push_back(i);
    ClassifierBatch b = make_classifier_batch(set, examples, batch, k.config.max_len);
    Tensor logits = k.forward(b);
    written = cnn_block_panels(k, set, b, logits, examples[index].label, caption, out_dir);
  } else if (k.vit) {
    ClassifierBatch b = make_classifier_batch(set, examples, {index}, k.config.max_len);
    k.vit->set_record_attention(true);
    k.forward(b);
    std::vector<std::string> tokens{"CLS"};
    const int64_t patches = k.vit->pos_embed.size(1) - 1;
    // append, not "p" + std::string: GCC 12 -O3 gives a false -Wrestrict warning for that
    for (int64_t p = 0; p < patches; ++p)
      tokens.push_back(std::string("p").append(std::to_string(p)));
    written = attention_grids(k.vit->attention_maps(), tokens, caption, attention_dir);
    k.vit->set_record_attention(false);
  } else {
    ClassifierBatch b = make_classifier_batch(set, examples, {index}, k.config.max_len);
    k.text->set_record_attention(true);
    k.forward(b);
    std::vector<int64_t> ids = b.inputs.contiguous().to_vector<int64_t>();
    std::vector<std::string> tokens = k.vocab.tokens_of(ids);
    if (k.text->config.pooling == "cls") tokens.insert(tokens.begin(), "[CLS]");
    written = attention_grids(k.text->attention_maps(), tokens, caption, attention_dir);
    k.text->set_record_attention(false);
  }
  k.module().train();
  return written;
}

}  // namespace qkv::train
