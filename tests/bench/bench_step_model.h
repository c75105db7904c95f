// The toy translation transformer that the step benchmarks time (bench_step; bench_dp under
// mpirun; tests/bench/torch_step.py builds its PyTorch twin): d_model 128, 4 heads, 2+2 layers,
// feed-forward 256, a batch of 64 pairs of 20 tokens over a vocabulary of 40, token 0 padding.
// One definition, so that the benchmarks' figures stay comparable.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/ops.h"
#include "engine/random.h"
#include "models/seq2seq.h"

namespace qkv::bench {

inline constexpr int64_t kStepBatch = 64, kStepLength = 20, kStepVocab = 40, kStepPad = 0;

inline models::Seq2SeqConfig step_model_config(double dropout) {
  return {.src_vocab = kStepVocab,
          .tgt_vocab = kStepVocab,
          .d_model = 128,
          .num_heads = 4,
          .num_encoder_layers = 2,
          .num_decoder_layers = 2,
          .dim_feedforward = 256,
          .dropout = dropout,
          .pad_id = kStepPad};
}

// The batch the benchmarks train on, all of it (every rank builds the whole and takes its rows):
// random tokens in [1, vocab) from generator 1, source [batch, length] with its last 3 positions
// padding (as in torch_step.py), target [batch, length + 1].
struct StepBatch {
  Tensor source, target;
};

inline StepBatch step_batch() {
  const int64_t batch = kStepBatch, len = kStepLength;
  Generator gen(1);
  auto tokens = [&](int64_t n) {
    std::vector<int64_t> ids;
    for (double v : uniform({n}, 1, double(kStepVocab), {DType::f64}, &gen).to_vector<double>())
      ids.push_back(int64_t(v));
    return ids;
  };
  std::vector<int64_t> s = tokens(batch * len);
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = len - 3; t < len; ++t) s[size_t(b * len + t)] = kStepPad;
  Tensor source = tensor_i64(s, {batch, len});
  return {source, tensor_i64(tokens(batch * (len + 1)), {batch, len + 1})};
}

}  // namespace qkv::bench
