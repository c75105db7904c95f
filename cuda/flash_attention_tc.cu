// Flash attention on tensor cores: bf16 products, float32 accumulation and softmax.
//
// The same algorithm as cuda/flash_attention.cu (an online softmax over key tiles forward; the
// FlashAttention-2 backward that recomputes p_ij from the saved log-sum-exp, one kernel for
// dK/dV and one for dQ, no atomics), but the matrix products run as WMMA 16x16x16 bf16 tiles:
//
// - a block of 4 warps owns 64 rows (queries, or keys in the dK/dV kernel), 16 per warp, and
//   streams tiles of 64 rows of the other operand through shared memory;
// - q, k, v and dO are float32 in global memory and rounded to bf16 as a tile is loaded; the
//   head width is zero-padded to D = 64 or 128, so any d <= 128 works;
// - a warp's score tile S (16 x 64, float32) goes through shared memory, where each pair of lanes
//   owns one row for the softmax (masks, running max and sum); the probabilities P and, in the
//   backward, dS = P (dP - delta) are rounded to bf16 before their products, as FlashAttention
//   does;
// - the forward's output accumulator lives in shared memory (each row is rescaled by
//   exp(m_old - m_new) there, then loaded as a WMMA accumulator for P V); the backward's dK, dV
//   and dQ accumulators stay in registers (WMMA fragments) across the whole loop.
//
// Needs sm_80 or newer (bf16 WMMA). Nothing here has run on a GPU yet: tests/cuda compares it
// with attention composed from float64 ops on bf16-rounded inputs.
#include <cuda_bf16.h>
#include <mma.h>

#include <cmath>
#include <limits>

#include "cuda/flash_attention.h"
#include "cuda/flash_attention_internal.cuh"
#include "cuda/launch.cuh"

namespace qkv::cuda {

namespace {

using flash::AttentionShape;
namespace wmma = nvcuda::wmma;
using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kBlockThreads = 32 * kWarps;
constexpr int kRows = 16 * kWarps;  // rows a block owns (queries, or keys for dK/dV)
constexpr int kTile = 64;           // rows of the streamed operand per tile
// float32 score tiles: ldm a multiple of 4 (every fragment's base stays 32-byte aligned: warps
// start 16 rows apart, 4352 bytes, and column blocks 64 bytes apart)
constexpr int kScoreLd = kTile + 4;
constexpr int kProbLd = kTile + 8;  // bf16 P / dS tiles: ldm a multiple of 8

using FragA = wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, wmma::row_major>;
using FragB = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::row_major>;
using FragBt = wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, wmma::col_major>;  // B^T in place
using FragC = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// Shared-memory layout of one kernel: bf16 row tiles [64][D + 8], float32 score tiles
// [64][kScoreLd], bf16 probability tiles [64][kProbLd], and small per-row arrays. Every piece
// starts at a multiple of 128 bytes, which WMMA's 32-byte alignment needs.
template <int D>
struct Layout {
  static constexpr int kRowLd = D + 8;  // bf16 row tiles
  static constexpr int kOutLd = D + 4;  // float32 [64][D] accumulator tiles
  static constexpr size_t kRowTile = sizeof(bf16) * kTile * kRowLd;
  static constexpr size_t kScoreTile = sizeof(float) * kTile * kScoreLd;
  static constexpr size_t kProbTile = sizeof(bf16) * kTile * kProbLd;
  static constexpr size_t kOutTile = sizeof(float) * kTile * kOutLd;
  static constexpr size_t kVector = sizeof(float) * kTile;  // one float per row
};

constexpr size_t round_up_128(size_t bytes) { return (bytes + 127) / 128 * 128; }

// Bump allocator over the dynamic shared memory.
struct SharedCarver {
  unsigned char* next;
  template <typename T>
  __device__ T* take(size_t bytes) {
    T* p = reinterpret_cast<T*>(next);
    next += round_up_128(bytes);
    return p;
  }
};

// Rows [row0, row0 + kTile) of a [t, d] float32 matrix, rounded to bf16, into a [kTile][D + 8]
// tile, zero beyond t and d. All threads of the block take part.
template <int D>
__device__ void load_rows_bf16(bf16* tile, const float* src, int64_t row0, int64_t t, int64_t d) {
  constexpr int ld = D + 8;  // Layout<D>::kRowLd
  for (int idx = threadIdx.x; idx < kTile * D; idx += blockDim.x) {
    const int r = idx / D, c = idx % D;
    const int64_t row = row0 + r;
    tile[r * ld + c] = __float2bfloat16((row < t && c < d) ? src[row * d + c] : 0.f);
  }
}

// Whether key j may be attended to at all (in range and not padding).
__device__ bool key_visible(int64_t j, int64_t tk, const uint8_t* pad_row) {
  return j < tk && !(pad_row && pad_row[j]);
}

// out (16 x 64, row-major, ld kScoreLd) = a (16 x D, ld a_ld) times b^T, where b is 64 x D
// (ld b_ld): the scores of 16 rows against a tile of 64.
template <int D>
__device__ void product_with_transpose(float* out, const bf16* a, int a_ld, const bf16* b,
                                       int b_ld) {
  FragA fa[D / 16];  // the 16 rows of a, loaded once for the 4 column blocks
  FragBt fb;
  FragC acc;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) wmma::load_matrix_sync(fa[kk], a + kk * 16, a_ld);
#pragma unroll
  for (int n = 0; n < kTile / 16; ++n) {
    wmma::fill_fragment(acc, 0.f);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      wmma::load_matrix_sync(fb, b + n * 16 * b_ld + kk * 16, b_ld);
      wmma::mma_sync(acc, fa[kk], fb, acc);
    }
    wmma::store_matrix_sync(out + n * 16, acc, kScoreLd, wmma::mem_row_major);
  }
}

// acc[n] += p (16 x 64, bf16, ld kProbLd) times rows (64 x D, ld rows_ld), for the D/16 column
// blocks n.
template <int D>
__device__ void accumulate_product(FragC (&acc)[D / 16], const bf16* p, const bf16* rows,
                                   int rows_ld) {
  FragA fa;
  FragB fb;
#pragma unroll
  for (int kk = 0; kk < kTile / 16; ++kk) {
    wmma::load_matrix_sync(fa, p + kk * 16, kProbLd);
#pragma unroll
    for (int n = 0; n < D / 16; ++n) {
      wmma::load_matrix_sync(fb, rows + kk * 16 * rows_ld + n * 16, rows_ld);
      wmma::mma_sync(acc[n], fa, fb, acc[n]);
    }
  }
}

// Writes a warp's 16 x D accumulators, times `scale`, to rows [row0, row0 + 16) of a [t, d]
// float32 matrix, through the warp's 16 rows of a [64][kOutLd] shared tile.
template <int D>
__device__ void store_rows(FragC (&acc)[D / 16], float* staging, float* dst, int64_t row0,
                           int64_t t, int64_t d, float scale) {
  constexpr int ld = Layout<D>::kOutLd;
#pragma unroll
  for (int n = 0; n < D / 16; ++n)
    wmma::store_matrix_sync(staging + n * 16, acc[n], ld, wmma::mem_row_major);
  __syncwarp();
  const int lane = threadIdx.x % 32;
  for (int idx = lane; idx < 16 * D; idx += 32) {
    const int r = idx / D, c = idx % D;
    if (row0 + r < t && c < d) dst[(row0 + r) * d + c] = scale * staging[r * ld + c];
  }
}

// ---- forward ----------------------------------------------------------------------------------

template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    forward_tc_kernel(AttentionShape s, const float* q, const float* k, const float* v,
                      const uint8_t* pad, float* out, float* lse) {
  using L = Layout<D>;
  unsigned char* shared = dynamic_shared_memory<unsigned char>();
  SharedCarver carve{shared};
  bf16* qs = carve.take<bf16>(L::kRowTile);
  bf16* ks = carve.take<bf16>(L::kRowTile);
  bf16* vs = carve.take<bf16>(L::kRowTile);
  float* scores = carve.take<float>(L::kScoreTile);
  bf16* probs = carve.take<bf16>(L::kProbTile);
  float* acc_out = carve.take<float>(L::kOutTile);
  uint8_t* visible = carve.take<uint8_t>(kTile);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.y, b = bh / s.heads;
  const int64_t q0 = int64_t(blockIdx.x) * kRows;
  const float* kb = k + bh * s.tk * s.d;
  const float* vb = v + bh * s.tk * s.d;
  const uint8_t* pad_row = pad ? pad + b * s.tk : nullptr;

  load_rows_bf16<D>(qs, q + bh * s.tq * s.d, q0, s.tq, s.d);
  for (int idx = threadIdx.x; idx < kRows * L::kOutLd; idx += blockDim.x) acc_out[idx] = 0.f;
  __syncthreads();  // even with no key tile at all, the zeros are read below

  // Lanes 2r and 2r+1 own row r of the warp's 16 (row 16 * warp + r of the block), one the even
  // columns and one the odd (interleaved, so that the pair reads different shared-memory banks).
  const int my_row = 16 * warp + lane / 2, col0 = lane % 2;
  const int64_t i = q0 + my_row;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float m = neg_inf, l = 0.f;
  float* my_scores = scores + my_row * kScoreLd;
  bf16* my_probs = probs + my_row * kProbLd;
  float* my_out = acc_out + my_row * L::kOutLd;

  const int64_t key_end = s.causal ? min(s.tk, q0 + kRows) : s.tk;
  for (int64_t k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();  // the previous tiles are no longer read
    load_rows_bf16<D>(ks, kb, k0, s.tk, s.d);
    load_rows_bf16<D>(vs, vb, k0, s.tk, s.d);
    for (int j = threadIdx.x; j < kTile; j += blockDim.x)
      visible[j] = key_visible(k0 + j, s.tk, pad_row);
    __syncthreads();

    // S = Q_w K^T for this warp's 16 queries
    product_with_transpose<D>(scores + 16 * warp * kScoreLd, qs + 16 * warp * L::kRowLd, L::kRowLd,
                              ks, L::kRowLd);
    __syncwarp();

    // the online softmax over the tile, one row per lane pair
    float tile_max = neg_inf;
    for (int c = col0; c < kTile; c += 2) {
      const bool seen = visible[c] && !(s.causal && k0 + c > i);
      const float sc = seen ? s.scale * my_scores[c] : neg_inf;
      my_scores[c] = sc;
      tile_max = fmaxf(tile_max, sc);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    const float m_new = fmaxf(m, tile_max);
    // Nothing visible so far: keep everything at zero (exp(-inf - -inf) would be NaN).
    const float correction = m_new == neg_inf ? 1.f : expf(m - m_new);
    float row_sum = 0.f;
    for (int c = col0; c < kTile; c += 2) {
      const float p = m_new == neg_inf ? 0.f : expf(my_scores[c] - m_new);
      my_probs[c] = __float2bfloat16(p);
      row_sum += p;
    }
    row_sum += __shfl_xor_sync(0xffffffffu, row_sum, 1);
    l = l * correction + row_sum;
    m = m_new;
    for (int c = lane % 2; c < D; c += 2) my_out[c] *= correction;
    __syncwarp();

    // O_w += P_w V, the accumulator read from and written back to shared memory
    FragC acc[D / 16];
#pragma unroll
    for (int n = 0; n < D / 16; ++n)
      wmma::load_matrix_sync(acc[n], acc_out + 16 * warp * L::kOutLd + n * 16, L::kOutLd,
                             wmma::mem_row_major);
    accumulate_product<D>(acc, probs + 16 * warp * kProbLd, vs, L::kRowLd);
#pragma unroll
    for (int n = 0; n < D / 16; ++n)
      wmma::store_matrix_sync(acc_out + 16 * warp * L::kOutLd + n * 16, acc[n], L::kOutLd,
                              wmma::mem_row_major);
    __syncwarp();
  }
  __syncwarp();
  if (i >= s.tq) return;
  const float inv = l > 0.f ? 1.f / l : 0.f;  // no visible key: zeros, like softmax of all -inf
  for (int c = lane % 2; c < D; c += 2)
    if (c < s.d) out[(bh * s.tq + i) * s.d + c] = my_out[c] * inv;
  if (lane % 2 == 0) lse[bh * s.tq + i] = l > 0.f ? m + logf(l) : neg_inf;
}

// ---- backward: dK and dV, a block per 64 keys -------------------------------------------------

// dV_j = sum_i p_ij dO_i and dK_j = scale * sum_i ds_ij q_i with ds_ij = p_ij (dO_i . v_j -
// delta_i): per query tile, S^T = K_w Q^T and dP^T = V_w dO^T give P^T and dS^T (16 keys x 64
// queries), then dV_w += P^T dO and dK_w += dS^T Q.
template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    grad_kv_tc_kernel(AttentionShape s, const float* q, const float* k, const float* v,
                      const uint8_t* pad, const float* grad_out, const float* lse,
                      const float* delta, float* grad_k, float* grad_v) {
  using L = Layout<D>;
  unsigned char* shared = dynamic_shared_memory<unsigned char>();
  SharedCarver carve{shared};
  bf16* ks = carve.take<bf16>(L::kRowTile);
  bf16* vs = carve.take<bf16>(L::kRowTile);
  bf16* qs = carve.take<bf16>(L::kRowTile);
  bf16* dos = carve.take<bf16>(L::kRowTile);
  // P^T and dP^T in float32; after the loop the same bytes stage the outputs
  float* pt = carve.take<float>(L::kScoreTile + L::kScoreTile);
  float* dpt = pt + kTile * kScoreLd;
  bf16* pt16 = carve.take<bf16>(L::kProbTile);
  bf16* dst16 = carve.take<bf16>(L::kProbTile);
  float* lse_s = carve.take<float>(L::kVector);
  float* delta_s = carve.take<float>(L::kVector);
  uint8_t* key_ok = carve.take<uint8_t>(kRows);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.y, b = bh / s.heads;
  const int64_t k0 = int64_t(blockIdx.x) * kRows;
  const uint8_t* pad_row = pad ? pad + b * s.tk : nullptr;
  const float* qb = q + bh * s.tq * s.d;
  const float* dob = grad_out + bh * s.tq * s.d;
  load_rows_bf16<D>(ks, k + bh * s.tk * s.d, k0, s.tk, s.d);
  load_rows_bf16<D>(vs, v + bh * s.tk * s.d, k0, s.tk, s.d);
  for (int r = threadIdx.x; r < kRows; r += blockDim.x)
    key_ok[r] = key_visible(k0 + r, s.tk, pad_row);

  FragC dk[D / 16], dv[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dk[n], 0.f), wmma::fill_fragment(dv[n], 0.f);

  const int my_row = 16 * warp + lane / 2, col0 = lane % 2;  // as in the forward
  const int64_t j = k0 + my_row;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float* my_pt = pt + my_row * kScoreLd;
  float* my_dpt = dpt + my_row * kScoreLd;

  // With a causal mask, queries before this block's first key see none of its keys.
  const int64_t q_begin = s.causal ? k0 : 0;
  for (int64_t q0 = q_begin; q0 < s.tq; q0 += kTile) {
    __syncthreads();
    load_rows_bf16<D>(qs, qb, q0, s.tq, s.d);
    load_rows_bf16<D>(dos, dob, q0, s.tq, s.d);
    for (int r = threadIdx.x; r < kTile; r += blockDim.x) {
      const bool in = q0 + r < s.tq;
      lse_s[r] = in ? lse[bh * s.tq + q0 + r] : neg_inf;
      delta_s[r] = in ? delta[bh * s.tq + q0 + r] : 0.f;
    }
    __syncthreads();

    product_with_transpose<D>(pt + 16 * warp * kScoreLd, ks + 16 * warp * L::kRowLd, L::kRowLd, qs,
                              L::kRowLd);
    product_with_transpose<D>(dpt + 16 * warp * kScoreLd, vs + 16 * warp * L::kRowLd, L::kRowLd,
                              dos, L::kRowLd);
    __syncwarp();
    for (int c = col0; c < kTile; c += 2) {
      const int64_t i = q0 + c;
      const bool seen = key_ok[my_row] && lse_s[c] != neg_inf && !(s.causal && j > i);
      const float p = seen ? expf(s.scale * my_pt[c] - lse_s[c]) : 0.f;
      pt16[my_row * kProbLd + c] = __float2bfloat16(p);
      dst16[my_row * kProbLd + c] = __float2bfloat16(p * (my_dpt[c] - delta_s[c]));
    }
    __syncwarp();
    accumulate_product<D>(dv, pt16 + 16 * warp * kProbLd, dos, L::kRowLd);
    accumulate_product<D>(dk, dst16 + 16 * warp * kProbLd, qs, L::kRowLd);
  }
  __syncthreads();  // the score tiles become staging for the outputs
  float* staging = pt + 16 * warp * L::kOutLd;
  store_rows<D>(dv, staging, grad_v + bh * s.tk * s.d, k0 + 16 * warp, s.tk, s.d, 1.f);
  __syncwarp();
  store_rows<D>(dk, staging, grad_k + bh * s.tk * s.d, k0 + 16 * warp, s.tk, s.d, s.scale);
}

// ---- backward: dQ, a block per 64 queries -----------------------------------------------------

// dQ_i = scale * sum_j ds_ij k_j: per key tile, S = Q_w K^T and dP = dO_w V^T give dS (16 queries
// x 64 keys), then dQ_w += dS K.
template <int D>
__global__ void __launch_bounds__(kBlockThreads)
    grad_q_tc_kernel(AttentionShape s, const float* q, const float* k, const float* v,
                     const uint8_t* pad, const float* grad_out, const float* lse,
                     const float* delta, float* grad_q) {
  using L = Layout<D>;
  unsigned char* shared = dynamic_shared_memory<unsigned char>();
  SharedCarver carve{shared};
  bf16* qs = carve.take<bf16>(L::kRowTile);
  bf16* dos = carve.take<bf16>(L::kRowTile);
  bf16* ks = carve.take<bf16>(L::kRowTile);
  bf16* vs = carve.take<bf16>(L::kRowTile);
  float* sc = carve.take<float>(L::kScoreTile + L::kScoreTile);
  float* dp = sc + kTile * kScoreLd;
  bf16* ds16 = carve.take<bf16>(L::kProbTile);
  uint8_t* visible = carve.take<uint8_t>(kTile);

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t bh = blockIdx.y, b = bh / s.heads;
  const int64_t q0 = int64_t(blockIdx.x) * kRows;
  const uint8_t* pad_row = pad ? pad + b * s.tk : nullptr;
  const float* kb = k + bh * s.tk * s.d;
  const float* vb = v + bh * s.tk * s.d;
  load_rows_bf16<D>(qs, q + bh * s.tq * s.d, q0, s.tq, s.d);
  load_rows_bf16<D>(dos, grad_out + bh * s.tq * s.d, q0, s.tq, s.d);

  const int my_row = 16 * warp + lane / 2, col0 = lane % 2;  // as in the forward
  const int64_t i = q0 + my_row;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const float lse_i = i < s.tq ? lse[bh * s.tq + i] : neg_inf;
  const float delta_i = i < s.tq ? delta[bh * s.tq + i] : 0.f;
  float* my_sc = sc + my_row * kScoreLd;
  float* my_dp = dp + my_row * kScoreLd;

  FragC dq[D / 16];
#pragma unroll
  for (int n = 0; n < D / 16; ++n) wmma::fill_fragment(dq[n], 0.f);

  const int64_t key_end = s.causal ? min(s.tk, q0 + kRows) : s.tk;
  for (int64_t k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();
    load_rows_bf16<D>(ks, kb, k0, s.tk, s.d);
    load_rows_bf16<D>(vs, vb, k0, s.tk, s.d);
    for (int jj = threadIdx.x; jj < kTile; jj += blockDim.x)
      visible[jj] = key_visible(k0 + jj, s.tk, pad_row);
    __syncthreads();

    product_with_transpose<D>(sc + 16 * warp * kScoreLd, qs + 16 * warp * L::kRowLd, L::kRowLd, ks,
                              L::kRowLd);
    product_with_transpose<D>(dp + 16 * warp * kScoreLd, dos + 16 * warp * L::kRowLd, L::kRowLd, vs,
                              L::kRowLd);
    __syncwarp();
    for (int c = col0; c < kTile; c += 2) {
      const bool seen = visible[c] && lse_i != neg_inf && !(s.causal && k0 + c > i);
      const float p = seen ? expf(s.scale * my_sc[c] - lse_i) : 0.f;
      ds16[my_row * kProbLd + c] = __float2bfloat16(p * (my_dp[c] - delta_i));
    }
    __syncwarp();
    accumulate_product<D>(dq, ds16 + 16 * warp * kProbLd, ks, L::kRowLd);
  }
  __syncthreads();
  store_rows<D>(dq, sc + 16 * warp * L::kOutLd, grad_q + bh * s.tq * s.d, q0 + 16 * warp, s.tq, s.d,
                s.scale);
}

// ---- host side --------------------------------------------------------------------------------

template <int D>
size_t forward_bytes() {
  using L = Layout<D>;
  return 3 * round_up_128(L::kRowTile) + round_up_128(L::kScoreTile) + round_up_128(L::kProbTile) +
         round_up_128(L::kOutTile) + round_up_128(kTile);
}
template <int D>
size_t grad_kv_bytes() {
  using L = Layout<D>;
  static_assert(2 * L::kScoreTile >= L::kOutTile, "the output staging reuses the score tiles");
  return 4 * round_up_128(L::kRowTile) + round_up_128(2 * L::kScoreTile) +
         2 * round_up_128(L::kProbTile) + 2 * round_up_128(L::kVector) + round_up_128(kRows);
}
template <int D>
size_t grad_q_bytes() {
  using L = Layout<D>;
  return 4 * round_up_128(L::kRowTile) + round_up_128(2 * L::kScoreTile) +
         round_up_128(L::kProbTile) + round_up_128(kTile);
}

// Four warps per block.
template <typename Kernel, typename... Args>
void launch_tc(Kernel kernel, dim3 grid, size_t bytes, Args... args) {
  flash::launch_with_shared_memory(kernel, grid, kBlockThreads, bytes, args...);
}

template <typename F>
void with_padded_width(int64_t d, F&& f) {
  if (d <= 64) return f.template operator()<64>();
  return f.template operator()<128>();
}

unsigned blocks_of(int64_t rows) { return unsigned((rows + kRows - 1) / kRows); }

}  // namespace

void flash_attention_forward_bf16(const Tensor& q, const Tensor& k, const Tensor& v,
                                  const Tensor& key_padding_mask, bool causal, double scale,
                                  const Tensor& out, const Tensor& lse) {
  const AttentionShape s = flash::attention_shape(q, k, v, key_padding_mask, causal, scale);
  const int64_t bh = q.size(0) * q.size(1);
  flash::check_attention_tensor(out, "out", q.shape());
  flash::check_attention_tensor(lse, "lse", {q.size(0), q.size(1), s.tq});
  if (bh == 0 || s.tq == 0) return;
  with_padded_width(s.d, [&]<int D>() {
    launch_tc(forward_tc_kernel<D>, dim3(blocks_of(s.tq), unsigned(bh)), forward_bytes<D>(), s,
              q.data<float>(), k.data<float>(), v.data<float>(), flash::mask_data(key_padding_mask),
              out.data<float>(), lse.data<float>());
  });
}

void flash_attention_backward_bf16(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const Tensor& key_padding_mask, bool causal, double scale,
                                   const Tensor& out, const Tensor& lse, const Tensor& grad_out,
                                   const Tensor& grad_q, const Tensor& grad_k,
                                   const Tensor& grad_v) {
  const AttentionShape s = flash::attention_shape(q, k, v, key_padding_mask, causal, scale);
  const int64_t bh = q.size(0) * q.size(1);
  flash::check_attention_tensor(out, "out", q.shape());
  flash::check_attention_tensor(grad_out, "grad_out", q.shape());
  flash::check_attention_tensor(lse, "lse", {q.size(0), q.size(1), s.tq});
  flash::check_attention_tensor(grad_q, "grad_q", q.shape());
  flash::check_attention_tensor(grad_k, "grad_k", k.shape());
  flash::check_attention_tensor(grad_v, "grad_v", v.shape());
  if (bh == 0) return;
  if (s.tq == 0) {  // no query: nothing flows back to the keys
    cuda_backend().fill(grad_k, 0.0);
    cuda_backend().fill(grad_v, 0.0);
    return;
  }
  // delta from dO rounded as the kernels multiply it: with one key, dQ and dK are zero up to the
  // rounding of P = exp(s - lse) (the dK/dV kernel recomputes s as K Q^T, in the tensor cores' own
  // summation order, so P may be 1 +- 1 ulp there)
  const Tensor delta = flash::row_deltas(grad_out, out, /*round_grad_out_to_bf16=*/true);
  const uint8_t* pad = flash::mask_data(key_padding_mask);
  with_padded_width(s.d, [&]<int D>() {
    if (s.tk > 0)
      launch_tc(grad_kv_tc_kernel<D>, dim3(blocks_of(s.tk), unsigned(bh)), grad_kv_bytes<D>(), s,
                q.data<float>(), k.data<float>(), v.data<float>(), pad, grad_out.data<float>(),
                lse.data<float>(), delta.data<float>(), grad_k.data<float>(), grad_v.data<float>());
    launch_tc(grad_q_tc_kernel<D>, dim3(blocks_of(s.tq), unsigned(bh)), grad_q_bytes<D>(), s,
              q.data<float>(), k.data<float>(), v.data<float>(), pad, grad_out.data<float>(),
              lse.data<float>(), delta.data<float>(), grad_q.data<float>());
  });
}

}  // namespace qkv::cuda
