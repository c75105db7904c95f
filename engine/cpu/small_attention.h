// Attention on small float32 problems in one tile, on AVX-512 registers: the CPU attention
// kernel's path (engine/cpu/attention_kernels.cpp) for T, S, d, dv <= 64.
//
// Why it exists: a small model's heads are problems of a few microseconds of arithmetic (the
// translation model's are 20 x 20 x 32), and the generic tiled kernel spends more than that
// around the arithmetic: a GEMM call per product (dispatch, packing a transposed operand each
// time), scalar softmax, mask and dropout loops, buffers per tile. Here one (batch, head) problem
// is one tile: K^T (V^T for the backward) packed once into an aligned scratch buffer, a score
// row in at most four zmm vectors, the softmax vectorized over the row (its maxima and sums
// reduced sixteen rows at a time), masks and dropout as 64-bit words of visible and kept keys per
// query row, and the products register-blocked loops (up to 16 zmm accumulators: 8 rows x 32
// columns, 4 rows x 64).
//
// What it assumes: float32; 1 <= T, S, d, dv <= 64 (small_attention_fits); a CPU with AVX-512F
// (small_attention_enabled says so); the caller has turned masks and patterns into the visible
// words and dropout into the kept words, drawn from the counters the generic path uses
// (small_attention_kept_words), so both paths drop the same weights. The gradients are written,
// not accumulated: one problem is one tile.
//
// What it keeps: when the caller hands the forward a buffer for them, the attention weights P
// (T x S floats, before dropout), which the backward then reads instead of recomputing the scores
// and their exponentials; with at most 64 keys that is at most 64 floats per query row.
#pragma once

#include <cstdint>

namespace qkv::cpu {

// One (batch, head) problem, its rows read in place: row r of q starts at q + r * ldq (likewise
// k, v), each row holding its d (dv for v) contiguous values.
struct SmallAttention {
  int64_t T = 0, S = 0, d = 0, dv = 0;
  float scale = 1;
  const float* q = nullptr;
  int64_t ldq = 0;
  const float* k = nullptr;
  int64_t ldk = 0;
  const float* v = nullptr;
  int64_t ldv = 0;
  const uint64_t* visible = nullptr;  // T words: bit s set when query t may attend to key s
  // Dropout: T words, bit s set when weight (t, s) is kept (and scaled by kept_scale = 1 / (1 -
  // p)); nullptr without dropout.
  const uint64_t* kept = nullptr;
  float kept_scale = 1;
};

// Whether a problem of these sizes fits the path.
bool small_attention_fits(int64_t T, int64_t S, int64_t d, int64_t dv);

// Whether the path runs on this machine: the CPU has AVX-512F and it is not turned off.
bool small_attention_enabled();

// Turns the path off (the generic kernel then takes every problem) or back on; for tests that
// compare the two paths. Where the CPU lacks AVX-512F it stays off.
void set_small_attention_enabled(bool on);

// words[r] (r < rows), bit s: whether factors[r * S + s] is nonzero, for s < S <= 64. Turns
// rows of a Bernoulli fill (any nonzero value for a kept weight) into SmallAttention::kept.
void small_attention_kept_words(const float* factors, int64_t rows, int64_t S, uint64_t* words);

// out (T rows of dv, row stride ldo) = (kept factors x) P v with P = softmax(q k^T * scale, over
// visible keys), lse[t] = the log-sum-exp of row t's visible scaled scores, and, when weights is
// not null, weights[t * S + s] = P[t][s]. A row with no visible key gets zeros and lse -inf.
void small_attention_forward(const SmallAttention& a, float* out, int64_t ldo, float* lse,
                             float* weights);

// The gradients of q, k and v (written into gq, gk, gv) given the forward's out and the output's
// gradient gout, and either the weights the forward kept (P, row stride S) or, when weights is
// null, its lse, from which P is recomputed.
void small_attention_backward(const SmallAttention& a, const float* out, int64_t ldo,
                              const float* gout, int64_t ldgo, const float* lse,
                              const float* weights, float* gq, int64_t ldgq, float* gk,
                              int64_t ldgk, float* gv, int64_t ldgv);

}  // namespace qkv::cpu
