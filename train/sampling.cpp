#include "train/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "engine/autograd.h"
#include "engine/error.h"

namespace qkv::train {

void check_sampling_options(const SamplingOptions& o) {
  QKV_CHECK(std::isfinite(o.temperature) && o.temperature >= 0, "--temperature",
            "must be a finite number >= 0, got ", o.temperature);
  QKV_CHECK(o.top_k >= 0, "--top-k", "must be >= 0 (0 keeps every token), got ", o.top_k);
  QKV_CHECK(o.top_p > 0 && o.top_p <= 1, "--top-p", "must be in (0, 1], got ", o.top_p);
}

std::vector<double> next_token_probabilities(const std::vector<double>& logits,
                                             const SamplingOptions& o) {
  check_sampling_options(o);
  const size_t n = logits.size();
  QKV_CHECK(n > 0, "sampling", "no logits");
  std::vector<double> p(n, 0.0);
  if (o.temperature == 0) {
    p[size_t(std::max_element(logits.begin(), logits.end()) - logits.begin())] = 1.0;
    return p;
  }
  // Ids by decreasing logit, equal logits by increasing id.
  std::vector<size_t> order(n);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  size_t keep = o.top_k > 0 ? std::min(n, size_t(o.top_k)) : n;
  const double top = logits[order[0]] / o.temperature;
  double total = 0;
  for (size_t r = 0; r < keep; ++r)
    total += p[order[r]] = std::exp(logits[order[r]] / o.temperature - top);
  if (o.top_p < 1) {
    // The smallest prefix of the ranking whose mass reaches top_p.
    double mass = 0;
    size_t r = 0;
    while (r < keep && mass < o.top_p * total) mass += p[order[r++]];
    for (size_t q = r; q < keep; ++q) p[order[q]] = 0;
    keep = r, total = mass;
  }
  for (size_t r = 0; r < keep; ++r) p[order[r]] /= total;
  return p;
}

int64_t sample_token(const std::vector<double>& logits, const SamplingOptions& o, Generator& gen) {
  std::vector<double> p = next_token_probabilities(logits, o);
  if (o.temperature == 0) return int64_t(std::max_element(p.begin(), p.end()) - p.begin());
  const double u = philox::uniform(gen.seed(), gen.take(1));
  double cumulative = 0;
  int64_t last = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] == 0) continue;
    cumulative += p[i];
    last = int64_t(i);
    if (u < cumulative) return last;
  }
  return last;  // u within rounding of 1
}

namespace {

std::vector<double> last_row(const Tensor& logits) {
  const int64_t T = logits.size(1), V = logits.size(2);
  return logits.narrow(1, T - 1, 1).reshape({V}).to_vector<double>();
}

}  // namespace

std::vector<int64_t> generate(models::GPT& model, const std::vector<int64_t>& prompt,
                              int64_t tokens, const SamplingOptions& o, Generator& gen,
                              bool use_cache) {
  check_sampling_options(o);
  QKV_CHECK(!prompt.empty(), "--prompt", "needs at least one token");
  QKV_CHECK(tokens >= 0, "--tokens", "must be >= 0, got ", tokens);
  const bool was_training = model.is_training();
  model.eval();
  NoGrad no_grad;
  const int64_t context = model.config.context;
  std::vector<int64_t> seq = prompt;
  models::GPT::Cache cache;
  int64_t cached = 0;  // positions of seq in the cache
  auto recompute = [&] {
    const int64_t n = std::min<int64_t>(int64_t(seq.size()), context);
    std::vector<int64_t> window(seq.end() - n, seq.end());
    return last_row(model.forward(tensor_i64(window, {1, n})));
  };
  for (int64_t t = 0; t < tokens; ++t) {
    std::vector<double> logits;
    if (use_cache && int64_t(seq.size()) <= context) {
      Tensor step;
      for (; cached < int64_t(seq.size()); ++cached)
        step = model.forward_step(tensor_i64({seq[size_t(cached)]}, {1, 1}), cached, cache);
      logits = last_row(step);
    } else {
      logits = recompute();
    }
    seq.push_back(sample_token(logits, o, gen));
  }
  model.train(was_training);
  return seq;
}

}  // namespace qkv::train
