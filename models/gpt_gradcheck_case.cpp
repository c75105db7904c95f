// The cases swap the token table (input embedding and, tied, the output projection) and the
// learned position table for the case's inputs, so their gradients are checked along with the
// path through every block; the token ids are an index input.
#include "models/gpt_gradcheck_case.h"

#include "models/gpt.h"

namespace qkv::models {

void register_gpt_gradcheck_cases(OpRegistry& r) {
  using X = const std::vector<Tensor>&;
  for (const std::string positions : {"learned", "rope"}) {
    GPTConfig c{.vocab = 7,
                .context = 5,
                .d_model = 8,
                .num_heads = 2,
                .num_layers = 2,
                .dim_feedforward = 12,
                .dropout = 0,
                .positions = positions,
                .tie_embeddings = true};
    auto gpt = std::make_shared<GPT>(c);
    gpt->to(DType::f64);
    std::vector<InputSpec> inputs = {{{2, 4}, Domain::index, 7}, {{7, 8}}};
    if (positions == "learned") inputs.push_back({{5, 8}});
    r.add({"models.GPT." + positions, "models", inputs, [gpt](X x) {
             gpt->token_embedding->weight = x[1];
             if (gpt->position_embedding) gpt->position_embedding->weight = x[2];
             return gpt->forward(x[0]);
           }});
  }
}

}  // namespace qkv::models
