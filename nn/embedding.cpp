#include "nn/embedding.h"

#include "engine/error.h"
#include "nn/init.h"

namespace qkv::nn {

Embedding::Embedding(int64_t num, int64_t dim, std::optional<int64_t> padding)
    : num_embeddings(num), embedding_dim(dim) {
  QKV_CHECK(num > 0 && dim > 0, "Embedding", "sizes must be positive, got ", num, " x ", dim);
  if (padding) {
    QKV_CHECK(*padding >= -num && *padding < num, "Embedding", "padding_idx ", *padding,
              " out of range for ", num, " embeddings (expected ", -num, " .. ", num - 1, ")");
    padding_idx = *padding < 0 ? *padding + num : *padding;
  }
  weight = register_parameter("weight", Tensor::empty({num, dim}));
  init::normal_(weight);
  if (padding_idx) {
    NoGrad no_grad;
    fill_(weight.narrow(0, *padding_idx, 1), 0);
  }
}

Tensor Embedding::forward(const Tensor& ids) {
  QKV_CHECK(ids.dtype() == DType::i64, "Embedding", "ids must be int64, got ",
            dtype_name(ids.dtype()));
  Tensor out = embedding(weight, ids);
  if (!padding_idx) return out;
  // The same values at padded positions, detached: where() sends their gradient nowhere, so the
  // padding row gets none.
  return where(eq(ids, double(*padding_idx)).unsqueeze(-1), out.detach(), out);
}

std::string Embedding::describe() const {
  return "Embedding(" + std::to_string(num_embeddings) + ", " + std::to_string(embedding_dim) +
         (padding_idx ? ", padding_idx " + std::to_string(*padding_idx) : "") + ")";
}

}  // namespace qkv::nn
