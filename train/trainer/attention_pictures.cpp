#include "train/trainer/attention_pictures.h"

#include <filesystem>

#include "engine/ops.h"
#include "train/plots.h"
#include "train/png.h"

namespace qkv::train {

std::vector<std::string> write_attention_maps(const Translator& t, const std::string& text,
                                              const std::string& out_dir) {
  std::vector<std::vector<int64_t>> out_ids;
  t.translate({text}, 1, &out_ids);
  // decoder input: BOS + the generated tokens up to (not including) EOS
  std::vector<int64_t> tgt_in;
  for (int64_t id : out_ids[0]) {
    if (id == Vocab::EOS || id == Vocab::PAD) break;
    tgt_in.push_back(id);
  }
  std::vector<int64_t> src = t.source_vocab.encode(text);
  std::vector<std::string> src_tokens = t.source_vocab.tokens_of(src);
  std::vector<std::string> tgt_tokens = t.target_vocab.tokens_of(tgt_in);

  NoGrad no_grad;
  t.model->set_record_attention(true);
  t.model->forward(tensor_i64(src, {1, int64_t(src.size())}).to(t.device),
                   tensor_i64(tgt_in, {1, int64_t(tgt_in.size())}).to(t.device), Tensor(),
                   Tensor());
  auto maps = t.model->attention_maps();
  t.model->set_record_attention(false);

  std::filesystem::create_directories(out_dir);
  std::vector<std::string> written;
  for (const auto& map : maps) {
    // map.weights: [1, H, T, S]
    const int64_t heads = map.weights.size(1), rows = map.weights.size(2),
                  cols = map.weights.size(3);
    std::vector<float> all = map.weights.contiguous().to_vector<float>();
    std::vector<std::vector<float>> per_head;
    for (int64_t h = 0; h < heads; ++h)
      per_head.emplace_back(all.begin() + h * rows * cols, all.begin() + (h + 1) * rows * cols);
    bool encoder = map.name.rfind("encoder", 0) == 0;
    bool cross = map.name.find("cross") != std::string::npos;
    const auto& row_tokens = encoder ? src_tokens : tgt_tokens;
    const auto& col_tokens = encoder || cross ? src_tokens : tgt_tokens;
    std::string path = (std::filesystem::path(out_dir) / (map.name + ".png")).string();
    write_png(path,
              attention_grid(per_head, row_tokens, col_tokens, map.name + ": \"" + text + "\""));
    written.push_back(path);
  }
  return written;
}

}  // namespace qkv::train
