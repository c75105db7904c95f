// Choosing the next token from a language model's logits, and generating text with it.
//
// The filters apply in the order of Hugging Face's and nanoGPT's samplers: the logits are divided
// by the temperature, then only the top_k largest are kept (exactly k; equal logits are ranked by
// lower id first), then top-p (nucleus) keeps the smallest set of the most likely tokens whose
// probability sums to at least top_p, renormalized. Temperature 0 is greedy: the largest logit
// (lowest id among equals), drawing no random number.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/random.h"
#include "models/gpt.h"

namespace qkv::train {

struct SamplingOptions {
  double temperature = 1.0;  // >= 0; 0 is greedy
  int64_t top_k = 0;         // 0: no top-k filter
  double top_p = 1.0;        // in (0, 1]; 1: no nucleus filter
};

// Throws qkv::Error naming --temperature, --top-k or --top-p for a value out of range.
void check_sampling_options(const SamplingOptions& options);

// The distribution sample_token draws from: probabilities over the vocabulary, zero for filtered
// tokens, summing to 1 (one-hot at temperature 0).
std::vector<double> next_token_probabilities(const std::vector<double>& logits,
                                             const SamplingOptions& options);

// One draw from next_token_probabilities, taking one counter of `gen` (none at temperature 0).
int64_t sample_token(const std::vector<double>& logits, const SamplingOptions& options,
                     Generator& gen);

// `prompt` (at least one id) followed by `tokens` generated ones, sampled one at a time under
// NoGrad in eval mode. With use_cache every step runs the model on its one new token through the
// KV cache; without it every step recomputes the whole prefix. Both give the same tokens. Once the
// sequence is longer than the model's context, each step recomputes the last `context` tokens
// (the model has no positions beyond them), with or without the cache.
std::vector<int64_t> generate(models::GPT& model, const std::vector<int64_t>& prompt,
                              int64_t tokens, const SamplingOptions& options, Generator& gen,
                              bool use_cache = true);

}  // namespace qkv::train
