// Embedding(num_embeddings, embedding_dim, padding_idx): rows of a learned table by int64 id.
#pragma once

#include <optional>

#include "nn/module.h"

namespace qkv::nn {

class Embedding : public Layer {
 public:
  // padding_idx as torch.nn.Embedding's: in [-num_embeddings, num_embeddings), a negative one
  // counting from the end; none when unset. The padding row starts at zero and never gets a
  // gradient (so training leaves it as it is); the forward returns the row as stored, whatever a
  // checkpoint put there.
  Embedding(int64_t num_embeddings, int64_t embedding_dim,
            std::optional<int64_t> padding_idx = std::nullopt);
  Tensor forward(const Tensor& ids) override;
  std::string describe() const override;

  int64_t num_embeddings, embedding_dim;
  std::optional<int64_t> padding_idx;  // in [0, num_embeddings) once constructed
  Tensor weight;                       // [num, dim], N(0, 1) like PyTorch
};

}  // namespace qkv::nn
