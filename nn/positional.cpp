#include "nn/positional.h"

#include <algorithm>
#include <cmath>

#include "engine/check_name.h"
#include "engine/error.h"
#include "nn/init.h"
#include "nn/positional_names.h"

namespace qkv::nn {

const std::vector<std::string>& positional_encoding_names() {
  static const std::vector<std::string> names = {"sinusoidal", "learned", "relative", "rope",
                                                 "alibi"};
  return names;
}

namespace {

void check_kind(const std::string& kind) {
  check_name_among(kind, positional_encoding_names(), "positional", "encoding");
}

void check_input(const Tensor& x, int64_t d, const char* op) {
  QKV_CHECK(x.dim() == 3 && x.size(2) == d, op, "expected [B, T, ", d, "], got ",
            shape_str(x.shape()));
}

}  // namespace

Tensor sinusoid_table(int64_t n, int64_t d, DType dtype) {
  std::vector<double> v(size_t(n * d));
  for (int64_t p = 0; p < n; ++p)
    for (int64_t i = 0; i < d; i += 2) {
      double angle = double(p) / std::pow(10000.0, double(i) / double(d));
      v[size_t(p * d + i)] = std::sin(angle);
      if (i + 1 < d) v[size_t(p * d + i + 1)] = std::cos(angle);
    }
  return tensor(v, {n, d}, {dtype});
}

SinusoidalPositionalEncoding::SinusoidalPositionalEncoding(int64_t d, int64_t max_len)
    : d_model(d) {
  pe = register_buffer("pe", sinusoid_table(max_len, d));
}

Tensor SinusoidalPositionalEncoding::forward(const Tensor& x, int64_t offset) {
  check_input(x, d_model, "SinusoidalPositionalEncoding");
  const int64_t T = x.size(1);
  // The buffer is computed in float32; a float64 module (pe converted by Module::to) would only
  // be float32-accurate, so float64 inputs get a table computed in float64.
  const bool f64 = x.dtype() == DType::f64;
  Tensor table = offset + T <= pe.size(0) && !f64
                     ? pe
                     : sinusoid_table(offset + T, d_model, f64 ? DType::f64 : DType::f32);
  table = table.narrow(0, offset, T);
  if (table.dtype() != x.dtype() || table.device() != x.device())
    table = table.to(x.dtype()).to(x.device());
  return add(x, table);
}

LearnedPositionalEncoding::LearnedPositionalEncoding(int64_t d, int64_t max)
    : d_model(d), max_len(max) {
  weight = register_parameter("weight", Tensor::empty({max, d}));
  init::normal_(weight, 0, 0.02);
}

Tensor LearnedPositionalEncoding::forward(const Tensor& x, int64_t offset) {
  check_input(x, d_model, "LearnedPositionalEncoding");
  QKV_CHECK(offset + x.size(1) <= max_len, "LearnedPositionalEncoding", "positions up to ",
            offset + x.size(1), " exceed max_len ", max_len,
            " (learned encodings have no row there; use sinusoidal, relative, rope or alibi)");
  return add(x, weight.narrow(0, offset, x.size(1)));
}

RelativePositionBias::RelativePositionBias(int64_t hd, int64_t max_d)
    : head_dim(hd), max_distance(max_d) {
  weight = register_parameter("weight", Tensor::empty({2 * max_d + 1, hd}));
  init::normal_(weight, 0, 0.02);
}

Tensor RelativePositionBias::score_bias(const Tensor& q, int64_t S) {
  const int64_t B = q.size(0), H = q.size(1), T = q.size(2);
  // q . a[d] for every distance d at once, then each (i, j) picks its distance's column.
  Tensor all = mul(matmul(q, weight.transpose(0, 1)), 1.0 / std::sqrt(double(head_dim)));
  std::vector<int64_t> idx(size_t(T * S));
  for (int64_t i = 0; i < T; ++i)
    for (int64_t j = 0; j < S; ++j)
      idx[size_t(i * S + j)] = std::clamp(j - i, -max_distance, max_distance) + max_distance;
  Tensor index = tensor_i64(idx, {1, 1, T, S}, q.device()).expand({B, H, T, S}).contiguous();
  return gather(all, 3, index);
}

RotaryEmbedding::RotaryEmbedding(int64_t hd, double b) : head_dim(hd), base(b) {
  QKV_CHECK(hd % 2 == 0, "RotaryEmbedding", "head_dim must be even, got ", hd);
}

Tensor RotaryEmbedding::apply(const Tensor& x, int64_t offset) const {
  const int64_t L = x.size(-2), half = head_dim / 2;
  std::vector<double> c(size_t(L * head_dim)), s(size_t(L * head_dim));
  for (int64_t p = 0; p < L; ++p)
    for (int64_t i = 0; i < half; ++i) {
      double angle = double(p + offset) * std::pow(base, -2.0 * double(i) / double(head_dim));
      c[size_t(p * head_dim + i)] = c[size_t(p * head_dim + i + half)] = std::cos(angle);
      s[size_t(p * head_dim + i)] = s[size_t(p * head_dim + i + half)] = std::sin(angle);
    }
  Tensor cos_t = tensor(c, {L, head_dim}, {x.dtype(), x.device()});
  Tensor sin_t = tensor(s, {L, head_dim}, {x.dtype(), x.device()});
  // (x1, x2) -> (x1 cos - x2 sin, x2 cos + x1 sin)
  Tensor x1 = x.narrow(-1, 0, half), x2 = x.narrow(-1, half, half);
  Tensor rotated_half = cat({neg(x2), x1}, -1);
  return add(mul(x, cos_t), mul(rotated_half, sin_t));
}

void RotaryEmbedding::rotate(Tensor& q, Tensor& k) {
  QKV_CHECK(q.size(-1) == head_dim, "RotaryEmbedding", "head_dim ", head_dim, ", got ",
            shape_str(q.shape()));
  q = apply(q);
  k = apply(k);
}

ALiBi::ALiBi(int64_t h) : num_heads(h) {}

Tensor ALiBi::score_bias(const Tensor& q, int64_t S) {
  const int64_t H = q.size(1), T = q.size(2);
  QKV_CHECK(H == num_heads, "ALiBi", "built for ", num_heads, " heads, got ", H);
  std::vector<double> v(size_t(H * T * S));
  for (int64_t h = 0; h < H; ++h) {
    double slope = std::pow(2.0, -8.0 * double(h + 1) / double(H));
    for (int64_t i = 0; i < T; ++i)
      for (int64_t j = 0; j < S; ++j)
        v[size_t((h * T + i) * S + j)] = -slope * double(std::abs(i - j));
  }
  return tensor(v, {1, H, T, S}, {q.dtype(), q.device()});
}

std::shared_ptr<PositionalEncoding> make_positional_encoding(const std::string& kind,
                                                             int64_t d_model, int64_t max_len) {
  check_kind(kind);
  if (kind == "sinusoidal") return std::make_shared<SinusoidalPositionalEncoding>(d_model, max_len);
  if (kind == "learned") return std::make_shared<LearnedPositionalEncoding>(d_model, max_len);
  return nullptr;
}

std::shared_ptr<AttentionPosition> make_attention_position(const std::string& kind,
                                                           int64_t num_heads, int64_t head_dim) {
  check_kind(kind);
  if (kind == "relative") return std::make_shared<RelativePositionBias>(head_dim);
  if (kind == "rope") return std::make_shared<RotaryEmbedding>(head_dim);
  if (kind == "alibi") return std::make_shared<ALiBi>(num_heads);
  return nullptr;
}

}  // namespace qkv::nn
