#include "train/batching.h"

#include <algorithm>
#include <numeric>
#include <random>

#include "engine/error.h"
#include "engine/ops.h"

namespace qkv::train {

std::vector<Example> encode_pairs(const std::vector<Pair>& pairs, const Vocab& src_vocab,
                                  const Vocab& tgt_vocab) {
  std::vector<Example> out;
  out.reserve(pairs.size());
  for (const auto& p : pairs)
    out.push_back({src_vocab.encode(p.source), tgt_vocab.encode(p.target)});
  return out;
}

namespace {

// A [rows, width] int64 tensor of `rows` sequences padded with PAD, and its pad mask.
void pad_rows(const std::vector<std::vector<int64_t>>& rows, Tensor& ids, Tensor& mask,
              int64_t& real_tokens) {
  size_t width = 1;  // at least one column, so an empty sequence still makes a valid tensor
  for (const auto& r : rows) width = std::max(width, r.size());
  std::vector<int64_t> flat(rows.size() * width, Vocab::PAD);
  std::vector<double> pad(rows.size() * width, 1.0);
  real_tokens = 0;
  for (size_t i = 0; i < rows.size(); ++i)
    for (size_t j = 0; j < rows[i].size(); ++j) {
      flat[i * width + j] = rows[i][j];
      pad[i * width + j] = 0.0;
      ++real_tokens;
    }
  Shape shape{int64_t(rows.size()), int64_t(width)};
  ids = tensor_i64(flat, shape);
  mask = tensor(pad, shape, {.dtype = DType::b8});
}

std::vector<int64_t> truncated(const std::vector<int64_t>& ids, int64_t max_len) {
  if (max_len <= 0 || int64_t(ids.size()) <= max_len) return ids;
  return {ids.begin(), ids.begin() + max_len};
}

}  // namespace

Batch make_batch(const std::vector<Example>& examples, const std::vector<size_t>& indices,
                 int64_t max_len) {
  QKV_CHECK(!indices.empty(), "make_batch", "a batch needs at least one example");
  Batch b;
  b.indices = indices;
  std::vector<std::vector<int64_t>> src, tgt_in, tgt_out;
  std::vector<int64_t> labels;
  bool classification = examples[indices[0]].label >= 0;
  for (size_t i : indices) {
    QKV_CHECK(i < examples.size(), "make_batch", "index ", i, " out of range for ", examples.size(),
              " examples");
    const Example& e = examples[i];
    src.push_back(truncated(e.src, max_len));
    if (classification) {
      labels.push_back(e.label);
      continue;
    }
    // Leave room for the one extra token (BOS in front, EOS behind) within max_len.
    std::vector<int64_t> t = truncated(e.tgt, max_len > 0 ? max_len - 1 : 0);
    tgt_in.push_back({Vocab::BOS});
    tgt_in.back().insert(tgt_in.back().end(), t.begin(), t.end());
    tgt_out.push_back(t);
    tgt_out.back().push_back(Vocab::EOS);
  }
  pad_rows(src, b.src, b.src_pad_mask, b.source_tokens);
  if (classification) {
    b.labels = tensor_i64(labels, {int64_t(labels.size())});
    b.target_tokens = int64_t(labels.size());
  } else {
    Tensor unused_mask;
    int64_t unused_count = 0;
    pad_rows(tgt_in, b.tgt_in, unused_mask, unused_count);
    pad_rows(tgt_out, b.tgt_out, b.tgt_pad_mask, b.target_tokens);
  }
  return b;
}

std::vector<std::vector<size_t>> plan_batches(const std::vector<Example>& examples,
                                              const BatchingOptions& options, uint64_t seed,
                                              uint64_t epoch) {
  QKV_CHECK(options.batch_size > 0, "--batch-size", "must be positive, got ", options.batch_size);
  // One generator per (seed, epoch): the golden-ratio constant spreads consecutive epochs apart.
  std::mt19937_64 rng(seed ^ (0x9E3779B97F4A7C15ull * (epoch + 1)));
  std::vector<size_t> order(examples.size());
  std::iota(order.begin(), order.end(), size_t(0));
  if (options.shuffle) std::shuffle(order.begin(), order.end(), rng);

  const size_t bs = size_t(options.batch_size);
  if (options.bucket_by_length) {
    auto length = [&](size_t i) { return examples[i].src.size() + examples[i].tgt.size(); };
    size_t window = bs * size_t(std::max<int64_t>(1, options.bucket_window));
    for (size_t start = 0; start < order.size(); start += window) {
      auto end = order.begin() + std::min(order.size(), start + window);
      std::stable_sort(order.begin() + start, end,
                       [&](size_t a, size_t b) { return length(a) < length(b); });
    }
  }
  std::vector<std::vector<size_t>> batches;
  for (size_t start = 0; start < order.size(); start += bs) {
    size_t end = std::min(order.size(), start + bs);
    if (options.drop_last && end - start < bs) break;
    batches.emplace_back(order.begin() + start, order.begin() + end);
  }
  // Sorted windows would otherwise feed short batches first, long ones last.
  if (options.bucket_by_length && options.shuffle)
    std::shuffle(batches.begin(), batches.end(), rng);
  return batches;
}

}  // namespace qkv::train
