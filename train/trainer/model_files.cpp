#include "train/trainer/model_files.h"

#include <algorithm>
#include <limits>
#include <nlohmann/json.hpp>

#include "engine/error.h"
#include "nn/positional_names.h"
#include "nn/unique_keys_json.h"
#include "train/atomic_file.h"

namespace qkv::train {

using nlohmann::json;

namespace {

json parse_object(std::string_view text, const std::string& source) {
  json j;
  try {
    j = nn::parse_json_unique_keys(text, source);
  } catch (const json::exception& e) {  // parse_error, or out_of_range for 1e999
    throw Error(source + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) throw Error(source + ": must be a JSON object, got " + j.type_name());
  return j;
}

// Each key of `given` that `defaults` also has must hold a value of the same kind. nlohmann's
// get<int64_t>() on 1e300 is a float-to-integer conversion out of range (undefined behaviour), and
// on 2^63 it wraps to a negative number; both are stopped here. Unknown keys are left alone, so a
// file from a newer version still loads.
void check_kinds(const json& given, const json& defaults, const std::string& where) {
  for (const auto& [key, value] : given.items()) {
    if (!defaults.contains(key)) continue;
    const json& like = defaults[key];
    const std::string at = where + ": \"" + key + "\"";
    if (like.is_number_integer()) {
      if (!value.is_number_integer()) throw Error(at + " must be an integer");
      if (value.is_number_unsigned() &&
          value.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
        throw Error(at + " is out of range");
    } else if (like.is_number()) {
      if (!value.is_number()) throw Error(at + " must be a number");
    } else if (like.is_boolean()) {
      if (!value.is_boolean()) throw Error(at + " must be true or false");
    } else if (like.is_string()) {
      if (!value.is_string()) throw Error(at + " must be a string");
    } else if (like.is_array()) {  // CnnClassifierConfig::channels: a list of widths
      if (!value.is_array()) throw Error(at + " must be an array");
      for (const json& v : value)
        if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > (1u << 30)))
          throw Error(at + " must hold integers");
    }
  }
}

// A config of type T from j["config"], every field checked for its kind first.
template <typename T>
T read_config(const json& j, const std::string& source) {
  if (!j.contains("config") || !j["config"].is_object())
    throw Error(source + ": \"config\" must be an object");
  check_kinds(j["config"], json(T{}), source + ": config");
  try {
    return j["config"].get<T>();
  } catch (const json::exception& e) {
    throw Error(source + ": config: " + e.what());
  }
}

void in_range(int64_t value, int64_t low, int64_t high, const char* key,
              const std::string& source) {
  if (value < low || value > high)
    throw Error(source + ": \"" + key + "\" must be in " + std::to_string(low) + ".." +
                std::to_string(high) + ", got " + std::to_string(value));
}

void check_one_of(const std::string& value, std::initializer_list<const char*> valid,
                  const char* key, const std::string& source) {
  std::string list;
  for (const char* v : valid) {
    if (value == v) return;
    list += (list.empty() ? "" : ", ") + std::string(v);
  }
  throw Error(source + ": \"" + key + "\" must be one of " + list + ", got \"" + value + "\"");
}

// Width, heads, feed-forward, layers and dropout of a transformer stack.
void check_transformer(int64_t d_model, int64_t heads, int64_t ff, int64_t layers, double dropout,
                       const std::string& source) {
  in_range(d_model, 1, 1 << 16, "d_model", source);
  in_range(heads, 1, d_model, "num_heads", source);
  if (d_model % heads != 0)
    throw Error(source + ": \"num_heads\" " + std::to_string(heads) + " does not divide d_model " +
                std::to_string(d_model));
  in_range(ff, 1, 1 << 20, "dim_feedforward", source);
  in_range(layers, 1, 256, "layers", source);
  if (!(dropout >= 0 && dropout < 1))
    throw Error(source + ": \"dropout\" must be in [0, 1), got " + std::to_string(dropout));
}

int64_t layer_parameters(int64_t d, int64_t ff) { return 4 * d * d + 2 * d * ff; }

void check_parameters(int64_t estimate, const std::string& source) {
  if (estimate > kMaxModelParameters)
    throw Error(source + ": the config describes a model of about " + std::to_string(estimate) +
                " parameters, more than the " + std::to_string(kMaxModelParameters) +
                " a qkv model can have; the file is damaged");
}

// `heads` already divides `d_model`.
void check_positional(const std::string& p, int64_t d_model, int64_t heads,
                      const std::string& source) {
  const auto& names = nn::positional_encoding_names();
  if (std::find(names.begin(), names.end(), p) == names.end()) {
    std::string list;
    for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
    throw Error(source + ": \"positional\" must be one of " + list + ", got \"" + p + "\"");
  }
  // RoPE rotates pairs of features in each head, so the constructor needs an even head size.
  if (p == "rope" && (d_model / heads) % 2 != 0)
    throw Error(source + ": \"positional\" rope needs an even head size, but d_model " +
                std::to_string(d_model) + " / num_heads " + std::to_string(heads) + " = " +
                std::to_string(d_model / heads));
}

}  // namespace

void validate_model_config(const models::Seq2SeqConfig& c, const std::string& source) {
  in_range(c.src_vocab, 4, 1 << 24, "src_vocab", source);  // the 4 special tokens at least
  in_range(c.tgt_vocab, 4, 1 << 24, "tgt_vocab", source);
  check_transformer(c.d_model, c.num_heads, c.dim_feedforward, c.num_encoder_layers, c.dropout,
                    source);
  in_range(c.num_decoder_layers, 1, 256, "num_decoder_layers", source);
  in_range(c.max_len, 1, 1 << 20, "max_len", source);
  in_range(c.pad_id, 0, std::min(c.src_vocab, c.tgt_vocab) - 1, "pad_id", source);
  check_positional(c.positional, c.d_model, c.num_heads, source);
  check_parameters(estimated_parameters(c), source);
}

void validate_model_config(const models::TransformerClassifierConfig& c,
                           const std::string& source) {
  in_range(c.vocab, 4, 1 << 24, "vocab", source);
  in_range(c.num_classes, 1, 1 << 24, "num_classes", source);
  check_transformer(c.d_model, c.num_heads, c.dim_feedforward, c.num_layers, c.dropout, source);
  in_range(c.max_len, 1, 1 << 20, "max_len", source);
  check_positional(c.positional, c.d_model, c.num_heads, source);
  check_one_of(c.pooling, {"cls", "mean"}, "pooling", source);
  check_parameters(estimated_parameters(c), source);
}

void validate_model_config(const models::CnnClassifierConfig& c, const std::string& source) {
  in_range(c.in_channels, 1, 1 << 10, "in_channels", source);
  in_range(c.image_size, 1, 1 << 14, "image_size", source);
  in_range(c.num_classes, 1, 1 << 24, "num_classes", source);
  in_range(int64_t(c.channels.size()), 1, 64, "channels (number of blocks)", source);
  in_range(c.reduction, 1, 1 << 14, "reduction", source);
  check_one_of(c.attention, {"none", "se", "cbam"}, "attention", source);
  for (int64_t width : c.channels) in_range(width, 1, 1 << 14, "channels", source);
  check_parameters(estimated_parameters(c), source);
}

void validate_model_config(const models::VisionTransformerConfig& c, const std::string& source) {
  in_range(c.in_channels, 1, 1 << 10, "in_channels", source);
  in_range(c.image_size, 1, 1 << 14, "image_size", source);
  in_range(c.patch_size, 1, c.image_size, "patch_size", source);
  if (c.image_size % c.patch_size != 0)
    throw Error(source + ": \"patch_size\" " + std::to_string(c.patch_size) +
                " does not divide image_size " + std::to_string(c.image_size));
  in_range(c.num_classes, 1, 1 << 24, "num_classes", source);
  check_transformer(c.d_model, c.num_heads, c.dim_feedforward, c.num_layers, c.dropout, source);
  check_parameters(estimated_parameters(c), source);
}

// Every bound validate_model_config checks first keeps these sums far from int64 overflow (at
// most about 2^46).
int64_t estimated_parameters(const models::Seq2SeqConfig& c) {
  return (c.src_vocab + 2 * c.tgt_vocab + c.max_len) * c.d_model +
         (c.num_encoder_layers + 2 * c.num_decoder_layers) *
             layer_parameters(c.d_model, c.dim_feedforward);
}

int64_t estimated_parameters(const models::TransformerClassifierConfig& c) {
  return (c.vocab + c.max_len + c.num_classes) * c.d_model +
         c.num_layers * layer_parameters(c.d_model, c.dim_feedforward);
}

int64_t estimated_parameters(const models::CnnClassifierConfig& c) {
  int64_t in = c.in_channels, estimate = 0;
  for (int64_t width : c.channels) {
    estimate += 9 * in * width + 9 * width * width + in * width;  // two 3x3 convs and a shortcut
    in = width;
  }
  return estimate + in * c.num_classes;
}

int64_t estimated_parameters(const models::VisionTransformerConfig& c) {
  const int64_t patches = (c.image_size / c.patch_size) * (c.image_size / c.patch_size);
  return (c.in_channels * c.patch_size * c.patch_size + patches + 1 + c.num_classes) * c.d_model +
         c.num_layers * layer_parameters(c.d_model, c.dim_feedforward);
}

void check_model_fits_weights(int64_t estimated, const nn::TensorMap& weights,
                              const std::string& model_json, const std::string& weights_file) {
  int64_t stored = 0;
  for (const auto& [name, tensor] : weights) stored += tensor.numel();
  // The estimate counts every table (tied or sinusoidal ones too), so it may exceed the true count
  // by a small factor; a model four times larger than its weights, plus slack for tiny models, is
  // not a miscount but a model.json that does not belong to this file.
  if (estimated > 4 * stored + (int64_t(1) << 20))
    throw Error(model_json + ": describes a model of about " + std::to_string(estimated) +
                " parameters, but " + weights_file + " holds " + std::to_string(stored) +
                ": the two files do not belong together (was model.json edited or copied from "
                "another run?)");
}

json read_model_json_config(const std::string& path) {
  json j = parse_object(read_file(path, "--run"), path);
  if (!j.contains("config") || !j["config"].is_object())
    throw Error(path + ": \"config\" must be an object");
  return j["config"];
}

std::string model_config_differences(const json& in_file, const json& built) {
  std::string differences;
  auto value = [](const json& config, const std::string& key) {
    return config.contains(key) ? config[key].dump() : std::string("nothing");
  };
  json keys = built;
  keys.update(in_file);  // the union of both files' keys
  for (const auto& [key, unused] : keys.items()) {
    // Fields no option sets: config.json cannot say them, so model.json does (a model written
    // from PyTorch by python/qkv_torch.py's save_run may be pre-norm or tied). Changing one also
    // changes the parameters, which the weights' own check refuses.
    if (key == "checkpoint_activations" || key == "norm_first" || key == "tie_embeddings") continue;
    if (in_file.contains(key) && built.contains(key) && in_file[key] == built[key]) continue;
    differences += (differences.empty() ? "" : ", ") + key + " " + value(in_file, key) +
                   " (config.json gives " + value(built, key) + ")";
  }
  return differences;
}

void check_vocab_tokenizer(const Vocab& vocab, TokenizerKind expected, const std::string& file) {
  if (vocab.kind() != expected)
    throw Error("--run: " + file + ": tokenizer \"" + to_string(vocab.kind()) + "\" is not the \"" +
                to_string(expected) +
                "\" the run's config.json trains with (was the file edited?)");
}

std::string parse_model_architecture(std::string_view text, const std::string& source) {
  json j = parse_object(text, source);
  if (!j.contains("architecture") || !j["architecture"].is_string())
    throw Error(source + ": \"architecture\" must be a string");
  return j["architecture"].get<std::string>();
}

TranslatorModelJson parse_translator_model_json(std::string_view text, const std::string& source) {
  json j = parse_object(text, source);
  if (!j.contains("architecture") || j["architecture"] != "Seq2SeqTransformer")
    throw Error(source + ": \"architecture\" must be \"Seq2SeqTransformer\" for a translation run");
  TranslatorModelJson m;
  m.config = read_config<models::Seq2SeqConfig>(j, source);
  validate_model_config(m.config, source + ": config");
  if (j.contains("decode_max_len")) {
    const json& v = j["decode_max_len"];
    if (!v.is_number_integer() || (v.is_number_unsigned() && v.get<uint64_t>() > (1u << 20)))
      throw Error(source + ": \"decode_max_len\" must be an integer in 1.." +
                  std::to_string(1 << 20));
    m.decode_max_len = j["decode_max_len"].get<int64_t>();
    in_range(m.decode_max_len, 1, 1 << 20, "decode_max_len", source);
  }
  return m;
}

ClassifierModelJson parse_classifier_model_json(std::string_view text, const std::string& source) {
  json j = parse_object(text, source);
  ClassifierModelJson m;
  m.architecture = parse_model_architecture(text, source);
  if (!j.contains("labels") || !j["labels"].is_array())
    throw Error(source + ": \"labels\" must be an array of strings");
  for (const json& label : j["labels"]) {
    if (!label.is_string()) throw Error(source + ": \"labels\" must be an array of strings");
    m.labels.push_back(label.get<std::string>());
  }
  const std::string where = source + ": config";
  int64_t classes = 0;
  if (m.architecture == "TransformerClassifier") {
    m.text = read_config<models::TransformerClassifierConfig>(j, source);
    validate_model_config(*m.text, where);
    classes = m.text->num_classes;
  } else if (m.architecture == "CnnClassifier") {
    m.cnn = read_config<models::CnnClassifierConfig>(j, source);
    validate_model_config(*m.cnn, where);
    classes = m.cnn->num_classes;
  } else if (m.architecture == "VisionTransformer") {
    m.vit = read_config<models::VisionTransformerConfig>(j, source);
    validate_model_config(*m.vit, where);
    classes = m.vit->num_classes;
  } else {
    throw Error(source + ": '" + m.architecture + "' is not a classifier");
  }
  // Predictions index the label names, so a shorter list would be read past its end.
  if (int64_t(m.labels.size()) != classes)
    throw Error(source + ": " + std::to_string(m.labels.size()) + " labels for " +
                std::to_string(classes) + " classes");
  return m;
}

}  // namespace qkv::train
