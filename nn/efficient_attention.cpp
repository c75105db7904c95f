#include "nn/efficient_attention.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/cpu/gemm.h"
#include "engine/cpu/vec_math.h"
#include "engine/error.h"
#include "engine/parallel.h"
#include "nn/fused_attention.h"

namespace qkv::nn {

namespace {

// The tile products run on the engine's packed GEMM (inside a parallel_for it runs on the calling
// thread) and exponentials on the vectorizable float exp: the two costs of attention.
inline float tile_exp(float x) { return cpu::fast_exp(x); }
inline double tile_exp(double x) { return std::exp(x); }

// Queries and keys per tile when no block size imposes one: 64 x 64 scores stay in L1/L2.
constexpr int64_t kTile = 64;

// One bool mask read in place: element (n, t, s) is data[base[n] + t * st + s * ss].
struct MaskView {
  Tensor expanded;  // keeps the storage alive
  const uint8_t* data = nullptr;
  std::vector<int64_t> base;
  int64_t st = 0, ss = 0;
};

struct Problem {
  int64_t N = 0, T = 0, S = 0, d = 0, dv = 0, tile = kTile;
  double scale = 1;
  std::vector<MaskView> masks;
  AttentionPattern pattern;
  bool elementwise = false;  // any mask or pattern to test per score

  bool blocked(int64_t n, int64_t t, int64_t s) const {
    if (!pattern.allows(t, s)) return true;
    for (const MaskView& m : masks)
      if (m.data[m.base[size_t(n)] + t * m.st + s * m.ss]) return true;
    return false;
  }
};

MaskView mask_view(const Tensor& mask, const Shape& lead, int64_t T, int64_t S) {
  Shape full = lead;
  full.push_back(T);
  full.push_back(S);
  QKV_CHECK(mask.dim() <= int(full.size()), "efficient_attention", "mask ", shape_str(mask.shape()),
            " has more dims than ", shape_str(full));
  Shape padded(full.size() - size_t(mask.dim()), 1);
  padded.insert(padded.end(), mask.shape().begin(), mask.shape().end());
  MaskView m;
  m.expanded = expand(mask.reshape(padded), full);
  m.data = static_cast<const uint8_t*>(m.expanded.raw_data());
  const Strides& st = m.expanded.strides();
  m.st = st[st.size() - 2];
  m.ss = st[st.size() - 1];
  int64_t N = 1;
  for (int64_t x : lead) N *= x;
  for (int64_t n = 0; n < N; ++n) {
    int64_t rest = n, offset = 0;
    for (int i = int(lead.size()) - 1; i >= 0; --i) {
      offset += (rest % lead[size_t(i)]) * st[size_t(i)];
      rest /= lead[size_t(i)];
    }
    m.base.push_back(offset);
  }
  return m;
}

// Scaled, masked scores of queries [t0, t0 + rows) against keys [s0, s0 + cols) into sc (row
// stride tile): one GEMM, Q_tile @ K_tile^T with K read transposed in place.
template <typename F>
void tile_scores(const Problem& p, const F* qn, const F* kn, int64_t n, int64_t t0, int64_t rows,
                 int64_t s0, int64_t cols, F* sc) {
  const int64_t d = p.d, tile = p.tile;
  cpu::gemm<F>(false, true, rows, cols, d, F(p.scale), qn + t0 * d, d, kn + s0 * d, d, F(0), sc,
               tile);
  if (p.elementwise)
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        if (p.blocked(n, t0 + i, s0 + j)) sc[i * tile + j] = -std::numeric_limits<F>::infinity();
}

// Work items (query tiles, or whole problems) per thread chunk: enough multiply-adds that
// handing a chunk to another thread (a few microseconds) pays. One decoding step attends with a
// single query row, and with grain 1 its four heads would be split across threads for ~1 us of
// work each: measured, that made 2-thread KV-cache decoding 1.8x slower than 1 thread.
int64_t grain_for(int64_t macs_per_item) {
  constexpr int64_t kMinMacsPerChunk = int64_t(1) << 16;
  return std::max<int64_t>(1, kMinMacsPerChunk / std::max<int64_t>(1, macs_per_item));
}

template <typename F>
void forward_kernel(const Problem& p, const F* q, const F* k, const F* v, F* out, F* lse) {
  const int64_t T = p.T, S = p.S, d = p.d, dv = p.dv, tile = p.tile;
  const int64_t tiles = (T + tile - 1) / tile;
  const F inf = std::numeric_limits<F>::infinity();
  const int64_t grain = grain_for(std::min(tile, T) * S * (d + dv));
  parallel_for(0, p.N * tiles, grain, [&](int64_t begin, int64_t end) {
    std::vector<F> sc(static_cast<size_t>(tile * tile)), acc(static_cast<size_t>(tile * dv));
    std::vector<F> m(static_cast<size_t>(tile)), l(static_cast<size_t>(tile));
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t n = idx / tiles, t0 = (idx % tiles) * tile, rows = std::min(tile, T - t0);
      const F* qn = q + n * T * d;
      const F* kn = k + n * S * d;
      const F* vn = v + n * S * dv;
      std::fill(m.begin(), m.end(), -inf);
      std::fill(l.begin(), l.end(), F(0));
      std::fill(acc.begin(), acc.end(), F(0));
      for (int64_t s0 = 0; s0 < S; s0 += tile) {
        const int64_t cols = std::min(tile, S - s0);
        if (!p.pattern.tile_visible(t0, t0 + rows, s0, s0 + cols)) continue;  // never computed
        tile_scores(p, qn, kn, n, t0, rows, s0, cols, sc.data());
        // online softmax: rescale what was accumulated when a row's running max grows
        for (int64_t i = 0; i < rows; ++i) {
          F* srow = sc.data() + i * tile;
          F mx = m[size_t(i)];
          for (int64_t j = 0; j < cols; ++j) mx = std::max(mx, srow[j]);
          if (mx == -inf) {  // every key so far blocked: this tile adds nothing to the row
            std::fill(srow, srow + cols, F(0));
            continue;
          }
          const F alpha = tile_exp(m[size_t(i)] - mx);
          F sum = 0;
          _Pragma("omp simd reduction(+ : sum)") for (int64_t j = 0; j < cols; ++j) {
            srow[j] = tile_exp(srow[j] - mx);
            sum += srow[j];
          }
          l[size_t(i)] = l[size_t(i)] * alpha + sum;
          m[size_t(i)] = mx;
          F* a = acc.data() + i * dv;
          for (int64_t c = 0; c < dv; ++c) a[c] *= alpha;
        }
        // acc += P_tile @ V_tile
        cpu::gemm<F>(false, false, rows, dv, cols, F(1), sc.data(), tile, vn + s0 * dv, dv, F(1),
                     acc.data(), dv);
      }
      for (int64_t i = 0; i < rows; ++i) {
        const F li = l[size_t(i)];
        F* o = out + (n * T + t0 + i) * dv;
        for (int64_t c = 0; c < dv; ++c) o[c] = li > 0 ? acc[size_t(i * dv + c)] / li : F(0);
        lse[n * T + t0 + i] = li > 0 ? m[size_t(i)] + std::log(li) : -inf;
      }
    }
  });
}

// gq, gk, gv arrive zeroed. Parallel over the N independent (batch, head) problems, so the
// accumulations into gk and gv never race.
template <typename F>
void backward_kernel(const Problem& p, const F* q, const F* k, const F* v, const F* out,
                     const F* lse, const F* gout, F* gq, F* gk, F* gv) {
  const int64_t T = p.T, S = p.S, d = p.d, dv = p.dv, tile = p.tile;
  const F inf = std::numeric_limits<F>::infinity();
  parallel_for(0, p.N, grain_for(2 * T * S * (d + dv)), [&](int64_t begin, int64_t end) {
    std::vector<F> sc(static_cast<size_t>(tile * tile)), dp(static_cast<size_t>(tile * tile)),
        D(static_cast<size_t>(tile));
    for (int64_t n = begin; n < end; ++n) {
      const F* qn = q + n * T * d;
      const F* kn = k + n * S * d;
      const F* vn = v + n * S * dv;
      for (int64_t t0 = 0; t0 < T; t0 += tile) {
        const int64_t rows = std::min(tile, T - t0);
        const F* go = gout + (n * T + t0) * dv;  // dO of this query tile, [rows, dv]
        for (int64_t i = 0; i < rows; ++i) {
          const F* o = out + (n * T + t0 + i) * dv;
          F s = 0;
          for (int64_t c = 0; c < dv; ++c) s += go[i * dv + c] * o[c];
          D[size_t(i)] = s;  // rowsum(dO * O) = sum_j P_ij dP_ij
        }
        for (int64_t s0 = 0; s0 < S; s0 += tile) {
          const int64_t cols = std::min(tile, S - s0);
          if (!p.pattern.tile_visible(t0, t0 + rows, s0, s0 + cols)) continue;
          tile_scores(p, qn, kn, n, t0, rows, s0, cols, sc.data());
          for (int64_t i = 0; i < rows; ++i) {  // scores -> probabilities in place
            const F L = lse[n * T + t0 + i];
            F* prow = sc.data() + i * tile;
            if (L == -inf) {
              std::fill(prow, prow + cols, F(0));
              continue;
            }
            _Pragma("omp simd") for (int64_t j = 0; j < cols; ++j) prow[j] = tile_exp(prow[j] - L);
          }
          // dV_tile += P^T @ dO ;  dP = dO @ V_tile^T
          cpu::gemm<F>(true, false, cols, dv, rows, F(1), sc.data(), tile, go, dv, F(1),
                       gv + (n * S + s0) * dv, dv);
          cpu::gemm<F>(false, true, rows, cols, dv, F(1), go, dv, vn + s0 * dv, dv, F(0), dp.data(),
                       tile);
          // dS = P * (dP - D) * scale, written over dP
          for (int64_t i = 0; i < rows; ++i) {
            const F* prow = sc.data() + i * tile;
            F* drow = dp.data() + i * tile;
            const F Di = D[size_t(i)];
            _Pragma("omp simd") for (int64_t j = 0; j < cols; ++j) drow[j] =
                prow[j] * (drow[j] - Di) * F(p.scale);
          }
          // dQ_tile += dS @ K_tile ;  dK_tile += dS^T @ Q_tile
          cpu::gemm<F>(false, false, rows, d, cols, F(1), dp.data(), tile, kn + s0 * d, d, F(1),
                       gq + (n * T + t0) * d, d);
          cpu::gemm<F>(true, false, cols, d, rows, F(1), dp.data(), tile, qn + t0 * d, d, F(1),
                       gk + (n * S + s0) * d, d);
        }
      }
    }
  });
}

}  // namespace

bool efficient_attention_supported(const Tensor& q, const Tensor& k, const Tensor& v,
                                   const std::vector<Tensor>& masks,
                                   const AttentionPattern& pattern) {
  if (q.defined() && !q.device().is_cpu())
    return fused_attention_supported(q, k, v, masks, pattern);
  if (q.dim() < 2 || k.dim() != q.dim() || v.dim() != q.dim()) return false;
  if (!q.device().is_cpu() || !k.device().is_cpu() || !v.device().is_cpu()) return false;
  if (q.dtype() != k.dtype() || q.dtype() != v.dtype()) return false;
  if (q.dtype() != DType::f32 && q.dtype() != DType::f64) return false;
  for (int i = 0; i < q.dim() - 2; ++i)
    if (k.size(i) != q.size(i) || v.size(i) != q.size(i)) return false;
  if (q.size(-1) != k.size(-1) || k.size(-2) != v.size(-2)) return false;
  for (const Tensor& m : masks)
    if (m.defined() && (m.dtype() != DType::b8 || !m.device().is_cpu())) return false;
  return true;
}

Tensor efficient_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                           const std::vector<Tensor>& masks, const AttentionPattern& pattern,
                           double scale) {
  if (q.defined() && !q.device().is_cpu()) return fused_attention(q, k, v, masks, pattern, scale);
  QKV_CHECK(efficient_attention_supported(q, k, v, masks), "efficient_attention",
            "needs CPU float32/float64 q, k, v with equal leading dims and bool masks, got ",
            shape_str(q.shape()), ", ", shape_str(k.shape()), ", ", shape_str(v.shape()));
  Problem p;
  Shape lead(q.shape().begin(), q.shape().end() - 2);
  p.N = 1;
  for (int64_t x : lead) p.N *= x;
  p.T = q.size(-2), p.S = k.size(-2), p.d = q.size(-1), p.dv = v.size(-1);
  p.scale = scale > 0 ? scale : 1.0 / std::sqrt(double(p.d));
  p.pattern = pattern;
  p.pattern.prepare();
  if (pattern.block_size > 0) {
    p.tile = pattern.block_size;  // tiles must not straddle blocks
    QKV_CHECK(pattern.block_layout.size(0) * p.tile >= p.T &&
                  pattern.block_layout.size(1) * p.tile >= p.S,
              "efficient_attention", "block_layout ", shape_str(pattern.block_layout.shape()),
              " does not cover [", p.T, ", ", p.S, "] with blocks of ", p.tile);
  }
  for (const Tensor& m : masks)
    if (m.defined()) p.masks.push_back(mask_view(m, lead, p.T, p.S));
  p.elementwise = !p.masks.empty() || pattern.causal || pattern.sparse();

  Tensor qc = q.detach().contiguous(), kc = k.detach().contiguous(), vc = v.detach().contiguous();
  Shape out_shape = lead;
  out_shape.push_back(p.T);
  out_shape.push_back(p.dv);
  Tensor out = Tensor::empty(out_shape, q.dtype());
  Tensor lse = Tensor::empty({p.N * p.T}, q.dtype());
  if (q.dtype() == DType::f32)
    forward_kernel(p, qc.data<float>(), kc.data<float>(), vc.data<float>(), out.data<float>(),
                   lse.data<float>());
  else
    forward_kernel(p, qc.data<double>(), kc.data<double>(), vc.data<double>(), out.data<double>(),
                   lse.data<double>());

  return record("efficient_attention", {q, k, v}, out,
                [p, qc, kc, vc, o = out.detach(), lse](const Tensor& gy) -> grads {
                  Tensor g = gy.contiguous();
                  Tensor gq = zeros_like(qc), gk = zeros_like(kc), gv = zeros_like(vc);
                  if (qc.dtype() == DType::f32)
                    backward_kernel(p, qc.data<float>(), kc.data<float>(), vc.data<float>(),
                                    o.data<float>(), lse.data<float>(), g.data<float>(),
                                    gq.data<float>(), gk.data<float>(), gv.data<float>());
                  else
                    backward_kernel(p, qc.data<double>(), kc.data<double>(), vc.data<double>(),
                                    o.data<double>(), lse.data<double>(), g.data<double>(),
                                    gq.data<double>(), gk.data<double>(), gv.data<double>());
                  return grads{gq, gk, gv};
                });
}

}  // namespace qkv::nn
