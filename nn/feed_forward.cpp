#include "nn/feed_forward.h"

#include <typeinfo>

namespace qkv::nn {

FeedForward::FeedForward(int64_t d_model, int64_t dim_ff, double p, const std::string& act) {
  linear1 = register_module("linear1", std::make_shared<Linear>(d_model, dim_ff));
  activation = register_module("activation", make_activation(act));
  dropout = register_module("dropout", std::make_shared<Dropout>(p));
  linear2 = register_module("linear2", std::make_shared<Linear>(dim_ff, d_model));
}

Tensor FeedForward::forward(const Tensor& x) {
  // A ReLU goes into linear1's product (one pass over the hidden activations fewer); any other
  // activation module, or one that replaced it, runs as a module of its own.
  const Layer& act = *activation;
  const bool relu_follows = typeid(act) == typeid(ReLU);
  Tensor hidden =
      relu_follows ? linear1->forward_relu(x) : activation->forward(linear1->forward(x));
  return linear2->forward(dropout->forward(hidden));
}

}  // namespace qkv::nn
