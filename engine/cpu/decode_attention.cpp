// The CPU's attention for one decoding step (CpuBackend::decode_attention): each (batch, head) has
// a single query row attending to the S cached keys. The tiled kernel (attention_kernels.cpp) is
// built for T x S problems; for T = 1 its setup (tiles, per-thread buffers, mask views) costs more
// than the arithmetic, which is one dot product per key and one axpy per value row.
#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "engine/cpu/cpu_backend.h"

namespace qkv::cpu {

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

}  // namespace

bool CpuBackend::supports_decode_attention(DType dtype) const {
  return dtype == DType::f32 || dtype == DType::f64;
}

void CpuBackend::decode_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& key_padding_mask, double scale, const Tensor& out) {
  const uint8_t* pad = key_padding_mask.defined() ? key_padding_mask.data<uint8_t>() : nullptr;
  if (q.dtype() == DType::f32)
    run<float>(q, k, v, pad, scale, out);
  else
    run<double>(q, k, v, pad, scale, out);
}

}  // namespace qkv::cpu
