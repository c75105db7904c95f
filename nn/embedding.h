// Embedding(num_embeddings, embedding_dim, padding_idx): rows of a learned table by int64 id.
#pragma once

#include "nn/module.h"

namespace qkv::nn {

class Embedding : public Layer {
 public:
  // padding_idx < 0 means none. The padding row starts at zero and gets no gradient, so a padded
  // position always embeds to zero (PyTorch's behaviour).
  Embedding(int64_t num_embeddings, int64_t embedding_dim, int64_t padding_idx = -1);
  Tensor forward(const Tensor& ids) override;
  std::string describe() const override;

  int64_t num_embeddings, embedding_dim, padding_idx;
  Tensor weight;  // [num, dim], N(0, 1) like PyTorch
};

}  // namespace qkv::nn
