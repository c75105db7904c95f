#include "nn/param_groups.h"

#include <set>

#include "nn/embedding.h"
#include "nn/positional.h"

namespace qkv::nn {

namespace {

void collect_tables(const Module& m, std::set<TensorImpl*>& tables) {
  if (auto* e = dynamic_cast<const Embedding*>(&m)) tables.insert(e->weight.impl());
  if (auto* l = dynamic_cast<const LearnedPositionalEncoding*>(&m)) tables.insert(l->weight.impl());
  if (auto* r = dynamic_cast<const RelativePositionBias*>(&m)) tables.insert(r->weight.impl());
  for (const auto& [name, child] : m.named_children()) collect_tables(*child, tables);
}

}  // namespace

std::vector<ParamGroup> weight_decay_groups(const Module& model, double weight_decay) {
  std::set<TensorImpl*> tables;
  collect_tables(model, tables);
  std::vector<ParamGroup> groups(2);
  groups[0].weight_decay = weight_decay;
  groups[1].weight_decay = 0.0;
  for (const Tensor& p : model.parameters()) {
    const bool decays = p.dim() >= 2 && !tables.count(p.impl());
    groups[decays ? 0 : 1].params.push_back(p);
  }
  return groups;
}

}  // namespace qkv::nn
