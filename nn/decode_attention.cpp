#include "nn/decode_attention.h"

#include <cmath>

#include "engine/backend.h"
#include "engine/error.h"
#include "engine/ops.h"

namespace qkv::nn {

namespace {

// True when each (batch, head)'s [S, d] block of t is one dense run: a contiguous tensor, or a
// view of the first S positions of a longer KV-cache buffer (MultiheadAttention::KVCache).
bool dense_blocks(const Tensor& t) { return t.strides()[3] == 1 && t.strides()[2] == t.size(3); }

}  // namespace

bool decode_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& key_padding_mask) {
  if (q.dim() != 4 || k.dim() != 4 || v.dim() != 4 || q.size(2) != 1) return false;
  const int64_t B = q.size(0), H = q.size(1), S = k.size(2);
  if (k.size(0) != B || k.size(1) != H || v.size(0) != B || v.size(1) != H || v.size(2) != S ||
      k.size(3) != q.size(3))
    return false;
  if (k.device() != q.device() || v.device() != q.device()) return false;
  if (k.dtype() != q.dtype() || v.dtype() != q.dtype()) return false;
  if (grad_enabled() && (q.requires_grad() || k.requires_grad() || v.requires_grad())) return false;
  if (key_padding_mask.defined() &&
      (key_padding_mask.dtype() != DType::b8 || key_padding_mask.device() != q.device() ||
       key_padding_mask.shape() != Shape{B, S}))
    return false;
  return q.backend().supports_decode_attention(q.dtype());
}

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
  QKV_CHECK(k_in.device() == q_in.device() && v_in.device() == q_in.device(), op,
            "q, k and v are on different devices");
  QKV_CHECK(q_in.dtype() == k_in.dtype() && q_in.dtype() == v_in.dtype(), op,
            "expects q, k, v of one dtype");
  Backend& backend = q_in.backend();
  QKV_CHECK(backend.supports_decode_attention(q_in.dtype()), op, "the ", q_in.device().str(),
            " backend has no single-query attention kernel for ", dtype_name(q_in.dtype()));
  QKV_CHECK(
      !(grad_enabled() && (q_in.requires_grad() || k_in.requires_grad() || v_in.requires_grad())),
      op, "records no gradient; use efficient_attention when one is needed");
  Tensor pad;
  if (key_padding_mask.defined()) {
    QKV_CHECK(key_padding_mask.dtype() == DType::b8 && key_padding_mask.dim() == 2 &&
                  key_padding_mask.size(0) == B && key_padding_mask.size(1) == S,
              op, "key_padding_mask must be bool [B, S] = [", B, ",", S, "], got ",
              shape_str(key_padding_mask.shape()));
    QKV_CHECK(key_padding_mask.device() == q_in.device(), op,
              "key_padding_mask is not on q's device");
    pad = key_padding_mask.contiguous();
  }
  const Tensor q = q_in.detach().contiguous();
  const Tensor k = dense_blocks(k_in) ? k_in.detach() : k_in.detach().contiguous();
  const Tensor v = dense_blocks(v_in) ? v_in.detach() : v_in.detach().contiguous();
  Tensor out = Tensor::empty({B, H, 1, v.size(3)}, q.dtype(), q.device());
  const double s = scale > 0 ? scale : 1.0 / std::sqrt(double(q.size(3)));
  backend.decode_attention(q, k, v, pad, s, out);
  return out;
}

}  // namespace qkv::nn
