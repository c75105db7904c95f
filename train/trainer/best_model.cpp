#include "train/trainer/best_model.h"

#include <cstdio>
#include <filesystem>

#include "engine/error.h"
#include "nn/safetensors.h"
#include "train/trainer/translator.h"

namespace qkv::train {

void save_best_model(const RunDir& run, const nn::Module& model, const BestModel& best) {
  char value[32];
  std::snprintf(value, sizeof value, "%.17g", best.value);  // reads back as the same double
  run.write(kBestModelFile,
            nn::safetensors_bytes(model.state_dict(), {{"format", "pt"},
                                                       {"best_metric", best.metric},
                                                       {"best_value", value},
                                                       {"best_step", std::to_string(best.step)}}));
}

BestModel read_best_model(const std::string& path) {
  const nn::SafetensorsFile file = nn::load_safetensors(path);
  auto field = [&](const char* key) {
    auto it = file.metadata.find(key);
    QKV_CHECK(it != file.metadata.end() && !it->second.empty(), "--run", path,
              ": its metadata has no \"", key, "\" (is it a best model that qkv train wrote?)");
    return it->second;
  };
  BestModel best;
  best.metric = field("best_metric");
  const std::string value = field("best_value"), step = field("best_step");
  size_t used = 0;
  try {
    best.value = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  QKV_CHECK(used == value.size(), "--run", path, ": \"best_value\" is not a number: '", value, "'");
  try {
    best.step = std::stoll(step, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  QKV_CHECK(used == step.size() && best.step >= 0, "--run", path,
            ": \"best_step\" is not a non-negative integer: '", step, "'");
  return best;
}

std::string ModelWeights::describe() const {
  if (!best) return file + " (the last checkpoint)";
  char text[160];
  std::snprintf(text, sizeof text, " (%s %.4f at step %lld)", best->metric.c_str(), best->value,
                (long long)best->step);
  return file + text;
}

ModelWeights choose_model_weights(const std::string& run_dir, bool last) {
  const std::string best_path = (std::filesystem::path(run_dir) / kBestModelFile).string();
  if (last || !std::filesystem::exists(best_path)) return {kModelFile, std::nullopt};
  return {kBestModelFile, read_best_model(best_path)};
}

}  // namespace qkv::train
