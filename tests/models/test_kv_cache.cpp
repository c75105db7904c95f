// KV-cache decoding against full recomputation of the prefix: the same logits at every step and
// the same tokens, for post-norm and pre-norm decoders with padded sources.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/error.h"
#include "models/seq2seq.h"

using namespace qkv;
using namespace qkv::models;

BOOST_AUTO_TEST_SUITE(kv_cache)

BOOST_AUTO_TEST_CASE(cached_decoding_equals_recomputation_token_for_token) {
  for (bool norm_first : {false, true}) {
    manual_seed(11);
    Seq2SeqConfig c{.src_vocab = 12,
                    .tgt_vocab = 12,
                    .d_model = 32,
                    .num_heads = 4,
                    .num_encoder_layers = 2,
                    .num_decoder_layers = 2,
                    .dim_feedforward = 64,
                    .dropout = 0.1,
                    .max_len = 64,
                    .positional = "sinusoidal",
                    .norm_first = norm_first};
    Seq2SeqTransformer model(c);
    model.eval();
    Tensor src = tensor_i64({3, 4, 5, 6, 7, 8, 2, 9, 4, 0, 0, 0}, {2, 6});
    Tensor pad = eq(src, 0.0);

    // Step by step: logits of the cached step vs the last row of the full decode.
    NoGrad no_grad;
    Tensor memory = model.encode(src, pad);
    std::vector<nn::TransformerDecoderLayer::Cache> caches;
    std::vector<int64_t> prefix{1, 1};  // bos for both rows
    double worst = 0;
    for (int64_t step = 0; step < 40; ++step) {  // past the cache's first two regrowths
      Tensor ids = tensor_i64({prefix[prefix.size() - 2], prefix[prefix.size() - 1]}, {2, 1});
      Tensor cached = select(model.decode_step(ids, step, memory, pad, caches), 1, 0);
      // The prefix is stored time-major (two rows interleaved); lay it out as [2, step + 1].
      std::vector<int64_t> flat;
      for (int64_t r = 0; r < 2; ++r)
        for (int64_t t = 0; t <= step; ++t) flat.push_back(prefix[size_t(t * 2 + r)]);
      Tensor full =
          select(model.decode(tensor_i64(flat, {2, step + 1}), memory, pad, Tensor()), 1, step);
      std::vector<double> a = cached.to_vector<double>(), b = full.to_vector<double>();
      for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
      std::vector<int64_t> next = argmax(full, -1).to_vector<int64_t>();
      prefix.push_back(next[0]);
      prefix.push_back(next[1]);
    }
    BOOST_CHECK_LT(worst, 1e-4);

    // Whole greedy decodes, cache on and off.
    model.use_kv_cache = true;
    std::vector<int64_t> with = model.greedy_decode(src, pad, 1, 2, 20).to_vector<int64_t>();
    model.use_kv_cache = false;
    std::vector<int64_t> without = model.greedy_decode(src, pad, 1, 2, 20).to_vector<int64_t>();
    BOOST_CHECK_EQUAL_COLLECTIONS(with.begin(), with.end(), without.begin(), without.end());
    BOOST_CHECK_GT(with.size(), size_t(10));
  }
}

// Beam search keeps one cache row per live hypothesis and reorders the rows as hypotheses are
// kept, extended twice or finished: it must find exactly what recomputing every prefix finds.
BOOST_AUTO_TEST_CASE(cached_beam_search_equals_recomputation) {
  manual_seed(12);
  Seq2SeqConfig c{.src_vocab = 12,
                  .tgt_vocab = 12,
                  .d_model = 32,
                  .num_heads = 4,
                  .num_encoder_layers = 1,
                  .num_decoder_layers = 2,
                  .dim_feedforward = 64,
                  .max_len = 64};
  Seq2SeqTransformer model(c);
  model.eval();
  Tensor src = tensor_i64({3, 4, 5, 6, 7, 8, 2, 9, 4, 0, 0, 0}, {2, 6});
  Tensor pad = eq(src, 0.0);
  for (int64_t beam : {1, 3, 5}) {
    model.use_kv_cache = true;
    std::vector<int64_t> with = model.beam_search(src, pad, 1, 2, 30, beam).to_vector<int64_t>();
    model.use_kv_cache = false;
    std::vector<int64_t> without = model.beam_search(src, pad, 1, 2, 30, beam).to_vector<int64_t>();
    BOOST_CHECK_EQUAL_COLLECTIONS(with.begin(), with.end(), without.begin(), without.end());
  }
}

// The cache's buffers grow like a std::vector; what it holds must always equal concatenation, and
// with autograd on it must let the gradient through.
BOOST_AUTO_TEST_CASE(cache_append_equals_concatenation) {
  manual_seed(5);
  nn::MultiheadAttention::KVCache cache;
  Tensor k_all, v_all;
  {
    NoGrad no_grad;
    for (int64_t t : {1, 3, 1, 12, 1, 20, 2}) {
      Tensor k = randn({2, 3, t, 4}), v = randn({2, 3, t, 5});
      cache.append(k, v);
      k_all = k_all.defined() ? cat({k_all, k}, 2) : k;
      v_all = v_all.defined() ? cat({v_all, v}, 2) : v;
      BOOST_REQUIRE(cache.k.shape() == k_all.shape() && cache.v.shape() == v_all.shape());
      BOOST_CHECK(cache.k.to_vector<float>() == k_all.to_vector<float>());
      BOOST_CHECK(cache.v.to_vector<float>() == v_all.to_vector<float>());
    }
  }
  BOOST_CHECK_GT(cache.k_buffer.size(2), cache.k.size(2));  // room kept for more

  Tensor k = randn({2, 3, 2, 4}).requires_grad_(), v = randn({2, 3, 2, 5}).requires_grad_();
  cache.append(k, v);
  (sum(cache.k) + 2.0 * sum(cache.v)).backward();
  BOOST_CHECK(k.grad().to_vector<float>() == std::vector<float>(k.numel(), 1.0f));
  BOOST_CHECK(v.grad().to_vector<float>() == std::vector<float>(v.numel(), 2.0f));
  BOOST_CHECK_EQUAL(cache.k.size(2), k_all.size(2) + 2);
  BOOST_CHECK_THROW(cache.append(randn({2, 3, 1, 4}), randn({2, 3, 2, 5})), Error);
}

// Self-attention's three projections become one product at inference (KVCache::fuse_projections),
// and only there: with autograd on, or different query and key tensors, they stay apart. The
// fused step must give what the separate projections give.
BOOST_AUTO_TEST_CASE(fused_projections_only_where_they_apply) {
  manual_seed(6);
  nn::MultiheadAttention attention(16, 4, 0.0);
  attention.eval();
  Tensor x = randn({2, 1, 16}), other = randn({2, 1, 16});
  nn::MultiheadAttention::KVCache fused, separate;
  BOOST_CHECK(!fused.fuse_projections(attention, x, x, x));  // autograd is on
  NoGrad no_grad;
  BOOST_CHECK(!fused.fuse_projections(attention, x, other, other));
  BOOST_CHECK(fused.fuse_projections(attention, x, x, x));
  BOOST_CHECK(fused.qkv_weight.shape() == Shape({48, 16}));
  for (int step = 0; step < 3; ++step) {
    Tensor h = randn({2, 1, 16});
    Tensor a = attention.forward_cached(h, h, h, fused, false);
    // the same step with key and value as copies: not one tensor, so no fusion
    Tensor b = attention.forward_cached(h, h.clone(), h.clone(), separate, false);
    std::vector<float> va = a.to_vector<float>(), vb = b.to_vector<float>();
    double worst = 0;
    for (size_t i = 0; i < va.size(); ++i) worst = std::max(worst, double(std::abs(va[i] - vb[i])));
    BOOST_CHECK_LT(worst, 1e-6);
  }
  BOOST_CHECK(!separate.qkv_weight.defined());
}

BOOST_AUTO_TEST_CASE(in_attention_positions_fall_back_to_recomputation) {
  Seq2SeqConfig c{.src_vocab = 6,
                  .tgt_vocab = 6,
                  .d_model = 16,
                  .num_heads = 2,
                  .dim_feedforward = 32,
                  .positional = "rope"};
  Seq2SeqTransformer model(c);
  BOOST_CHECK(!model.can_use_kv_cache());
  model.eval();
  Tensor out = model.greedy_decode(tensor_i64({1, 2, 3}, {1, 3}), Tensor(), 1, 2, 5);
  BOOST_CHECK_EQUAL(out.size(0), 1);
}

BOOST_AUTO_TEST_SUITE_END()
