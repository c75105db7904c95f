#include "nn/pooling.h"

#include "engine/error.h"
#include "nn/conv.h"

namespace qkv::nn {

Tensor adaptive_avg_pool2d(const Tensor& x, int64_t oh, int64_t ow) {
  QKV_CHECK(x.dim() == 4 && oh > 0 && ow > 0, "adaptive_avg_pool2d",
            "expected [B, C, H, W] and a positive output size, got ", shape_str(x.shape()));
  const int64_t H = x.size(2), W = x.size(3);
  if (oh == 1 && ow == 1) return mean(x, {2, 3}, true);
  std::vector<Tensor> rows;
  for (int64_t i = 0; i < oh; ++i) {
    int64_t h0 = i * H / oh, h1 = ((i + 1) * H + oh - 1) / oh;
    std::vector<Tensor> cells;
    for (int64_t j = 0; j < ow; ++j) {
      int64_t w0 = j * W / ow, w1 = ((j + 1) * W + ow - 1) / ow;
      cells.push_back(mean(x.narrow(2, h0, h1 - h0).narrow(3, w0, w1 - w0), {2, 3}));
    }
    rows.push_back(stack(cells, 2));  // [B, C, ow]
  }
  return stack(rows, 2);  // [B, C, oh, ow]
}

}  // namespace qkv::nn
