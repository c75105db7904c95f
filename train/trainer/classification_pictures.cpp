#include "train/trainer/classification_pictures.h"

#include <filesystem>

#include "engine/error.h"
#include "engine/ops.h"
#include "train/plots.h"
#include "train/png.h"

namespace qkv::train {

namespace {

namespace fs = std::filesystem;

std::vector<std::string> se_charts(const Classifier& k, const ClassifierBatch& b,
                                   const std::string& dir) {
  std::vector<std::string> written;
  auto weights = k.cnn->se_weights();
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!weights[i].defined()) continue;
    // [B, C] -> the mean over the batch: what each channel gets on average
    std::vector<float> mean_c = mean(weights[i], {0}).contiguous().to_vector<float>();
    std::string path = (fs::path(dir) / ("se_block" + std::to_string(i) + ".png")).string();
    bar_chart_png(path, std::vector<double>(mean_c.begin(), mean_c.end()), {},
                  {.title = "SE channel weights, block " + std::to_string(i) + " (mean over " +
                            std::to_string(b.labels.size(0)) + " test images)",
                   .x_label = "channel",
                   .y_label = "weight"});
    written.push_back(path);
  }
  return written;
}

std::vector<std::string> cbam_overlays(const Classifier& k, const ClassifierBatch& b,
                                       const std::string& dir) {
  std::vector<std::string> written;
  const int h = int(b.inputs.size(2)), w = int(b.inputs.size(3));
  std::vector<float> all = b.inputs.contiguous().to_vector<float>();
  std::vector<float> image(all.begin(), all.begin() + h * w);  // the first image of the batch
  auto maps = k.cnn->cbam_spatial_maps();
  for (size_t i = 0; i < maps.size(); ++i) {
    if (!maps[i].defined()) continue;
    const int mh = int(maps[i].size(-2)), mw = int(maps[i].size(-1));
    std::vector<float> m = maps[i].contiguous().to_vector<float>();
    std::vector<float> heat(m.begin(), m.begin() + mh * mw);
    std::string path = (fs::path(dir) / ("cbam_block" + std::to_string(i) + ".png")).string();
    write_png(path, overlay_heatmap_on_image(image, h, w, heat, mh, mw));
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
    std::vector<size_t> batch;  // the example first: the CBAM overlays show the batch's first
    for (size_t i = index; i < std::min(examples.size(), index + 256); ++i) batch.push_back(i);
    ClassifierBatch b = make_classifier_batch(set, examples, batch, k.config.max_len);
    k.forward(b);
    auto se = se_charts(k, b, out_dir), cbam = cbam_overlays(k, b, out_dir);
    written.insert(written.end(), se.begin(), se.end());
    written.insert(written.end(), cbam.begin(), cbam.end());
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
