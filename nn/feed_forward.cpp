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
  // A ReLU goes into linear1's product, a GELU into the dropout's pass (one pass over the hidden
  // activations fewer either way); any other activation or dropout module, or one that replaced
  // them, runs as a module of its own.
  const Layer& act = *activation;
  const Layer& drop = *dropout;
  if (typeid(act) == typeid(ReLU))
    return linear2->forward(dropout->forward(linear1->forward_relu(x)));
  if (typeid(act) == typeid(GELU) && typeid(drop) == typeid(Dropout)) {
    const auto& gelu_module = static_cast<const GELU&>(act);
    return linear2->forward(gelu_dropout(linear1->forward(x), dropout->p, dropout->is_training(),
                                         nullptr, gelu_module.approximate));
  }
  return linear2->forward(dropout->forward(activation->forward(linear1->forward(x))));
}

}  // namespace qkv::nn
