// A tiny translation task and training loop for comparing devices: the copy task (target =
// source) over a 12-token vocabulary, batches with varying lengths so padding appears in every
// attention mask, and a training loop that returns the loss of each step.
#pragma once

#include <algorithm>
#include <vector>

#include "engine/ops.h"
#include "models/seq2seq.h"
#include "nn/optim.h"

namespace qkv::test {

struct TranslationBatch {
  Tensor src, tgt_in, tgt_out;  // int64 [B, L], [B, L + 1], [B, L + 1]
};

constexpr int64_t kTinyVocab = 12, kTinyPad = 0, kTinyBos = 1, kTinyEos = 2;

inline models::Seq2SeqConfig tiny_translation_config() {
  return {.src_vocab = kTinyVocab,
          .tgt_vocab = kTinyVocab,
          .d_model = 32,
          .num_heads = 4,
          .num_encoder_layers = 1,
          .num_decoder_layers = 1,
          .dim_feedforward = 64,
          .dropout = 0.0,  // deterministic: no random draws during training
          .max_len = 32,
          .pad_id = kTinyPad};
}

// `count` batches of `batch` sequences of 3..max_len tokens from [3, vocab), reproducible per
// seed; tgt_in = bos + source, tgt_out = source + eos, both padded.
inline std::vector<TranslationBatch> copy_task_batches(int count, int64_t batch, int64_t max_len,
                                                       uint64_t seed) {
  Generator gen(seed);
  std::vector<TranslationBatch> out;
  for (int n = 0; n < count; ++n) {
    const std::vector<double> lengths =
        uniform({batch}, 3, double(max_len + 1), {DType::f64}, &gen).to_vector<double>();
    const std::vector<double> tokens =
        uniform({batch * max_len}, 3, double(kTinyVocab), {DType::f64}, &gen).to_vector<double>();
    std::vector<int64_t> src(size_t(batch * max_len), kTinyPad),
        tgt_in(size_t(batch * (max_len + 1)), kTinyPad), tgt_out(tgt_in.size(), kTinyPad);
    for (int64_t b = 0; b < batch; ++b) {
      const int64_t len = std::min<int64_t>(max_len, int64_t(lengths[size_t(b)]));
      tgt_in[size_t(b * (max_len + 1))] = kTinyBos;
      for (int64_t t = 0; t < len; ++t) {
        const int64_t token = int64_t(tokens[size_t(b * max_len + t)]);
        src[size_t(b * max_len + t)] = token;
        tgt_in[size_t(b * (max_len + 1) + t + 1)] = token;
        tgt_out[size_t(b * (max_len + 1) + t)] = token;
      }
      tgt_out[size_t(b * (max_len + 1) + len)] = kTinyEos;
    }
    out.push_back({tensor_i64(src, {batch, max_len}), tensor_i64(tgt_in, {batch, max_len + 1}),
                   tensor_i64(tgt_out, {batch, max_len + 1})});
  }
  return out;
}

// One optimizer step per batch on `device` (where the model and the optimizer's parameters
// already are); returns each step's loss.
inline std::vector<double> train_steps(models::Seq2SeqTransformer& model,
                                       const std::vector<TranslationBatch>& batches, Device device,
                                       nn::Optimizer& opt) {
  model.train();
  std::vector<double> losses;
  for (const TranslationBatch& b : batches) {
    const Tensor src = b.src.to(device), tgt_in = b.tgt_in.to(device),
                 tgt_out = b.tgt_out.to(device);
    opt.zero_grad();
    const Tensor logits =
        model.forward(src, tgt_in, eq(src, double(kTinyPad)), eq(tgt_in, double(kTinyPad)));
    const Tensor loss =
        cross_entropy(reshape(logits, {-1, kTinyVocab}), reshape(tgt_out, {-1}), kTinyPad);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  return losses;
}

}  // namespace qkv::test
