// Training a GPT language model on one text file, as a library function: the command line (`qkv
// train lm`) is to call this, and tests call it on tiny corpora.
//
// The run folder receives tokenizer.json (train/lm_tokenizer.h), lm_config.json (this config, the
// model's vocab filled in), metrics.jsonl (one line per evaluation) and model.safetensors (the
// final weights). Optimisation is AdamW over nn::weight_decay_groups (no decay on biases, norms or
// embedding tables), the learning rate from nn::LrSchedule, and global gradient-norm clipping.
#pragma once

#include <string>
#include <vector>

#include "models/gpt.h"

namespace qkv::train {

struct LmTrainConfig {
  std::string data;                // a UTF-8 text file
  double valid_fraction = 0.1;     // the last part of the file, contiguous
  std::string tokenizer = "char";  // char | bpe
  int64_t vocab_size = 512;        // bpe only: at most this many ids
  models::GPTConfig model;         // model.vocab is set from the tokenizer
  int64_t batch_size = 12;
  int64_t steps = 2000;
  std::string schedule = "warmup_cosine";  // nn::LrSchedule's kinds
  double lr = 1e-3, min_lr = 1e-4;
  int64_t warmup_steps = 100;
  double beta1 = 0.9, beta2 = 0.99, weight_decay = 0.1;
  double clip = 1.0;          // max global gradient norm; 0: none
  int64_t eval_every = 250;   // and after the last step
  int64_t eval_windows = 64;  // validation windows per evaluation (sequential, see TokenWindows)
  uint64_t seed = 1337;
};

struct LmEvaluation {
  int64_t step = 0;
  double train_loss = 0;         // mean over the steps since the previous evaluation
  double loss = 0;               // validation cross-entropy, nats per token
  double bits_per_unit = 0;      // validation bits per character (char) or per byte (bpe)
  double perplexity = 0;         // exp(loss), per token
  double tokens_per_second = 0;  // training tokens (batch x context) per second of training steps
};

struct LmTrainResult {
  std::string unit;  // "character" | "byte"
  int64_t vocab = 0;
  int64_t train_tokens = 0, valid_tokens = 0;
  std::vector<LmEvaluation> evaluations;  // the first at step 0, before any update
};

// Throws qkv::Error naming the field for a config out of range, or the file for bad data.
LmTrainResult train_lm(const LmTrainConfig& config, const std::string& run_folder);

// The next-token loss of windows [B, context + 1] (on the model's device): inputs are all but the
// last token, targets all but the first.
Tensor window_loss(models::GPT& model, const Tensor& windows, Reduction reduction);

// Validation cross-entropy of `model` on windows [n, context + 1] (on the CPU; each batch is moved
// to the model's device): nats per token and, dividing
// the same total by ln 2 and by `units` (the characters or bytes the targets stand for), bits per
// unit. Runs in eval mode under NoGrad, `batch` windows at a time.
struct LmLoss {
  double nats_per_token = 0, bits_per_unit = 0;
};
LmLoss evaluate_lm(models::GPT& model, const Tensor& windows, const std::vector<int64_t>& units,
                   int64_t batch);

}  // namespace qkv::train
