// Gradcheck cases for the models, at toy sizes in float64. Token models take integer ids, so their
// cases check the gradient of an embedding table (swapped for the case's input) through the whole
// model; image models are checked with respect to the images.
#include "models/gradcheck_cases.h"

#include "models/classifier_names.h"
#include "models/classifiers.h"
#include "models/gpt_gradcheck_case.h"
#include "models/seq2seq.h"
#include "nn/gradcheck_cases.h"

namespace qkv::models {

namespace {

using X = const std::vector<Tensor>&;
using nn::in_f64;

}  // namespace

void register_gradcheck_cases(OpRegistry& r) {
  const LayerCases add_case{r, "models", "models."};
  const Domain index = Domain::index;

  for (const std::string& pooling : pooling_names()) {
    auto classifier = in_f64(std::make_shared<TransformerClassifier>(
        TransformerClassifierConfig{.vocab = 5,
                                    .num_classes = 3,
                                    .d_model = 4,
                                    .num_heads = 2,
                                    .num_layers = 1,
                                    .dim_feedforward = 6,
                                    .dropout = 0,
                                    .max_len = 8,
                                    .positional = "sinusoidal",
                                    .norm_first = false,
                                    .pooling = pooling}));
    add_case("TransformerClassifier." + pooling, {{{5, 4}}, {{2, 3}, index, 5}}, [classifier](X x) {
      classifier->embed->weight = x[0];
      Tensor pad = tensor({0, 0, 1, 0, 0, 0}, {2, 3}).to(DType::b8);
      return classifier->forward(x[1], pad);
    });
  }

  auto seq2seq = in_f64(std::make_shared<Seq2SeqTransformer>(Seq2SeqConfig{
      .src_vocab = 5,
      .tgt_vocab = 6,
      .d_model = 4,
      .num_heads = 2,
      .num_encoder_layers = 1,
      .num_decoder_layers = 1,
      .dim_feedforward = 6,
      .dropout = 0,
      .max_len = 8,
  }));
  add_case("Seq2SeqTransformer", {{{5, 4}}, {{2, 3}, index, 5}, {{2, 2}, index, 6}},
           [seq2seq](X x) {
             seq2seq->src_embed->weight = x[0];
             Tensor src_pad = tensor({0, 0, 1, 0, 0, 0}, {2, 3}).to(DType::b8);
             return seq2seq->forward(x[1], x[2], src_pad, Tensor());
           });

  for (std::string attention : {"none", "se"}) {
    auto cnn = in_f64(std::make_shared<CnnClassifier>(CnnClassifierConfig{.in_channels = 1,
                                                                          .image_size = 4,
                                                                          .num_classes = 3,
                                                                          .channels = {2, 4},
                                                                          .attention = attention,
                                                                          .reduction = 2}));
    add_case("CnnClassifier." + attention, {{{2, 1, 4, 4}}},
             [cnn](X x) { return cnn->forward(x[0]); });
  }

  auto vit =
      in_f64(std::make_shared<VisionTransformer>(VisionTransformerConfig{.in_channels = 1,
                                                                         .image_size = 4,
                                                                         .patch_size = 2,
                                                                         .num_classes = 3,
                                                                         .d_model = 4,
                                                                         .num_heads = 2,
                                                                         .num_layers = 1,
                                                                         .dim_feedforward = 6,
                                                                         .dropout = 0}));
  add_case("VisionTransformer", {{{2, 1, 4, 4}}}, [vit](X x) { return vit->forward(x[0]); });
  register_gpt_gradcheck_cases(r);
}

}  // namespace qkv::models
