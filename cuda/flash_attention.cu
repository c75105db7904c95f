// Flash attention forward and backward (see cuda/flash_attention.h for the contract).
//
// Plain CUDA cores, float32 throughout, one thread per output row:
// - forward: a block owns kRowsPerBlock queries; it streams key/value tiles of kTile rows through
//   shared memory, and each thread keeps its query's running max m, running sum l and the
//   unnormalized output acc, rescaling acc by exp(m_old - m_new) when a tile raises the max.
// - backward (as in FlashAttention-2): delta_i = dO_i . O_i first; then one kernel where a thread
//   owns a key and accumulates dK, dV over query tiles, and one where a thread owns a query and
//   accumulates dQ over key tiles. Both recompute p_ij = exp(s_ij - lse_i) from the saved lse, so
//   no T x T matrix exists anywhere, and no atomics are needed (results are deterministic).
// Rows of the tiles are zero-padded to a compile-time width DMAX >= d (32, 64 or 128) so the dot
// products are fixed-length unrolled loops.
#include <cmath>
#include <limits>

#include "cuda/cuda_backend_impl.h"
#include "cuda/flash_attention.h"
#include "cuda/flash_attention_internal.cuh"
#include "cuda/launch.cuh"
#include "engine/autocast.h"

namespace qkv::cuda {

using flash::AttentionShape;

namespace {

constexpr int kRowsPerBlock = 64;  // threads per block: queries (forward, dQ) or keys (dK/dV)
constexpr int kTile = 32;          // rows of the streamed operand per shared-memory tile

// Copies rows [row0, row0 + rows) of a [T, d] matrix into a [rows][width] shared tile, zero
// beyond T and beyond d. All threads of the block take part.
__device__ void load_tile(float* tile, int width, const float* src, int64_t row0, int rows,
                          int64_t t, int64_t d, int dmax) {
  for (int idx = threadIdx.x; idx < rows * dmax; idx += blockDim.x) {
    const int r = idx / dmax, c = idx % dmax;
    const int64_t row = row0 + r;
    tile[r * width + c] = (row < t && c < d) ? src[row * d + c] : 0.f;
  }
}

// Whether key j may be attended to at all (in range and not padding).
__device__ bool key_visible(int64_t j, int64_t tk, const uint8_t* pad_row) {
  return j < tk && !(pad_row && pad_row[j]);
}

template <int DMAX>
__device__ float dot(const float* a, const float* b) {
  float s = 0;
#pragma unroll
  for (int c = 0; c < DMAX; ++c) s += a[c] * b[c];
  return s;
}

// ---- forward ----------------------------------------------------------------------------------

template <int DMAX>
__global__ void forward_kernel(AttentionShape s, const float* q, const float* k, const float* v,
                               const uint8_t* pad, float* out, float* lse) {
  float* shared = dynamic_shared_memory<float>();
  float* ks = shared;                 // [kTile][DMAX]
  float* vs = ks + kTile * DMAX;      // [kTile][DMAX]
  float* scores = vs + kTile * DMAX;  // [kRowsPerBlock][kTile + 1], one padded row per thread
  uint8_t* visible = reinterpret_cast<uint8_t*>(scores + kRowsPerBlock * (kTile + 1));

  const int64_t bh = blockIdx.y, b = bh / s.heads;
  const int64_t q0 = int64_t(blockIdx.x) * kRowsPerBlock, i = q0 + threadIdx.x;
  const bool active = i < s.tq;
  const float* kb = k + bh * s.tk * s.d;
  const float* vb = v + bh * s.tk * s.d;
  const uint8_t* pad_row = pad ? pad + b * s.tk : nullptr;
  float* my_scores = scores + threadIdx.x * (kTile + 1);

  float qi[DMAX], acc[DMAX];
#pragma unroll
  for (int c = 0; c < DMAX; ++c) {
    qi[c] = (active && c < s.d) ? q[(bh * s.tq + i) * s.d + c] : 0.f;
    acc[c] = 0.f;
  }
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float m = neg_inf, l = 0.f;

  // With a causal mask no query of this block sees a key past its last query.
  const int64_t key_end = s.causal ? min(s.tk, q0 + kRowsPerBlock) : s.tk;
  for (int64_t k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();  // the previous tile is no longer read
    load_tile(ks, DMAX, kb, k0, kTile, s.tk, s.d, DMAX);
    load_tile(vs, DMAX, vb, k0, kTile, s.tk, s.d, DMAX);
    for (int j = threadIdx.x; j < kTile; j += blockDim.x)
      visible[j] = key_visible(k0 + j, s.tk, pad_row);
    __syncthreads();
    if (!active) continue;

    float tile_max = m;
    for (int j = 0; j < kTile; ++j) {
      float sj = neg_inf;
      if (visible[j] && !(s.causal && k0 + j > i)) sj = s.scale * dot<DMAX>(qi, ks + j * DMAX);
      my_scores[j] = sj;
      tile_max = fmaxf(tile_max, sj);
    }
    if (tile_max == neg_inf) continue;            // nothing visible yet
    const float correction = expf(m - tile_max);  // 0 on the first visible tile (m = -inf)
    l *= correction;
#pragma unroll
    for (int c = 0; c < DMAX; ++c) acc[c] *= correction;
    m = tile_max;
    for (int j = 0; j < kTile; ++j) {
      const float p = expf(my_scores[j] - m);  // exp(-inf) = 0 for hidden keys
      l += p;
#pragma unroll
      for (int c = 0; c < DMAX; ++c) acc[c] += p * vs[j * DMAX + c];
    }
  }
  if (!active) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: zeros, like softmax of all -inf
  // A compile-time loop: indexing acc with a runtime bound would move it to local memory.
#pragma unroll
  for (int c = 0; c < DMAX; ++c)
    if (c < s.d) out[(bh * s.tq + i) * s.d + c] = acc[c] * inv;
  lse[bh * s.tq + i] = l > 0.f ? m + logf(l) : neg_inf;
}

// ---- backward ---------------------------------------------------------------------------------

// delta_i = dO_i . O_i (= sum_j p_ij dp_ij), one thread per query row.
// With round_grad_out, dO is first rounded to bf16, as the tensor-core kernels multiply it.
__global__ void delta_kernel(int64_t rows, int64_t d, const float* grad_out, const float* out,
                             bool round_grad_out, float* delta) {
  for (int64_t r = grid_start(); r < rows; r += grid_step()) {
    float s = 0;
    for (int64_t c = 0; c < d; ++c) {
      const float g = grad_out[r * d + c];
      s += (round_grad_out ? widen_bf16(round_to_bf16(g)) : g) * out[r * d + c];
    }
    delta[r] = s;
  }
}

// One thread per key j: dV_j = sum_i p_ij dO_i, dK_j = scale * sum_i ds_ij q_i,
// with ds_ij = p_ij (dO_i . v_j - delta_i).
template <int DMAX>
__global__ void grad_kv_kernel(AttentionShape s, const float* q, const float* k, const float* v,
                               const uint8_t* pad, const float* grad_out, const float* lse,
                               const float* delta, float* grad_k, float* grad_v) {
  float* shared = dynamic_shared_memory<float>();
  constexpr int kOwnWidth = DMAX + 1;  // padded: each thread reads its own row without conflicts
  float* k_own = shared;               // [kRowsPerBlock][DMAX + 1]
  float* v_own = k_own + kRowsPerBlock * kOwnWidth;  // [kRowsPerBlock][DMAX + 1]
  float* qs = v_own + kRowsPerBlock * kOwnWidth;     // [kTile][DMAX]
  float* dos = qs + kTile * DMAX;                    // [kTile][DMAX]
  float* lse_s = dos + kTile * DMAX;                 // [kTile]
  float* delta_s = lse_s + kTile;                    // [kTile]

  const int64_t bh = blockIdx.y, b = bh / s.heads;
  const int64_t k0 = int64_t(blockIdx.x) * kRowsPerBlock, j = k0 + threadIdx.x;
  const uint8_t* pad_row = pad ? pad + b * s.tk : nullptr;
  const bool active = key_visible(j, s.tk, pad_row);
  const float* qb = q + bh * s.tq * s.d;
  const float* dob = grad_out + bh * s.tq * s.d;
  load_tile(k_own, kOwnWidth, k + bh * s.tk * s.d, k0, kRowsPerBlock, s.tk, s.d, DMAX);
  load_tile(v_own, kOwnWidth, v + bh * s.tk * s.d, k0, kRowsPerBlock, s.tk, s.d, DMAX);
  const float* kj = k_own + threadIdx.x * kOwnWidth;
  const float* vj = v_own + threadIdx.x * kOwnWidth;

  float dk[DMAX], dv[DMAX];
#pragma unroll
  for (int c = 0; c < DMAX; ++c) dk[c] = dv[c] = 0.f;
  const float neg_inf = -std::numeric_limits<float>::infinity();

  // With a causal mask queries before this block's first key see none of its keys.
  const int64_t q_begin = s.causal ? k0 / kTile * kTile : 0;
  for (int64_t q0 = q_begin; q0 < s.tq; q0 += kTile) {
    __syncthreads();
    load_tile(qs, DMAX, qb, q0, kTile, s.tq, s.d, DMAX);
    load_tile(dos, DMAX, dob, q0, kTile, s.tq, s.d, DMAX);
    for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
      const bool in = q0 + r < s.tq;
      lse_s[r] = in ? lse[bh * s.tq + q0 + r] : neg_inf;
      delta_s[r] = in ? delta[bh * s.tq + q0 + r] : 0.f;
    }
    __syncthreads();
    if (!active) continue;
    for (int r = 0; r < kTile; ++r) {
      const int64_t i = q0 + r;
      if (lse_s[r] == neg_inf || (s.causal && j > i)) continue;  // out of range, or hidden
      const float* qi = qs + r * DMAX;
      const float* doi = dos + r * DMAX;
      float sij = 0.f, dp = 0.f;
#pragma unroll
      for (int c = 0; c < DMAX; ++c) sij += qi[c] * kj[c], dp += doi[c] * vj[c];
      const float p = expf(s.scale * sij - lse_s[r]);
      const float ds = p * (dp - delta_s[r]);
#pragma unroll
      for (int c = 0; c < DMAX; ++c) dv[c] += p * doi[c], dk[c] += ds * qi[c];
    }
  }
  if (j >= s.tk) return;
#pragma unroll
  for (int c = 0; c < DMAX; ++c) {
    if (c >= s.d) break;
    grad_k[(bh * s.tk + j) * s.d + c] = s.scale * dk[c];
    grad_v[(bh * s.tk + j) * s.d + c] = dv[c];
  }
}

// One thread per query i: dQ_i = scale * sum_j ds_ij k_j.
template <int DMAX>
__global__ void grad_q_kernel(AttentionShape s, const float* q, const float* k, const float* v,
                              const uint8_t* pad, const float* grad_out, const float* lse,
                              const float* delta, float* grad_q) {
  float* shared = dynamic_shared_memory<float>();
  constexpr int kOwnWidth = DMAX + 1;
  float* q_own = shared;                              // [kRowsPerBlock][DMAX + 1]
  float* do_own = q_own + kRowsPerBlock * kOwnWidth;  // [kRowsPerBlock][DMAX + 1]
  float* ks = do_own + kRowsPerBlock * kOwnWidth;     // [kTile][DMAX]
  float* vs = ks + kTile * DMAX;                      // [kTile][DMAX]
  uint8_t* visible = reinterpret_cast<uint8_t*>(vs + kTile * DMAX);

  const int64_t bh = blockIdx.y, b = bh / s.heads;
  const int64_t q0 = int64_t(blockIdx.x) * kRowsPerBlock, i = q0 + threadIdx.x;
  const uint8_t* pad_row = pad ? pad + b * s.tk : nullptr;
  const float* kb = k + bh * s.tk * s.d;
  const float* vb = v + bh * s.tk * s.d;
  load_tile(q_own, kOwnWidth, q + bh * s.tq * s.d, q0, kRowsPerBlock, s.tq, s.d, DMAX);
  load_tile(do_own, kOwnWidth, grad_out + bh * s.tq * s.d, q0, kRowsPerBlock, s.tq, s.d, DMAX);
  const float* qi = q_own + threadIdx.x * kOwnWidth;
  const float* doi = do_own + threadIdx.x * kOwnWidth;

  const float neg_inf = -std::numeric_limits<float>::infinity();
  const float lse_i = i < s.tq ? lse[bh * s.tq + i] : neg_inf;
  const float delta_i = i < s.tq ? delta[bh * s.tq + i] : 0.f;
  const bool active = lse_i != neg_inf;  // in range and sees at least one key

  float dq[DMAX];
#pragma unroll
  for (int c = 0; c < DMAX; ++c) dq[c] = 0.f;

  const int64_t key_end = s.causal ? min(s.tk, q0 + kRowsPerBlock) : s.tk;
  for (int64_t k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();
    load_tile(ks, DMAX, kb, k0, kTile, s.tk, s.d, DMAX);
    load_tile(vs, DMAX, vb, k0, kTile, s.tk, s.d, DMAX);
    for (int jj = threadIdx.x; jj < kTile; jj += blockDim.x)
      visible[jj] = key_visible(k0 + jj, s.tk, pad_row);
    __syncthreads();
    if (!active) continue;
    for (int jj = 0; jj < kTile; ++jj) {
      if (!visible[jj] || (s.causal && k0 + jj > i)) continue;
      const float* kj = ks + jj * DMAX;
      const float* vj = vs + jj * DMAX;
      float sij = 0.f, dp = 0.f;
#pragma unroll
      for (int c = 0; c < DMAX; ++c) sij += qi[c] * kj[c], dp += doi[c] * vj[c];
      const float ds = expf(s.scale * sij - lse_i) * (dp - delta_i);
#pragma unroll
      for (int c = 0; c < DMAX; ++c) dq[c] += ds * kj[c];
    }
  }
  if (i >= s.tq) return;
#pragma unroll
  for (int c = 0; c < DMAX; ++c)
    if (c < s.d) grad_q[(bh * s.tq + i) * s.d + c] = s.scale * dq[c];
}

// ---- host side --------------------------------------------------------------------------------

size_t forward_shared_bytes(int dmax) {
  return sizeof(float) * (2 * kTile * dmax + kRowsPerBlock * (kTile + 1)) + kTile;
}
size_t grad_kv_shared_bytes(int dmax) {
  return sizeof(float) * (2 * kRowsPerBlock * (dmax + 1) + 2 * kTile * dmax + 2 * kTile);
}
size_t grad_q_shared_bytes(int dmax) {
  return sizeof(float) * (2 * kRowsPerBlock * (dmax + 1) + 2 * kTile * dmax) + kTile;
}

// One thread per row of the block.
template <typename Kernel, typename... Args>
void launch(Kernel kernel, dim3 grid, size_t bytes, Args... args) {
  flash::launch_with_shared_memory(kernel, grid, kRowsPerBlock, bytes, args...);
}

// Runs f.template operator()<DMAX>() with the smallest supported DMAX >= d.
template <typename F>
void with_head_width(int64_t d, F&& f) {
  if (d <= 32) return f.template operator()<32>();
  if (d <= 64) return f.template operator()<64>();
  return f.template operator()<128>();
}

unsigned row_blocks(int64_t rows) { return unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock); }

}  // namespace

namespace flash {

void check_attention_tensor(const Tensor& t, const char* what, const Shape& shape) {
  QKV_CHECK(t.defined(), "flash_attention", what, " is undefined");
  QKV_CHECK(t.device().is_cuda(), "flash_attention", what, " must be on the CUDA device, it is on ",
            t.device().str());
  QKV_CHECK(t.dtype() == DType::f32, "flash_attention", what, " must be float32, got ",
            dtype_name(t.dtype()));
  QKV_CHECK(t.is_contiguous(), "flash_attention", what, " must be contiguous");
  QKV_CHECK(t.shape() == shape, "flash_attention", what, " has shape ", shape_str(t.shape()),
            ", expected ", shape_str(shape));
}

AttentionShape attention_shape(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& mask, bool causal, double scale) {
  QKV_CHECK(q.defined() && q.dim() == 4, "flash_attention", "q must be [B, H, T, d]");
  QKV_CHECK(k.defined() && k.dim() == 4, "flash_attention", "k must be [B, H, T, d]");
  const int64_t batch = q.size(0), heads = q.size(1), tq = q.size(2), d = q.size(3);
  const int64_t tk = k.size(2);
  check_attention_tensor(q, "q", q.shape());
  check_attention_tensor(k, "k", {batch, heads, tk, d});
  check_attention_tensor(v, "v", {batch, heads, tk, d});
  QKV_CHECK(d >= 1 && d <= 128, "flash_attention", "head dimension ", d,
            " is not supported (1..128)");
  QKV_CHECK(batch * heads < 65536, "flash_attention", "B * H = ", batch * heads,
            " exceeds the grid limit of 65535");
  if (mask.defined()) {
    QKV_CHECK(mask.dtype() == DType::b8 && mask.device().is_cuda() && mask.is_contiguous() &&
                  mask.shape() == Shape({batch, tk}),
              "flash_attention",
              "key_padding_mask must be a contiguous bool [B, Tk] = ", shape_str({batch, tk}),
              " tensor on the CUDA device, got ", dtype_name(mask.dtype()), " ",
              shape_str(mask.shape()));
  }
  return {heads, tq, tk, d, float(scale), causal};
}

const uint8_t* mask_data(const Tensor& mask) {
  return mask.defined() ? mask.data<uint8_t>() : nullptr;
}

Tensor row_deltas(const Tensor& grad_out, const Tensor& out, bool round_grad_out_to_bf16) {
  const int64_t d = out.size(-1), rows = out.numel() / std::max<int64_t>(d, 1);
  Tensor delta = Tensor::empty({rows}, DType::f32, out.device());
  if (rows == 0) return delta;
  QKV_LAUNCH(delta_kernel, blocks_for(rows), kThreads, 0, stream())
  (rows, d, grad_out.data<float>(), out.data<float>(), round_grad_out_to_bf16, delta.data<float>());
  QKV_CUDA_CHECK_LAUNCH();
  return delta;
}

}  // namespace flash

using flash::attention_shape;
using flash::check_attention_tensor;
using flash::mask_data;

void flash_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                             const Tensor& key_padding_mask, bool causal, double scale,
                             const Tensor& out, const Tensor& lse) {
  const AttentionShape s = attention_shape(q, k, v, key_padding_mask, causal, scale);
  const int64_t bh = q.size(0) * q.size(1);
  check_attention_tensor(out, "out", q.shape());
  check_attention_tensor(lse, "lse", {q.size(0), q.size(1), s.tq});
  if (bh == 0 || s.tq == 0) return;
  const dim3 grid(row_blocks(s.tq), unsigned(bh));
  with_head_width(s.d, [&]<int DMAX>() {
    launch(forward_kernel<DMAX>, grid, forward_shared_bytes(DMAX), s, q.data<float>(),
           k.data<float>(), v.data<float>(), mask_data(key_padding_mask), out.data<float>(),
           lse.data<float>());
  });
}

void flash_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                              const Tensor& key_padding_mask, bool causal, double scale,
                              const Tensor& out, const Tensor& lse, const Tensor& grad_out,
                              const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v) {
  const AttentionShape s = attention_shape(q, k, v, key_padding_mask, causal, scale);
  const int64_t bh = q.size(0) * q.size(1);
  check_attention_tensor(out, "out", q.shape());
  check_attention_tensor(grad_out, "grad_out", q.shape());
  check_attention_tensor(lse, "lse", {q.size(0), q.size(1), s.tq});
  check_attention_tensor(grad_q, "grad_q", q.shape());
  check_attention_tensor(grad_k, "grad_k", k.shape());
  check_attention_tensor(grad_v, "grad_v", v.shape());
  if (bh == 0) return;
  if (s.tq == 0) {  // no query: nothing flows back to the keys
    cuda_backend().fill(grad_k, 0.0);
    cuda_backend().fill(grad_v, 0.0);
    return;
  }
  const Tensor delta = flash::row_deltas(grad_out, out, /*round_grad_out_to_bf16=*/false);
  with_head_width(s.d, [&]<int DMAX>() {
    if (s.tk > 0)
      launch(grad_kv_kernel<DMAX>, dim3(row_blocks(s.tk), unsigned(bh)), grad_kv_shared_bytes(DMAX),
             s, q.data<float>(), k.data<float>(), v.data<float>(), mask_data(key_padding_mask),
             grad_out.data<float>(), lse.data<float>(), delta.data<float>(), grad_k.data<float>(),
             grad_v.data<float>());
    launch(grad_q_kernel<DMAX>, dim3(row_blocks(s.tq), unsigned(bh)), grad_q_shared_bytes(DMAX), s,
           q.data<float>(), k.data<float>(), v.data<float>(), mask_data(key_padding_mask),
           grad_out.data<float>(), lse.data<float>(), delta.data<float>(), grad_q.data<float>());
  });
}

// ---- the Backend hook: how nn's efficient_attention reaches these kernels ----------------------

bool CudaBackend::supports_fused_attention(DType dtype, int64_t head_dim,
                                           int64_t batch_heads) const {
  return dtype == DType::f32 && head_dim >= 1 && head_dim <= 128 && batch_heads < 65536;
}

void CudaBackend::fused_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                          const Tensor& key_padding_mask, bool causal, double scale,
                                          const Tensor& out, const Tensor& lse) {
  // Under Autocast(bf16) the products run on tensor cores, as matmul's do (engine/autocast.h);
  // the autograd node replays its backward under the same dtype, so both halves agree.
  if (autocast_dtype() == DType::bf16)
    return flash_attention_forward_bf16(q, k, v, key_padding_mask, causal, scale, out, lse);
  flash_attention_forward(q, k, v, key_padding_mask, causal, scale, out, lse);
}

void CudaBackend::fused_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                           const Tensor& key_padding_mask, bool causal,
                                           double scale, const Tensor& out, const Tensor& lse,
                                           const Tensor& grad_out, const Tensor& grad_q,
                                           const Tensor& grad_k, const Tensor& grad_v) {
  if (autocast_dtype() == DType::bf16)
    return flash_attention_backward_bf16(q, k, v, key_padding_mask, causal, scale, out, lse,
                                         grad_out, grad_q, grad_k, grad_v);
  flash_attention_backward(q, k, v, key_padding_mask, causal, scale, out, lse, grad_out, grad_q,
                           grad_k, grad_v);
}

}  // namespace qkv::cuda
