// The CPU's memory-efficient attention (Rabe & Staats 2021; the FlashAttention recurrence), the
// CpuBackend's attention_forward/backward.
//
// softmax(q k^T * scale) v is computed one tile of queries x keys at a time. Each query row keeps
// a running maximum m, a running normalizer l and an unnormalized output; a new tile of scores
// rescales them by exp(m_old - m_new) (the online softmax), so the T x S score matrix never
// exists - memory is O(T d). The backward does not keep the probabilities either: it saves each
// row's log-sum-exp and recomputes the scores tile by tile, forming dV, dP, dS = P (dP - D),
// dQ and dK from them (D_t = dO_t . O_t).
//
// Masks are bool (true = blocked), each broadcastable to [..., T, S] and read in place through
// its strides (an expanded key-padding mask costs nothing); structured patterns
// (engine/attention_pattern.h) are evaluated from positions, and tiles they leave empty are
// skipped. A row with every key blocked yields zeros, as the naive attention does.
//
// Dropout on the attention weights: the mask is drawn per tile row where it is used, from the
// counters a whole [..., T, S] Bernoulli fill would take (engine/cpu/bernoulli_range.h), and
// drawn again in the backward pass instead of stored. So with the same generator state the kernel
// drops exactly the weights scaled_dot_product_attention's dropout drops.
//
// Float32 problems of at most 64 queries, keys and features take the small-problem path
// (engine/cpu/small_attention.h) instead: one tile per problem, and when a backward follows, the
// weights (at most 64 per query row) and the dropout mask (a word per query row) kept for it.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <type_traits>

#include "engine/cpu/bernoulli_range.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cpu/gemm.h"
#include "engine/cpu/small_attention.h"
#include "engine/cpu/vec_math.h"
#include "engine/error.h"
#include "engine/example_draws.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "engine/random.h"

namespace qkv::cpu {

namespace {

// The tile products run on the engine's packed GEMM (inside a parallel_for it runs on the calling
// thread) and exponentials on the vectorizable float exp: the two costs of attention.
inline float tile_exp(float x) { return cpu::fast_exp(x); }
inline double tile_exp(double x) { return std::exp(x); }

// Queries and keys per tile when no block size imposes one: 64 x 64 scores stay in L1/L2.
constexpr int64_t kTile = 64;

// Offset of problem n's first element in `t` ([lead..., x, y], any strides), for each of the
// N = prod(lead) problems in row-major order.
std::vector<int64_t> lead_offsets(const Tensor& t, const Shape& lead) {
  const Strides& st = t.strides();
  int64_t N = 1;
  for (int64_t x : lead) N *= x;
  std::vector<int64_t> base;
  base.reserve(size_t(N));
  // An odometer over the leading dims (no division per problem: these run once per operand and
  // call, for every (batch, head) problem).
  std::vector<int64_t> index(lead.size(), 0);
  int64_t offset = 0;
  for (int64_t n = 0; n < N; ++n) {
    base.push_back(offset);
    for (int i = int(lead.size()) - 1; i >= 0; --i) {
      offset += st[size_t(i)];
      if (++index[size_t(i)] < lead[size_t(i)]) break;
      offset -= lead[size_t(i)] * st[size_t(i)];
      index[size_t(i)] = 0;
    }
  }
  return base;
}

// An operand [lead..., rows, width] read in place: row r of problem n starts at
// data + base[n] + r * ld and holds `width` contiguous values. Attention's heads, [B, T, H, d]
// viewed as [B, H, T, d], are read where the projections wrote them, with no copy. Only a strided
// last dim is copied to contiguous first.
struct RowsView {
  Tensor tensor;  // keeps the storage alive
  std::vector<int64_t> base;
  int64_t ld = 0;
};

RowsView rows_view(const Tensor& t, const Shape& lead) {
  RowsView r;
  r.tensor = t.size(-1) <= 1 || t.strides()[size_t(t.dim() - 1)] == 1 ? t : t.contiguous();
  r.ld = r.tensor.size(-2) > 1 ? r.tensor.strides()[size_t(t.dim() - 2)] : r.tensor.size(-1);
  r.base = lead_offsets(r.tensor, lead);
  return r;
}

// Problem n's rows of a view, as the kernels index them (T: const F to read, F to write).
template <typename T>
struct Rows {
  T* data;
  int64_t ld;
  Rows(const RowsView& v, int64_t n)
      : data(v.tensor.data<std::remove_const_t<T>>() + v.base[size_t(n)]), ld(v.ld) {}
  T* row(int64_t r) const { return data + r * ld; }
};

// A new tensor of `shape` (like's rank) laid out in memory as `like` is: its leading dims ordered
// from like's largest stride to its smallest, the last dim innermost. For attention's heads,
// [B, T, H, d] viewed as [B, H, T, d], the output and the gradients then come in [B, T, H, d]
// order, and the [B, T, H * d] view the layer makes of them needs no copy. A `like` with a
// broadcast dim (stride 0) gets a contiguous tensor. Zero-filled when `zeroed`.
Tensor new_in_layout_of(const Tensor& like, const Shape& shape, bool zeroed) {
  const int rank = like.dim();
  const Strides& st = like.strides();
  bool dense = true;
  for (int i = 0; i < rank; ++i) dense = dense && (like.size(i) <= 1 || st[size_t(i)] != 0);
  std::vector<int> order(static_cast<size_t>(rank));
  std::iota(order.begin(), order.end(), 0);
  if (dense)
    std::stable_sort(order.begin(), order.end() - 1,
                     [&](int a, int b) { return st[size_t(a)] > st[size_t(b)]; });
  Shape memory_shape;
  for (int dim : order) memory_shape.push_back(shape[size_t(dim)]);
  Tensor memory =
      zeroed ? zeros(memory_shape, {like.dtype()}) : Tensor::empty(memory_shape, like.dtype());
  std::vector<int> inverse(static_cast<size_t>(rank));
  for (int i = 0; i < rank; ++i) inverse[size_t(order[size_t(i)])] = i;
  return memory.permute(inverse);
}

// One bool mask read in place: element (n, t, s) is data[base[n] + t * st + s * ss].
struct MaskView {
  Tensor expanded;  // keeps the storage alive
  const uint8_t* data = nullptr;
  std::vector<int64_t> base;
  int64_t st = 0, ss = 0;
};

// Dropout on the weights: weight (n, t, s) is element (n T + t) S + s of a Bernoulli fill of
// N x T x S elements that starts at counter `offset`, as dropout() on the [..., T, S] weights draws
// it.
struct WeightDropout {
  bool on = false;
  uint64_t seed = 0, offset = 0;
  uint64_t threshold = 0;  // of keeping a weight: philox::bernoulli_threshold(1 - p)
  double scale = 1;        // a kept weight's factor, 1 / (1 - p)
  // By example: each row of the weights' leading dim from its example (AttentionDropout).
  const int64_t* examples = nullptr;
  uint64_t key = 0;
  philox::ExampleLayout layout{};
};

struct Tiling {
  int64_t N = 0, T = 0, S = 0, d = 0, dv = 0, tile = kTile;
  double scale = 1;
  std::vector<MaskView> masks;
  AttentionPattern pattern;
  bool elementwise = false;  // any mask or pattern to test per score
  WeightDropout dropout;
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
  m.base = lead_offsets(m.expanded, lead);
  return m;
}

// Scaled, masked scores of queries [t0, t0 + rows) against keys [s0, s0 + cols) into sc (row
// stride tile): one GEMM, Q_tile @ K_tile^T with K read transposed in place.
template <typename F>
void tile_scores(const Tiling& p, const Rows<const F>& q, const Rows<const F>& k, int64_t n,
                 int64_t t0, int64_t rows, int64_t s0, int64_t cols, F* sc) {
  const int64_t tile = p.tile;
  cpu::gemm<F>(false, true, rows, cols, p.d, F(p.scale), q.row(t0), q.ld, k.row(s0), k.ld, F(0), sc,
               tile);
  if (!p.elementwise) return;
  // Row by row: the causal limit as a bound, each mask's row through its key stride, and the
  // other patterns (window, block layout) by asking them. (Asking pattern and masks per score
  // was 4% of the toy translation model's training step in perf; this is 1.2%.)
  const F inf = std::numeric_limits<F>::infinity();
  const bool only_causal = !p.pattern.sparse();
  for (int64_t i = 0; i < rows; ++i) {
    const int64_t t = t0 + i;
    F* srow = sc + i * tile;
    if (only_causal) {
      if (p.pattern.causal)
        for (int64_t j = std::max<int64_t>(0, t - s0 + 1); j < cols; ++j) srow[j] = -inf;
    } else {
      for (int64_t j = 0; j < cols; ++j)
        if (!p.pattern.allows(t, s0 + j)) srow[j] = -inf;
    }
    for (const MaskView& m : p.masks) {
      const uint8_t* mrow = m.data + m.base[size_t(n)] + t * m.st + s0 * m.ss;
      for (int64_t j = 0; j < cols; ++j)
        if (mrow[j * m.ss]) srow[j] = -inf;
    }
  }
}

// Dropout factors of the tile's weights, 1 / (1 - p) kept and 0 dropped, into keep (row stride
// cols). Forward and backward draw the same tile from the same counters, so nothing is stored.
// A tile spanning all keys is one stretch of the fill; otherwise each row is.
template <typename F>
void draw_dropout_tile(const Tiling& p, int64_t n, int64_t t0, int64_t rows, int64_t s0,
                       int64_t cols, F* keep) {
  const WeightDropout& dr = p.dropout;
  if (dr.examples && cols == p.S)  // by example: lines n T + t0 .. of the weights
    return cpu::fill_bernoulli_example_lines(keep, dr.key, dr.examples, dr.layout,
                                             uint64_t(n * p.T + t0), rows, dr.threshold,
                                             F(dr.scale));
  if (dr.examples) {  // a tile of some keys: each row's whole line, then the tile's part of it
    thread_local std::vector<F> line;
    line.resize(size_t(p.S));
    for (int64_t i = 0; i < rows; ++i) {
      cpu::fill_bernoulli_example_line_at(line.data(), dr.key, dr.examples, dr.layout,
                                          uint64_t(n * p.T + t0 + i), dr.threshold, F(dr.scale));
      std::copy(line.begin() + s0, line.begin() + s0 + cols, keep + i * cols);
    }
    return;
  }
  const uint64_t first = uint64_t((n * p.T + t0) * p.S + s0);
  if (cols == p.S)
    return cpu::fill_bernoulli_range(keep, dr.seed, dr.offset, first, rows * cols, dr.threshold,
                                     F(dr.scale));
  for (int64_t i = 0; i < rows; ++i)
    cpu::fill_bernoulli_range(keep + i * cols, dr.seed, dr.offset, first + uint64_t(i * p.S), cols,
                              dr.threshold, F(dr.scale));
}

// Work items (query tiles, or whole problems) per thread chunk: enough multiply-adds that
// handing a chunk to another thread (a few microseconds) pays. One decoding step attends with a
// single query row, and with grain 1 its four heads would be split across threads for ~1 us of
// work each: measured, that made 2-thread KV-cache decoding 1.8x slower than 1 thread.
int64_t grain_for(int64_t macs_per_item) {
  constexpr int64_t kMinMacsPerChunk = int64_t(1) << 16;
  return std::max<int64_t>(1, kMinMacsPerChunk / std::max<int64_t>(1, macs_per_item));
}

// The small-problem path (engine/cpu/small_attention.h) takes float32 problems of at most 64
// queries, keys and features where the CPU has AVX-512; the tiles below take the rest.
bool takes_small_path(const Tiling& p) {
  return cpu::small_attention_fits(p.T, p.S, p.d, p.dv) && cpu::small_attention_enabled();
}

// visible[t], bit s: whether query t of problem n may attend to key s (S <= 64), from the
// pattern and every mask. A mask that does not vary along the queries (stride 0, as an expanded
// key-padding mask) is read once per problem.
void visible_keys(const Tiling& p, int64_t n, uint64_t* visible) {
  const int64_t T = p.T, S = p.S;
  const uint64_t all = S >= 64 ? ~uint64_t(0) : (uint64_t(1) << S) - 1;
  for (int64_t t = 0; t < T; ++t) {
    uint64_t bits = all;
    if (p.pattern.sparse()) {
      for (int64_t s = 0; s < S; ++s)
        if (!p.pattern.allows(t, s)) bits &= ~(uint64_t(1) << s);
    } else if (p.pattern.causal && t + 1 < S) {
      bits &= (uint64_t(1) << (t + 1)) - 1;  // keys s <= t
    }
    visible[t] = bits;
  }
  for (const MaskView& m : p.masks) {
    uint64_t blocked = 0;
    for (int64_t t = 0; t < T; ++t) {
      if (t == 0 || m.st != 0) {
        const uint8_t* mrow = m.data + m.base[size_t(n)] + t * m.st;
        blocked = 0;
        for (int64_t s = 0; s < S; ++s) blocked |= uint64_t(mrow[s * m.ss] != 0) << s;
      }
      visible[t] &= ~blocked;
    }
  }
}

// Problem n's operands, as the small-problem kernels take them (kept: its dropout words).
cpu::SmallAttention small_problem(const Tiling& p, const Rows<const float>& q,
                                  const Rows<const float>& k, const Rows<const float>& v,
                                  const uint64_t* visible, const uint64_t* kept) {
  cpu::SmallAttention a;
  a.T = p.T, a.S = p.S, a.d = p.d, a.dv = p.dv, a.scale = float(p.scale);
  a.q = q.data, a.ldq = q.ld, a.k = k.data, a.ldk = k.ld, a.v = v.data, a.ldv = v.ld;
  a.visible = visible;
  a.kept = p.dropout.on ? kept : nullptr;
  a.kept_scale = float(p.dropout.scale);
  return a;
}

// What the small-problem forward keeps for its backward: the weights P [N, T, S] and, with
// dropout, the kept words [N, T] (bit s of word n T + t: weight (n, t, s) kept).
struct KeptForBackward {
  Tensor weights, kept;
};

// Problems per stretch of the dropout fill drawn at once: one Bernoulli call for several
// problems (their weights are consecutive elements of the fill), 16 KB of factors (in L1).
int64_t problems_per_draw(const Tiling& p) { return std::max<int64_t>(1, 4096 / (p.T * p.S)); }

// kept[(n - n0) T + t], bit s: whether weight (n, t, s) is kept, for problems [n0, n1): the
// stretch of the fill the generic path draws tile by tile, drawn here in one call into factors.
void draw_kept_words(const Tiling& p, int64_t n0, int64_t n1, std::vector<float>& factors,
                     uint64_t* kept) {
  const WeightDropout& dr = p.dropout;
  if (dr.examples) {  // by example: one line of the weights' last dim per query row, as bits
    cpu::bernoulli_example_line_words(kept, dr.key, dr.examples, dr.layout, uint64_t(n0 * p.T),
                                      (n1 - n0) * p.T, dr.threshold);
    return;
  }
  const int64_t count = (n1 - n0) * p.T * p.S;
  factors.resize(size_t(count));
  cpu::fill_bernoulli_range(factors.data(), dr.seed, dr.offset, uint64_t(n0 * p.T * p.S), count,
                            dr.threshold, 1.0f);
  cpu::small_attention_kept_words(factors.data(), (n1 - n0) * p.T, p.S, kept);
}

// Asks for the cache lines of problem n's `rows` rows of `width` floats in a view, for reading
// (kWrite = 0) or writing (1). The small path reads each problem's rows in place, short runs
// (d = 32 floats: two lines) far apart (H d floats) in tensors the projections wrote long before,
// mostly in memory: a pattern the hardware prefetchers follow late, so each problem would wait for
// its operands. Asked for one problem ahead, they arrive while the previous one computes.
template <int kWrite>
void prefetch_problem(const RowsView& view, int64_t n, int64_t rows, int64_t width) {
  const float* first = view.tensor.data<float>() + view.base[size_t(n)];
  for (int64_t r = 0; r < rows; ++r) {
    const char* begin = reinterpret_cast<const char*>(first + r * view.ld);
    const char* end = reinterpret_cast<const char*>(first + r * view.ld + width);
    for (const char* line = begin; line < end; line += 64) __builtin_prefetch(line, kWrite, 3);
    if ((reinterpret_cast<uintptr_t>(begin) & 63) != 0)  // a run from mid-line ends a line later
      __builtin_prefetch(end - 1, kWrite, 3);
  }
}

// Problem n's q, k and v, which both passes read.
void prefetch_inputs(const Tiling& p, const RowsView& qv, const RowsView& kv, const RowsView& vv,
                     int64_t n) {
  prefetch_problem<0>(qv, n, p.T, p.d);
  prefetch_problem<0>(kv, n, p.S, p.d);
  prefetch_problem<0>(vv, n, p.S, p.dv);
}

// The forward on the small-problem path: one problem per item, its visible keys made first, its
// dropout words drawn for several problems at a time (into `keep`'s when it is defined, for the
// backward, else into a buffer), and its weights kept when keep.weights is defined.
void small_forward(const Tiling& p, const RowsView& qv, const RowsView& kv, const RowsView& vv,
                   const RowsView& ov, float* lse, const KeptForBackward& keep) {
  const int64_t T = p.T, S = p.S, group = problems_per_draw(p);
  float* weights = keep.weights.defined() ? keep.weights.data<float>() : nullptr;
  uint64_t* kept_all =
      keep.kept.defined() ? reinterpret_cast<uint64_t*>(keep.kept.data<int64_t>()) : nullptr;
  parallel_for(0, p.N, grain_for(T * S * (p.d + p.dv)), [&](int64_t begin, int64_t end) {
    std::vector<uint64_t> visible(static_cast<size_t>(T));
    std::vector<uint64_t> kept_here(static_cast<size_t>(p.dropout.on && !kept_all ? group * T : 0));
    std::vector<float> factors;
    for (int64_t n0 = begin; n0 < end; n0 += group) {
      const int64_t n1 = std::min(end, n0 + group);
      uint64_t* kept = kept_all ? kept_all + n0 * T : kept_here.data();
      if (p.dropout.on) draw_kept_words(p, n0, n1, factors, kept);
      for (int64_t n = n0; n < n1; ++n) {
        const Rows<const float> q(qv, n), k(kv, n), v(vv, n);
        const Rows<float> out(ov, n);
        if (n + 1 < end) {  // the next problem's operands, while this one computes
          prefetch_inputs(p, qv, kv, vv, n + 1);
          prefetch_problem<1>(ov, n + 1, T, p.dv);
        }
        visible_keys(p, n, visible.data());
        const cpu::SmallAttention a =
            small_problem(p, q, k, v, visible.data(), kept + (n - n0) * T);
        cpu::small_attention_forward(a, out.data, out.ld, lse + n * T,
                                     weights ? weights + n * T * S : nullptr);
      }
    }
  });
}

// The backward on the small-problem path, from the weights and dropout words the forward kept
// when it kept them, else recomputing the weights from lse and drawing the words again.
void small_backward(const Tiling& p, const RowsView& qv, const RowsView& kv, const RowsView& vv,
                    const RowsView& ov, const float* lse, const KeptForBackward& keep,
                    const RowsView& gov, const RowsView& gqv, const RowsView& gkv,
                    const RowsView& gvv) {
  const int64_t T = p.T, S = p.S, group = problems_per_draw(p);
  const float* weights = keep.weights.defined() ? keep.weights.data<float>() : nullptr;
  const uint64_t* kept_all =
      keep.kept.defined() ? reinterpret_cast<const uint64_t*>(keep.kept.data<int64_t>()) : nullptr;
  parallel_for(0, p.N, grain_for(2 * T * S * (p.d + p.dv)), [&](int64_t begin, int64_t end) {
    std::vector<uint64_t> visible(static_cast<size_t>(T));
    std::vector<uint64_t> kept_here(static_cast<size_t>(p.dropout.on && !kept_all ? group * T : 0));
    std::vector<float> factors;
    for (int64_t n0 = begin; n0 < end; n0 += group) {
      const int64_t n1 = std::min(end, n0 + group);
      const uint64_t* kept = kept_all ? kept_all + n0 * T : kept_here.data();
      if (p.dropout.on && !kept_all) draw_kept_words(p, n0, n1, factors, kept_here.data());
      for (int64_t n = n0; n < n1; ++n) {
        const Rows<const float> q(qv, n), k(kv, n), v(vv, n), out(ov, n), gout(gov, n);
        const Rows<float> gq(gqv, n), gk(gkv, n), gv(gvv, n);
        if (n + 1 < end) {  // the next problem's operands, while this one computes
          prefetch_inputs(p, qv, kv, vv, n + 1);
          prefetch_problem<0>(ov, n + 1, T, p.dv);
          prefetch_problem<0>(gov, n + 1, T, p.dv);
          prefetch_problem<1>(gqv, n + 1, T, p.d);
          prefetch_problem<1>(gkv, n + 1, S, p.d);
          prefetch_problem<1>(gvv, n + 1, S, p.dv);
        }
        if (!weights) visible_keys(p, n, visible.data());
        const cpu::SmallAttention a =
            small_problem(p, q, k, v, visible.data(), kept + (n - n0) * T);
        cpu::small_attention_backward(a, out.data, out.ld, gout.data, gout.ld, lse + n * T,
                                      weights ? weights + n * T * S : nullptr, gq.data, gq.ld,
                                      gk.data, gk.ld, gv.data, gv.ld);
      }
    }
  });
}

template <typename F>
void forward_kernel(const Tiling& p, const RowsView& qv, const RowsView& kv, const RowsView& vv,
                    const RowsView& ov, F* lse) {
  const int64_t T = p.T, S = p.S, d = p.d, dv = p.dv, tile = p.tile;
  const int64_t tiles = (T + tile - 1) / tile;
  const F inf = std::numeric_limits<F>::infinity();
  const int64_t grain = grain_for(std::min(tile, T) * S * (d + dv));
  parallel_for(0, p.N * tiles, grain, [&](int64_t begin, int64_t end) {
    std::vector<F> sc(static_cast<size_t>(tile * tile)), acc(static_cast<size_t>(tile * dv));
    std::vector<F> m(static_cast<size_t>(tile)), l(static_cast<size_t>(tile));
    std::vector<F> keep(static_cast<size_t>(p.dropout.on ? tile * tile : 0));
    for (int64_t idx = begin; idx < end; ++idx) {
      const int64_t n = idx / tiles, t0 = (idx % tiles) * tile, rows = std::min(tile, T - t0);
      const Rows<const F> q(qv, n), k(kv, n), v(vv, n);
      const Rows<F> out(ov, n);
      std::fill(m.begin(), m.end(), -inf);
      std::fill(l.begin(), l.end(), F(0));
      std::fill(acc.begin(), acc.end(), F(0));
      for (int64_t s0 = 0; s0 < S; s0 += tile) {
        const int64_t cols = std::min(tile, S - s0);
        if (!p.pattern.tile_visible(t0, t0 + rows, s0, s0 + cols)) continue;  // never computed
        tile_scores(p, q, k, n, t0, rows, s0, cols, sc.data());
        if (p.dropout.on) draw_dropout_tile(p, n, t0, rows, s0, cols, keep.data());
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
          // Dropout acts on the normalized weights, so l sums them all and only the output
          // accumulates the dropped ones: out = sum_j keep_j P_j V_j.
          if (p.dropout.on) {
            const F* z = keep.data() + i * cols;
            _Pragma("omp simd") for (int64_t j = 0; j < cols; ++j) srow[j] *= z[j];
          }
        }
        // acc += P_tile @ V_tile
        cpu::gemm<F>(false, false, rows, dv, cols, F(1), sc.data(), tile, v.row(s0), v.ld, F(1),
                     acc.data(), dv);
      }
      for (int64_t i = 0; i < rows; ++i) {
        const F li = l[size_t(i)];
        F* o = out.row(t0 + i);
        for (int64_t c = 0; c < dv; ++c) o[c] = li > 0 ? acc[size_t(i * dv + c)] / li : F(0);
        lse[n * T + t0 + i] = li > 0 ? m[size_t(i)] + std::log(li) : -inf;
      }
    }
  });
}

// gq, gk, gv arrive zeroed (laid out as q, k, v). Parallel over the N independent (batch, head)
// problems, so the accumulations into gk and gv never race. With dropout (factors Z, out =
// (Z * P) V): dV takes the dropped weights Z * P, the weights' gradient is Z * dP with dP = dO V^T,
// and D = rowsum(dO * O) is still sum_j P_ij (Z dP)_ij.
template <typename F>
void backward_kernel(const Tiling& p, const RowsView& qv, const RowsView& kv, const RowsView& vv,
                     const RowsView& ov, const F* lse, const RowsView& gov, const RowsView& gqv,
                     const RowsView& gkv, const RowsView& gvv) {
  const int64_t T = p.T, S = p.S, d = p.d, dv = p.dv, tile = p.tile;
  const F inf = std::numeric_limits<F>::infinity();
  parallel_for(0, p.N, grain_for(2 * T * S * (d + dv)), [&](int64_t begin, int64_t end) {
    std::vector<F> sc(static_cast<size_t>(tile * tile)), dp(static_cast<size_t>(tile * tile)),
        D(static_cast<size_t>(tile)), keep(static_cast<size_t>(p.dropout.on ? tile * tile : 0));
    for (int64_t n = begin; n < end; ++n) {
      const Rows<const F> q(qv, n), k(kv, n), v(vv, n), out(ov, n), gout(gov, n);
      const Rows<F> gq(gqv, n), gk(gkv, n), gv(gvv, n);
      for (int64_t t0 = 0; t0 < T; t0 += tile) {
        const int64_t rows = std::min(tile, T - t0);
        for (int64_t i = 0; i < rows; ++i) {
          const F* o = out.row(t0 + i);
          const F* go = gout.row(t0 + i);
          F s = 0;
          for (int64_t c = 0; c < dv; ++c) s += go[c] * o[c];
          D[size_t(i)] = s;  // rowsum(dO * O) = sum_j P_ij dP_ij
        }
        for (int64_t s0 = 0; s0 < S; s0 += tile) {
          const int64_t cols = std::min(tile, S - s0);
          if (!p.pattern.tile_visible(t0, t0 + rows, s0, s0 + cols)) continue;
          tile_scores(p, q, k, n, t0, rows, s0, cols, sc.data());
          for (int64_t i = 0; i < rows; ++i) {  // scores -> probabilities in place
            const F L = lse[n * T + t0 + i];
            F* prow = sc.data() + i * tile;
            if (L == -inf) {
              std::fill(prow, prow + cols, F(0));
              continue;
            }
            _Pragma("omp simd") for (int64_t j = 0; j < cols; ++j) prow[j] = tile_exp(prow[j] - L);
          }
          // dP = dO @ V_tile^T
          cpu::gemm<F>(false, true, rows, cols, dv, F(1), gout.row(t0), gout.ld, v.row(s0), v.ld,
                       F(0), dp.data(), tile);
          // dS = P * (dP - D) * scale, written over dP (with dropout: P * (Z dP - D) * scale, and
          // P becomes Z P for dV)
          if (p.dropout.on) draw_dropout_tile(p, n, t0, rows, s0, cols, keep.data());
          for (int64_t i = 0; i < rows; ++i) {
            F* prow = sc.data() + i * tile;
            F* drow = dp.data() + i * tile;
            const F Di = D[size_t(i)];
            if (p.dropout.on) {
              const F* z = keep.data() + i * cols;
              _Pragma("omp simd") for (int64_t j = 0; j < cols; ++j) {
                drow[j] = prow[j] * (z[j] * drow[j] - Di) * F(p.scale);
                prow[j] *= z[j];
              }
            } else {
              _Pragma("omp simd") for (int64_t j = 0; j < cols; ++j) drow[j] =
                  prow[j] * (drow[j] - Di) * F(p.scale);
            }
          }
          // dV_tile += P^T @ dO
          cpu::gemm<F>(true, false, cols, dv, rows, F(1), sc.data(), tile, gout.row(t0), gout.ld,
                       F(1), gv.row(s0), gv.ld);
          // dQ_tile += dS @ K_tile ;  dK_tile += dS^T @ Q_tile
          cpu::gemm<F>(false, false, rows, d, cols, F(1), dp.data(), tile, k.row(s0), k.ld, F(1),
                       gq.row(t0), gq.ld);
          cpu::gemm<F>(true, false, cols, d, rows, F(1), dp.data(), tile, q.row(t0), q.ld, F(1),
                       gk.row(s0), gk.ld);
        }
      }
    }
  });
}

Shape lead_of(const Tensor& q) { return Shape(q.shape().begin(), q.shape().end() - 2); }

// The attention weights' shape, [lead..., T, S], which dropout by example lays its draws out by.
Shape weights_shape(const AttentionProblem& a) {
  Shape shape = lead_of(a.q);
  shape.push_back(a.q.size(-2));
  shape.push_back(a.k.size(-2));
  return shape;
}

// Whether dropout by example can draw the weights: int64 ids on this device, and weights whose
// layout example_layout accepts (its error, here a refusal: the composed attention's dropout()
// then reports it by name).
bool fits_example_draws(const AttentionProblem& a) {
  const Tensor& ids = a.dropout.examples;
  if (ids.dtype() != DType::i64 || ids.device() != a.q.device()) return false;
  try {
    example_layout(weights_shape(a), size_t(ids.numel()), "efficient_attention");
    return true;
  } catch (const Error&) {
    return false;
  }
}

Tiling tiling_of(const AttentionProblem& a) {
  Tiling p;
  const Shape lead = lead_of(a.q);
  p.N = a.batch();
  p.T = a.q.size(-2), p.S = a.k.size(-2), p.d = a.q.size(-1), p.dv = a.v.size(-1);
  p.scale = a.scale;
  p.pattern = a.pattern;
  p.pattern.prepare();
  if (p.pattern.block_size > 0) {
    p.tile = p.pattern.block_size;  // tiles must not straddle blocks
    QKV_CHECK(p.pattern.block_layout.size(0) * p.tile >= p.T &&
                  p.pattern.block_layout.size(1) * p.tile >= p.S,
              "efficient_attention", "block_layout ", shape_str(p.pattern.block_layout.shape()),
              " does not cover [", p.T, ", ", p.S, "] with blocks of ", p.tile);
  }
  for (const Tensor& m : a.masks)
    if (m.defined()) p.masks.push_back(mask_view(m, lead, p.T, p.S));
  p.elementwise = !p.masks.empty() || p.pattern.causal || p.pattern.sparse();
  if (a.dropout.p > 0) {
    p.dropout = {true, a.dropout.seed, a.dropout.offset,
                 philox::bernoulli_threshold(1 - a.dropout.p), 1 / (1 - a.dropout.p)};
    if (a.dropout.examples.defined()) {
      p.dropout.examples = a.dropout.examples.data<int64_t>();
      p.dropout.key = a.dropout.key;
      p.dropout.layout = example_layout(weights_shape(a), size_t(a.dropout.examples.numel()),
                                        "efficient_attention");
    }
  }
  return p;
}

}  // namespace

bool CpuBackend::supports_attention(const AttentionProblem& a) const {
  if (!(a.dropout.p >= 0 && a.dropout.p < 1)) return false;
  if (a.dropout.p > 0 && a.dropout.examples.defined() && !fits_example_draws(a)) return false;
  if (a.q.dtype() != DType::f32 && a.q.dtype() != DType::f64) return false;
  for (const Tensor& m : a.masks)
    if (m.defined() && (m.dtype() != DType::b8 || m.device() != a.q.device())) return false;
  return true;
}

// q, k, v are read where they lie (attention's heads are strided views); the output and the
// gradients are laid out as q, k and v are, so the layer's views of them need no copy.
AttentionForward CpuBackend::attention_forward(const AttentionProblem& a) {
  QKV_CHECK(supports_attention(a), "efficient_attention",
            "needs float32/float64 q, k, v and bool masks, got ", dtype_name(a.q.dtype()), " ",
            shape_str(a.q.shape()), ", ", shape_str(a.k.shape()), ", ", shape_str(a.v.shape()));
  const Tiling p = tiling_of(a);
  const Shape lead = lead_of(a.q);
  const RowsView qv = rows_view(a.q, lead), kv = rows_view(a.k, lead), vv = rows_view(a.v, lead);
  Shape out_shape = lead;
  out_shape.push_back(p.T);
  out_shape.push_back(p.dv);
  Tensor out = new_in_layout_of(a.q, out_shape, /*zeroed=*/false);
  const RowsView ov = rows_view(out, lead);
  Tensor lse = Tensor::empty({p.N * p.T}, a.q.dtype());
  // The operands as the kernel read them (a copy where a last dim was strided), for the backward,
  // and on the small-problem path what it keeps for it.
  std::vector<Tensor> saved{qv.tensor, kv.tensor, vv.tensor};
  if (a.q.dtype() == DType::f32 && takes_small_path(p)) {
    KeptForBackward keep;
    if (a.backward_expected) {
      keep.weights = Tensor::empty({p.N * p.T * p.S}, DType::f32);
      if (p.dropout.on) keep.kept = Tensor::empty({p.N * p.T}, DType::i64);
    }
    small_forward(p, qv, kv, vv, ov, lse.data<float>(), keep);
    saved.push_back(keep.weights);
    saved.push_back(keep.kept);
  } else if (a.q.dtype() == DType::f32) {
    forward_kernel(p, qv, kv, vv, ov, lse.data<float>());
  } else {
    forward_kernel(p, qv, kv, vv, ov, lse.data<double>());
  }
  return {out, lse, saved};
}

AttentionGradients CpuBackend::attention_backward(const AttentionProblem& a,
                                                  const AttentionForward& forward,
                                                  const Tensor& grad_out,
                                                  const AttentionGradients& into) {
  const Tiling p = tiling_of(a);
  const Shape lead = lead_of(a.q);
  const RowsView qv = rows_view(forward.saved[0], lead), kv = rows_view(forward.saved[1], lead),
                 vv = rows_view(forward.saved[2], lead), ov = rows_view(forward.out, lead),
                 gov = rows_view(grad_out, lead);
  // The tiles accumulate into zeroed gradients; the small-problem path writes every element.
  const bool zeroed = !(forward.lse.dtype() == DType::f32 && takes_small_path(p));
  Tensor gq = into.q, gk = into.k, gv = into.v;
  if (gq.defined()) {
    // The rows are written in place, so each needs a unit stride; the tiles add into zeros.
    for (const Tensor& g : {gq, gk, gv}) {
      QKV_CHECK(g.size(-1) <= 1 || g.strides().back() == 1, "attention_backward",
                "the gradients' rows must be contiguous, got strides ", shape_str(g.strides()));
      if (zeroed) fill_(g, 0);
    }
  } else {
    gq = new_in_layout_of(qv.tensor, qv.tensor.shape(), zeroed);
    gk = new_in_layout_of(kv.tensor, kv.tensor.shape(), zeroed);
    gv = new_in_layout_of(vv.tensor, vv.tensor.shape(), zeroed);
  }
  const RowsView gqv = rows_view(gq, lead), gkv = rows_view(gk, lead), gvv = rows_view(gv, lead);
  if (!zeroed) {
    // What the small-problem forward kept (nothing when the generic path ran it).
    KeptForBackward keep;
    if (forward.saved.size() == 5) keep = {forward.saved[3], forward.saved[4]};
    small_backward(p, qv, kv, vv, ov, forward.lse.data<float>(), keep, gov, gqv, gkv, gvv);
  } else if (forward.lse.dtype() == DType::f32) {
    backward_kernel<float>(p, qv, kv, vv, ov, forward.lse.data<float>(), gov, gqv, gkv, gvv);
  } else {
    backward_kernel<double>(p, qv, kv, vv, ov, forward.lse.data<double>(), gov, gqv, gkv, gvv);
  }
  return {gq, gk, gv};
}

}  // namespace qkv::cpu
