// The toy translation transformer that the step benchmarks time (bench_step; bench_dp under
// mpirun; tests/bench/torch_step.py builds its PyTorch twin): d_model 128, 4 heads, 2+2 layers,
// feed-forward 256, a batch of 64 pairs of 20 tokens over a vocabulary of 40, token 0 padding.
// One definition, so that the benchmarks' figures stay comparable.
#pragma once

#include <cstdint>

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

}  // namespace qkv::bench
