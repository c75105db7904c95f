// Batches: id sequences padded into tensors, in an order chosen from a seed.
//
// Sequences in a batch have different lengths; they are padded with PAD to the longest, and a
// boolean mask marks the padding (true = pad, PyTorch's key_padding_mask convention) so attention
// and the loss can ignore it. The decoder is trained with teacher forcing: it reads BOS + target
// and must predict target + EOS, one position ahead.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/tensor.h"
#include "train/tasks/task.h"
#include "train/tokenizer.h"

namespace qkv::train {

// One encoded example: token ids without BOS/EOS. For classification, `label` is set and `tgt`
// is empty.
struct Example {
  std::vector<int64_t> src;
  std::vector<int64_t> tgt;
  int64_t label = -1;
};

std::vector<Example> encode_pairs(const std::vector<Pair>& pairs, const Vocab& src_vocab,
                                  const Vocab& tgt_vocab);

struct Batch {
  Tensor src;                   // int64 [B, S], PAD-padded
  Tensor src_pad_mask;          // bool [B, S], true = pad
  Tensor tgt_in;                // int64 [B, T]: BOS + tgt, PAD-padded (translation only)
  Tensor tgt_out;               // int64 [B, T]: tgt + EOS, PAD-padded (translation only)
  Tensor tgt_pad_mask;          // bool [B, T], true = pad (translation only)
  Tensor labels;                // int64 [B] (classification only)
  std::vector<size_t> indices;  // which examples, in batch order
  int64_t target_tokens = 0;    // non-pad positions of tgt_out (or B for classification)
  int64_t source_tokens = 0;    // non-pad positions of src
};

// The batch of `examples[indices]`. `max_len` > 0 truncates longer sources and targets (the
// target keeps room for EOS) so a stray long line cannot blow up memory. Tensors are on the CPU.
Batch make_batch(const std::vector<Example>& examples, const std::vector<size_t>& indices,
                 int64_t max_len = 0);

struct BatchingOptions {
  int64_t batch_size = 64;
  bool shuffle = true;
  // Groups examples of similar length into the same batch (less padding, less wasted compute),
  // while still shuffling which batches come first. Lengths are compared within windows of
  // `bucket_window` batches so that the order stays random at larger scales.
  bool bucket_by_length = false;
  int64_t bucket_window = 50;
  bool drop_last = false;
};

// The index lists of one epoch's batches. The order depends only on (seed, epoch), so a resumed
// run sees the same data order. The last batch may be smaller unless drop_last.
std::vector<std::vector<size_t>> plan_batches(const std::vector<Example>& examples,
                                              const BatchingOptions& options, uint64_t seed,
                                              uint64_t epoch = 0);

}  // namespace qkv::train
