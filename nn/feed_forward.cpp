#include "nn/feed_forward.h"

namespace qkv::nn {

FeedForward::FeedForward(int64_t d_model, int64_t dim_ff, double p, const std::string& act) {
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, dim_ff));
  activation = register_module("activation", make_activation(act));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
  linear2 = register_module("linear2", std::make_shared<Linear>(dim_ff, d_model));
}

Tensor FeedForward::forward(const Tensor& x) {
  return linear2->forward(dropout->forward(activation->forward(linear1->forward(x))));
}

}  // namespace qkv::nn
