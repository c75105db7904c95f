// The two parameter groups of AdamW practice (BERT, GPT-2, minGPT): weight decay on the weight
// matrices and convolution kernels, none on biases, normalization weights and embedding tables.
#pragma once

#include "nn/optim.h"

namespace qkv::nn {

// Group 0: every parameter of `model` with two or more dimensions that is not an embedding table,
// weight_decay `weight_decay`. Group 1: the rest, weight_decay 0 - the 1-D parameters (biases,
// LayerNorm and BatchNorm weights) and the tables of Embedding, LearnedPositionalEncoding and
// RelativePositionBias (a table tied to an output projection is still a table). Parameters keep
// the order of model.parameters() within each group; neither group's lr is set.
std::vector<ParamGroup> weight_decay_groups(const Module& model, double weight_decay);

}  // namespace qkv::nn
