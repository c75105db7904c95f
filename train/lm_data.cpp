#include "train/lm_data.h"

#include <algorithm>
#include <filesystem>

#include "engine/error.h"
#include "engine/ops.h"
#include "train/atomic_file.h"
#include "train/utf8_offset.h"

namespace qkv::train {

LmText read_lm_text(const std::string& path, double valid_fraction) {
  if (!(valid_fraction > 0 && valid_fraction < 1))
    throw Error("--valid-fraction: must be in (0, 1), got " + std::to_string(valid_fraction));
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) {
    // The corpus the Makefile writes names the package it comes from.
    const bool fortunes = std::filesystem::path(path).filename() == "fortunes.txt";
    throw Error(path + ": no such file (the language model's --data)" +
                (fortunes ? std::string("; it is made from Debian's fortunes package by: make deps "
                                        "DATA=fortunes (or make fortunes once it is installed)")
                          : ""));
  }
  std::string text = read_file(path, "--data");
  if (text.empty()) throw Error(path + ": the file is empty");
  size_t bad = first_invalid_utf8(text);
  if (bad != std::string::npos)
    throw Error(path + ": invalid UTF-8 at byte " + std::to_string(bad));
  // The cut moves back to the start of a character, so both parts are valid UTF-8.
  size_t cut = size_t(double(text.size()) * (1.0 - valid_fraction));
  while (cut > 0 && (static_cast<unsigned char>(text[cut]) & 0xC0) == 0x80) --cut;
  if (cut == 0 || cut == text.size())
    throw Error(path + ": " + std::to_string(text.size()) +
                " bytes are too few to split off a validation part of " +
                std::to_string(valid_fraction));
  LmText out;
  out.path = path;
  out.valid = text.substr(cut);
  text.resize(cut);
  out.train = std::move(text);
  return out;
}

TokenWindows::TokenWindows(std::vector<int64_t> ids, int64_t context, const std::string& what)
    : ids_(std::move(ids)), context_(context) {
  QKV_CHECK(context > 0, "--context", "must be positive, got ", context);
  if (int64_t(ids_.size()) < context + 1)
    throw Error(what + " has " + std::to_string(ids_.size()) +
                " tokens, fewer than one window of --context + 1 = " + std::to_string(context + 1));
}

Tensor TokenWindows::random_batch(int64_t batch, Generator& gen) const {
  const int64_t starts = size() - context_;  // start + context is the last token used
  std::vector<int64_t> out(size_t(batch * (context_ + 1)));
  for (int64_t r = 0; r < batch; ++r) {
    double u = philox::uniform(gen.seed(), gen.take(1));
    int64_t s = std::min(starts - 1, int64_t(u * double(starts)));
    std::copy_n(ids_.begin() + s, context_ + 1, out.begin() + r * (context_ + 1));
  }
  return tensor_i64(out, {batch, context_ + 1});
}

Tensor TokenWindows::sequential_windows(int64_t max_windows) const {
  const int64_t n = std::min(max_windows, (size() - 1) / context_);
  std::vector<int64_t> out(size_t(n * (context_ + 1)));
  for (int64_t r = 0; r < n; ++r)
    std::copy_n(ids_.begin() + r * context_, context_ + 1, out.begin() + r * (context_ + 1));
  return tensor_i64(out, {n, context_ + 1});
}

}  // namespace qkv::train
