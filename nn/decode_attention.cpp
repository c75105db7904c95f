#include "nn/decode_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/error.h"
#include "engine/ops.h"

namespace qkv::nn {

namespace {

// One (batch, head): scores s_j = q . k_j * scale over the unpadded keys, softmax, out = sum p_j
// v_j. The probabilities are kept (S is the length decoded so far), so exp runs once per key.
template <typename T>
void one_row(const T* q, const T* k, const T* v, const uint8_t* pad, int64_t S, int64_t d,
             int64_t dv, T scale, T* out, std::vector<T>& p) {
  p.assign(size_t(S), T(0));
  T max = -std::numeric_limits<T>::infinity();
  for (int64_t j = 0; j < S; ++j) {
    if (pad && pad[j]) continue;
    const T* kj = k + j * d;
    T dot = 0;
    _Pragma("omp simd reduction(+ : dot)") for (int64_t c = 0; c < d; ++c) dot += q[c] * kj[c];
    p[size_t(j)] = dot * scale;
    max = std::max(max, p[size_t(j)]);
  }
  std::fill(out, out + dv, T(0));
  if (max == -std::numeric_limits<T>::infinity()) return;  // every key is padding
  T total = 0;
  for (int64_t j = 0; j < S; ++j) {
    if (pad && pad[j]) continue;
    p[size_t(j)] = std::exp(p[size_t(j)] - max);
    total += p[size_t(j)];
  }
  for (int64_t j = 0; j < S; ++j) {
    if (pad && pad[j]) continue;
    const T w = p[size_t(j)] / total;
    const T* vj = v + j * dv;
    _Pragma("omp simd") for (int64_t c = 0; c < dv; ++c) out[c] += w * vj[c];
  }
}

// q and out are contiguous; k and v need only dense [S, d] blocks per (batch, head), found with
// their own batch and head strides.
template <typename T>
void run(const Tensor& q, const Tensor& k, const Tensor& v, const uint8_t* pad, double scale,
         const Tensor& out) {
  const int64_t B = q.size(0), H = q.size(1), S = k.size(2), d = q.size(3), dv = v.size(3);
  const T* qp = q.data<T>();
  const T* kp = k.data<T>();
  const T* vp = v.data<T>();
  T* op = out.data<T>();
  std::vector<T> p;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t n = b * H + h;
      one_row(qp + n * d, kp + b * k.strides()[0] + h * k.strides()[1],
              vp + b * v.strides()[0] + h * v.strides()[1], pad ? pad + b * S : nullptr, S, d, dv,
              T(scale), op + n * dv, p);
    }
}

// True when each (batch, head)'s [S, d] block of t is one dense run: a contiguous tensor, or a
// view of the first S positions of a longer KV-cache buffer (MultiheadAttention::KVCache).
bool dense_blocks(const Tensor& t) { return t.strides()[3] == 1 && t.strides()[2] == t.size(3); }

}  // namespace

Tensor decode_attention(const Tensor& q_in, const Tensor& k_in, const Tensor& v_in,
                        const Tensor& key_padding_mask, double scale) {
  const char* op = "decode_attention";
  QKV_CHECK(q_in.dim() == 4 && k_in.dim() == 4 && v_in.dim() == 4 && q_in.size(2) == 1, op,
            "expects q [B, H, 1, d], k [B, H, S, d], v [B, H, S, dv], got ",
            shape_str(q_in.shape()), ", ", shape_str(k_in.shape()), ", ", shape_str(v_in.shape()));
  const int64_t B = q_in.size(0), H = q_in.size(1), S = k_in.size(2);
  QKV_CHECK(k_in.size(0) == B && k_in.size(1) == H && v_in.size(0) == B && v_in.size(1) == H &&
                v_in.size(2) == S && k_in.size(3) == q_in.size(3),
            op, "q ", shape_str(q_in.shape()), ", k ", shape_str(k_in.shape()), " and v ",
            shape_str(v_in.shape()), " do not match");
  QKV_CHECK(q_in.device().is_cpu() && k_in.device().is_cpu() && v_in.device().is_cpu(), op,
            "runs on the CPU");
  QKV_CHECK(q_in.dtype() == k_in.dtype() && q_in.dtype() == v_in.dtype() &&
                (q_in.dtype() == DType::f32 || q_in.dtype() == DType::f64),
            op, "expects float32 or float64 q, k, v of one dtype");
  QKV_CHECK(
      !(grad_enabled() && (q_in.requires_grad() || k_in.requires_grad() || v_in.requires_grad())),
      op, "records no gradient; use efficient_attention when one is needed");
  Tensor pad;
  if (key_padding_mask.defined()) {
    QKV_CHECK(key_padding_mask.dtype() == DType::b8 && key_padding_mask.dim() == 2 &&
                  key_padding_mask.size(0) == B && key_padding_mask.size(1) == S,
              op, "key_padding_mask must be bool [B, S] = [", B, ",", S, "], got ",
              shape_str(key_padding_mask.shape()));
    pad = key_padding_mask.contiguous();
  }
  const Tensor q = q_in.detach().contiguous();
  const Tensor k = dense_blocks(k_in) ? k_in.detach() : k_in.detach().contiguous();
  const Tensor v = dense_blocks(v_in) ? v_in.detach() : v_in.detach().contiguous();
  Tensor out = Tensor::empty({B, H, 1, v.size(3)}, q.dtype());
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(double(q.size(3)));
  const uint8_t* pad_data = pad.defined() ? pad.data<uint8_t>() : nullptr;
  if (q.dtype() == DType::f32)
    run<float>(q, k, v, pad_data, s, out);
  else
    run<double>(q, k, v, pad_data, s, out);
  return out;
}

}  // namespace qkv::nn
