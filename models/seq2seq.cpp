#include "models/seq2seq.h"

#include <algorithm>
#include <cmath>

#include "engine/error.h"
#include "nn/init.h"

namespace qkv::models {

Seq2SeqTransformer::Seq2SeqTransformer(const Seq2SeqConfig& c) : config(c) {
  QKV_CHECK(c.src_vocab > 0 && c.tgt_vocab > 0, "Seq2SeqTransformer", "vocab sizes must be set");
  nn::TransformerLayerOptions o{.d_model = c.d_model,
                                .num_heads = c.num_heads,
                                .dim_feedforward = c.dim_feedforward,
                                .dropout = c.dropout,
                                .activation = "relu",
                                .norm_first = c.norm_first,
                                .positional = c.positional,
                                .checkpoint_activations = c.checkpoint_activations};
  src_embed = register_module("src_embed", std::make_shared<nn::Embedding>(c.src_vocab, c.d_model));
  tgt_embed = register_module("tgt_embed", std::make_shared<nn::Embedding>(c.tgt_vocab, c.d_model));
  // embed() multiplies embeddings by sqrt(d_model); starting them at std d_model^-1/2 makes the
  // product unit-scale like the positional encoding. With PyTorch's N(0, 1) embedding init the
  // scaled embeddings would be sqrt(d_model) times larger and drown the positions
  // (docs/TRAINING.md gives the dates run with either init).
  for (auto* e : {src_embed.get(), tgt_embed.get()})
    nn::init::normal_(e->weight, 0.0, 1.0 / std::sqrt(double(c.d_model)));
  src_pos = nn::make_positional_encoding(c.positional, c.d_model, c.max_len);
  tgt_pos = nn::make_positional_encoding(c.positional, c.d_model, c.max_len);
  if (src_pos) register_module("src_pos", src_pos);
  if (tgt_pos) register_module("tgt_pos", tgt_pos);
  dropout = register_module("dropout", std::make_shared<nn::Dropout>(c.dropout));
  encoder =
      register_module("encoder", std::make_shared<nn::TransformerEncoder>(o, c.num_encoder_layers));
  decoder =
      register_module("decoder", std::make_shared<nn::TransformerDecoder>(o, c.num_decoder_layers));
  generator = register_module("generator", std::make_shared<nn::Linear>(c.d_model, c.tgt_vocab));
  if (c.tie_embeddings) {
    // Both modules hold the same handle; named_parameters lists it once (tgt_embed.weight).
    generator->set_parameter("weight", tgt_embed->weight);
    generator->weight = tgt_embed->weight;
    nn::init::normal_(tgt_embed->weight, 0, std::pow(double(c.d_model), -0.5));
  }
}

namespace {
// Embeddings (initialized at std d_model^-1/2) are scaled by sqrt(d_model) to unit scale, the
// scale of the positional terms.
Tensor embed(nn::Embedding& e, nn::PositionalEncoding* pos, nn::Dropout& drop, const Tensor& ids,
             int64_t d_model, int64_t offset = 0) {
  Tensor x = mul(e.forward(ids), std::sqrt(double(d_model)));
  if (pos) x = pos->forward(x, offset);
  return drop.forward(x);
}
}  // namespace

Tensor Seq2SeqTransformer::encode(const Tensor& src_ids, const Tensor& src_pad_mask) {
  return encoder->forward(embed(*src_embed, src_pos.get(), *dropout, src_ids, config.d_model),
                          src_pad_mask);
}

Tensor Seq2SeqTransformer::decode(const Tensor& tgt_in_ids, const Tensor& memory,
                                  const Tensor& src_pad_mask, const Tensor& tgt_pad_mask) {
  Tensor x = embed(*tgt_embed, tgt_pos.get(), *dropout, tgt_in_ids, config.d_model);
  return generator->forward(decoder->forward(x, memory, tgt_pad_mask, src_pad_mask));
}

Tensor Seq2SeqTransformer::forward(const Tensor& src_ids, const Tensor& tgt_in_ids,
                                   const Tensor& src_pad_mask, const Tensor& tgt_pad_mask) {
  QKV_CHECK(src_ids.dim() == 2 && tgt_in_ids.dim() == 2 && src_ids.size(0) == tgt_in_ids.size(0),
            "Seq2SeqTransformer", "expected src [B, S] and tgt [B, T], got ",
            shape_str(src_ids.shape()), " and ", shape_str(tgt_in_ids.shape()));
  return decode(tgt_in_ids, encode(src_ids, src_pad_mask), src_pad_mask, tgt_pad_mask);
}

Tensor Seq2SeqTransformer::decode_step(const Tensor& ids, int64_t position, const Tensor& memory,
                                       const Tensor& src_pad_mask,
                                       std::vector<nn::TransformerDecoderLayer::Cache>& caches) {
  Tensor x = embed(*tgt_embed, tgt_pos.get(), *dropout, ids, config.d_model, position);
  return generator->forward(decoder->forward_step(x, memory, src_pad_mask, caches));
}

bool Seq2SeqTransformer::can_use_kv_cache() const {
  for (auto& layer : decoder->layers)
    if (layer->self_attn->position) return false;
  return use_kv_cache;
}

Tensor Seq2SeqTransformer::greedy_decode(const Tensor& src_ids, const Tensor& src_pad_mask,
                                         int64_t bos, int64_t eos, int64_t max_len) {
  NoGrad no_grad;
  const int64_t B = src_ids.size(0);
  Tensor memory = encode(src_ids, src_pad_mask);
  std::vector<std::vector<int64_t>> out(size_t(B), std::vector<int64_t>{bos});
  std::vector<bool> done(size_t(B), false);
  const bool cached = can_use_kv_cache();
  std::vector<nn::TransformerDecoderLayer::Cache> caches;
  for (int64_t step = 0; step < max_len; ++step) {
    Tensor last;  // logits [B, V] of the newest position
    if (cached) {
      // Only the newest token goes through the decoder; earlier keys/values come from the cache.
      std::vector<int64_t> newest;
      for (auto& seq : out) newest.push_back(seq.back());
      Tensor ids = tensor_i64(newest, {B, 1}, src_ids.device());
      last = select(decode_step(ids, step, memory, src_pad_mask, caches), 1, 0);
    } else {
      // The whole prefix is decoded again each step.
      std::vector<int64_t> flat;
      for (auto& seq : out) flat.insert(flat.end(), seq.begin(), seq.end());
      Tensor tgt = tensor_i64(flat, {B, step + 1}, src_ids.device());
      last = select(decode(tgt, memory, src_pad_mask, Tensor()), 1, step);
    }
    std::vector<int64_t> next = argmax(last, -1).to_vector<int64_t>();
    bool all_done = true;
    for (int64_t b = 0; b < B; ++b) {
      out[size_t(b)].push_back(done[size_t(b)] ? config.pad_id : next[size_t(b)]);
      if (next[size_t(b)] == eos) done[size_t(b)] = true;
      all_done = all_done && done[size_t(b)];
    }
    if (all_done) break;
  }
  std::vector<int64_t> flat;
  for (auto& seq : out) flat.insert(flat.end(), seq.begin(), seq.end());
  return tensor_i64(flat, {B, int64_t(out[0].size())}, src_ids.device());
}

Tensor Seq2SeqTransformer::beam_search(const Tensor& src_ids, const Tensor& src_pad_mask,
                                       int64_t bos, int64_t eos, int64_t max_len, int64_t beam) {
  QKV_CHECK(beam >= 1, "beam_search", "beam must be >= 1, got ", beam);
  NoGrad no_grad;
  const int64_t B = src_ids.size(0);
  struct Hyp {
    std::vector<int64_t> ids;
    double logp;
    bool done;
    int64_t length;   // tokens generated, eos included; the padding of a finished one is not
    int64_t row = 0;  // its row in the last decoded batch (it extends that row's hypothesis)
  };
  // Length-normalized, or beam search would prefer stopping early (every token lowers log p).
  auto score = [](const Hyp& h) { return h.logp / double(std::max<int64_t>(1, h.length)); };
  std::vector<std::vector<int64_t>> results;
  for (int64_t b = 0; b < B; ++b) {
    Tensor src = src_ids.narrow(0, b, 1);
    Tensor pad = src_pad_mask.defined() ? src_pad_mask.narrow(0, b, 1) : Tensor();
    Tensor memory = encode(src, pad);
    std::vector<Hyp> hyps{{{bos}, 0.0, false, 0}};
    const bool cached = can_use_kv_cache();
    std::vector<nn::TransformerDecoderLayer::Cache> caches;  // one row per live hypothesis
    for (int64_t step = 0; step < max_len; ++step) {
      std::vector<Hyp> candidates;
      std::vector<size_t> live;
      for (size_t i = 0; i < hyps.size(); ++i)
        if (hyps[i].done)
          candidates.push_back(hyps[i]);
        else
          live.push_back(i);
      if (live.empty()) break;
      // All live hypotheses have the same length: decode them as one batch.
      const int64_t L = int64_t(live.size());
      Tensor mem = expand(memory, {L, memory.size(1), memory.size(2)});
      Tensor p = pad.defined() ? expand(pad, {L, pad.size(1)}) : Tensor();
      Tensor last;   // logits [L, V] of each live hypothesis's next token
      if (cached) {  // only the newest tokens; the caches' rows are the live hypotheses, in order
        std::vector<int64_t> newest;
        for (size_t i : live) newest.push_back(hyps[i].ids.back());
        Tensor ids = tensor_i64(newest, {L, 1}, src_ids.device());
        last = select(decode_step(ids, step, mem, p, caches), 1, 0);
      } else {
        std::vector<int64_t> flat;
        for (size_t i : live) flat.insert(flat.end(), hyps[i].ids.begin(), hyps[i].ids.end());
        Tensor tgt = tensor_i64(flat, {L, step + 1}, src_ids.device());
        last = select(decode(tgt, mem, p, Tensor()), 1, step);
      }
      Tensor logp = log_softmax(last, -1);
      std::vector<double> lp = logp.to_vector<double>();
      const int64_t V = logp.size(1);
      for (int64_t r = 0; r < L; ++r) {
        // Only the best `beam` extensions of each hypothesis can survive.
        std::vector<int64_t> order(static_cast<size_t>(V));
        for (int64_t v = 0; v < V; ++v) order[size_t(v)] = v;
        std::partial_sort(
            order.begin(), order.begin() + std::min(beam, V), order.end(),
            [&](int64_t a, int64_t c) { return lp[size_t(r * V + a)] > lp[size_t(r * V + c)]; });
        for (int64_t k = 0; k < std::min(beam, V); ++k) {
          Hyp h = hyps[live[size_t(r)]];
          int64_t v = order[size_t(k)];
          h.ids.push_back(v);
          h.logp += lp[size_t(r * V + v)];
          h.done = v == eos;
          h.length += 1;
          h.row = r;
          candidates.push_back(std::move(h));
        }
      }
      std::stable_sort(candidates.begin(), candidates.end(),
                       [&](const Hyp& a, const Hyp& c) { return score(a) > score(c); });
      candidates.resize(std::min<size_t>(candidates.size(), size_t(beam)));
      hyps = std::move(candidates);
      if (cached) {  // the next batch's rows: the hypotheses still live, from the rows they extend
        std::vector<int64_t> rows;
        for (const Hyp& h : hyps)
          if (!h.done) rows.push_back(h.row);
        if (!rows.empty()) {
          Tensor index = tensor_i64(rows, {int64_t(rows.size())}, src_ids.device());
          for (auto& cache : caches) cache.select_rows(index);
        }
      }
      // Hypotheses must share a length to be batched: finished ones are padded as they wait.
      for (Hyp& h : hyps)
        if (h.done && int64_t(h.ids.size()) < step + 2) h.ids.push_back(config.pad_id);
    }
    const Hyp& best = *std::max_element(
        hyps.begin(), hyps.end(), [&](const Hyp& a, const Hyp& c) { return score(a) < score(c); });
    results.push_back(best.ids);
  }
  size_t width = 0;
  for (auto& r : results) width = std::max(width, r.size());
  std::vector<int64_t> flat;
  for (auto& r : results) {
    r.resize(width, config.pad_id);
    flat.insert(flat.end(), r.begin(), r.end());
  }
  return tensor_i64(flat, {B, int64_t(width)}, src_ids.device());
}

void Seq2SeqTransformer::set_record_attention(bool on) {
  models::set_record_attention(*encoder, on);
  models::set_record_attention(*decoder, on);
}

std::vector<AttentionMap> Seq2SeqTransformer::attention_maps() const {
  std::vector<AttentionMap> maps;
  append_attention_maps(*encoder, "encoder", maps);
  append_attention_maps(*decoder, "decoder", maps);
  return maps;
}

}  // namespace qkv::models
