// The one interface a device implements.
//
// A backend owns its device's memory and runs kernels on tensors that already live there. The ops
// in engine/ops (shape checks, broadcasting, autograd) call these kernels through
// `tensor.backend()` and never branch on the device themselves, so adding a device means
// implementing this class and registering it - nothing else.
//
// Conventions for every kernel:
// - Output tensors are allocated by the caller, contiguous, of the right shape and dtype.
// - Inputs may be strided views unless a kernel says "contiguous"; broadcasting has already been
//   applied by the caller (a broadcast input is a view with stride 0), so shapes match exactly.
// - float32 and float64 are supported by every floating kernel; int64 and bool where stated.
#pragma once

#include <cstddef>
#include <cstdint>

#include "engine/attention_problem.h"
#include "engine/tensor.h"

namespace qkv {

enum class UnaryOp {
  neg,
  exp,
  log,
  sqrt,
  rsqrt,
  abs,
  sign,
  tanh,
  sigmoid,
  relu,
  gelu_erf,
  gelu_tanh,
  gelu_erf_grad,
  gelu_tanh_grad,  // *_grad: dgelu/dx
  square,
  reciprocal,
  pow_scalar,   // x ^ scalar
  add_scalar,   // x + scalar
  mul_scalar,   // x * scalar
  rsub_scalar,  // scalar - x
  eq_scalar,
  lt_scalar,
  gt_scalar,    // produce bool
  logical_not,  // bool -> bool
};

enum class BinaryOp {
  add,
  sub,
  mul,
  div,
  maximum,
  minimum,
  pow,
  add_relu,       // relu(a + b): the sum rounded as add's, then relu's rule (NaN and -0 pass)
  relu_backward,  // a where b > 0, else 0 (PyTorch's threshold_backward at 0); same dtype in and
                  // out
  gelu_erf_backward,
  gelu_tanh_backward,  // a * dgelu/dx at b (PyTorch's gelu_backward), floating only
  eq,
  ne,
  lt,
  le,
  gt,
  ge,  // any dtype in, bool out
  logical_and,
  logical_or,  // bool in, bool out
};

enum class ReduceOp { sum, max, min, argmax, argmin };

struct MemoryStats {
  size_t bytes_in_use = 0;  // handed out to live storages
  size_t peak_bytes = 0;    // high-water mark of bytes_in_use since the last reset
  size_t bytes_cached = 0;  // kept in free lists for reuse
  size_t allocations = 0;   // requests served
  size_t cache_hits = 0;    // requests served from the free lists
};

// The sliding window of a 2-D convolution or pooling over [N, C, H, W]: kernel size, stride,
// zero padding on each side and dilation (the gap between kernel taps), per spatial dim.
struct Window2d {
  int64_t kernel_h = 1, kernel_w = 1;
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  // Output rows and columns for an input of height h / width w: 0 when the window is larger than
  // the padded input (C++ division truncates toward zero, so -1 / 2 + 1 would say 1).
  int64_t out_h(int64_t h) const { return out_size(h, pad_h, kernel_h, dilation_h, stride_h); }
  int64_t out_w(int64_t w) const { return out_size(w, pad_w, kernel_w, dilation_w, stride_w); }
  static int64_t out_size(int64_t n, int64_t pad, int64_t kernel, int64_t dilation,
                          int64_t stride) {
    const int64_t room = n + 2 * pad - dilation * (kernel - 1) - 1;
    return room < 0 ? 0 : room / stride + 1;
  }
};

// conv2d's forward as a backend returns it: the output [N, O, Ho, Wo] and what its backward reads
// besides x and the weight, in a form the backend chooses (undefined when it needs nothing more).
struct Conv2dForward {
  Tensor y;
  Tensor saved;
};

// Where dropout's keep decisions come from (engine/random.h): element i of the sequential stream at
// counter `offset` of `seed`, as random_bernoulli draws it, or, when `examples` is defined (int64,
// one id per row of the first dim, on the device), by example under `key`, as
// random_bernoulli_by_example draws it.
struct DropoutDraws {
  uint64_t seed = 0, offset = 0;
  uint64_t key = 0;
  Tensor examples;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual Device device() const = 0;

  // ---- memory ---------------------------------------------------------------------------------
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr, size_t bytes) = 0;
  virtual MemoryStats memory_stats() const = 0;
  virtual void reset_peak_memory() = 0;
  // Raw transfers between this device and host memory (contiguous bytes).
  virtual void copy_to_host(const void* device_src, void* host_dst, size_t bytes) = 0;
  virtual void copy_from_host(const void* host_src, void* device_dst, size_t bytes) = 0;
  // Waits until every kernel queued on the device has finished (for timing; copies to the host
  // already wait for the work they depend on). Backends that run kernels synchronously keep the
  // default, which returns at once.
  virtual void synchronize();

  // ---- elementwise ----------------------------------------------------------------------------
  // dst = src converted to dst's dtype; same shape, any strides on both (dst may be a view).
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  virtual void fill(const Tensor& dst, double value) = 0;  // dst contiguous
  virtual void unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar = 0) = 0;
  virtual void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) = 0;
  virtual void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) = 0;

  // ---- reductions -----------------------------------------------------------------------------
  // x is contiguous [outer, reduced, inner]; out is [outer, inner] (argmax/argmin: int64 indices
  // into the reduced dimension).
  virtual void reduce(ReduceOp op, const Tensor& x, const Tensor& out) = 0;
  // The gradient of amax/amin over the middle axis of a contiguous x [outer, reduced, inner] whose
  // extremes are kept [outer, inner], for gy [outer, inner]: gx [outer, reduced, inner] = hit *
  // (gy / count), hit 1 where x equals its extreme and count the hits of its run, as PyTorch 1.13
  // computes it (a NaN extreme equals nothing, so its run gets (gy / 0) * 0: NaN). The default
  // composes it from ops (eq, to, sum, div, mul); a kernel gives the same values bit for bit.
  virtual void extreme_backward(const Tensor& x, const Tensor& kept, const Tensor& gy,
                                const Tensor& gx);
  // out [outer, inner] = the sum over the middle axis of a * b, a and b contiguous [outer,
  // reduced, inner] of one floating dtype: mul's gradient for a factor broadcast along that axis,
  // without the full-size product written and read back. The default composes sum(mul(a, b)).
  virtual void product_sum(const Tensor& a, const Tensor& b, const Tensor& out);
  // Both gradients of mul(full, factor), full and gy contiguous [outer, reduced, inner] and the
  // contiguous factor [outer, inner] broadcast along the middle axis: g_full = gy * factor and
  // g_factor = product_sum(gy, full). The default runs the binary mul and product_sum; a kernel
  // reads gy once for both and gives the same bits.
  virtual void mul_gradients(const Tensor& gy, const Tensor& full, const Tensor& factor,
                             const Tensor& g_full, const Tensor& g_factor);
  // mean_amax over the middle axis of a contiguous floating x [outer, reduced > 0, inner]: out
  // [outer, 2, inner] = the mean (the sum rounded to x's dtype, times 1 / reduced rounded to it)
  // and the maximum (NaN propagating), as reduce's sum, mul by a scalar and reduce's max give
  // them. The default runs those three; a kernel reads x once and gives the same bits.
  virtual void mean_amax(const Tensor& x, const Tensor& out);
  // Its gradient for gy [outer, 2, inner], out the forward's: gx = gy_mean * (1 / reduced) + hit
  // * (gy_max / count), the sum of mean's and extreme_backward's gradients, or with `accumulate`
  // gx = gx + that (a gradient sum the backward sweep offers, autograd.h). The default composes it
  // from ops; a kernel gives the same bits in one pass.
  virtual void mean_amax_backward(const Tensor& x, const Tensor& out, const Tensor& gy,
                                  const Tensor& gx, bool accumulate = false);
  // CBAM's passes over x [outer, reduced, inner] (contiguous, floating) with a factor per run,
  // scale [outer, reduced] (broadcast along inner: the channel weights), and with mul3 a second
  // one per position, spatial [outer, inner] (broadcast along the middle axis), both contiguous,
  // none of the products x * scale written out.
  // out [outer, 2, inner] = mean_amax of the product x * scale, each product rounded to x's dtype
  // as mul writes it: mean_amax(mul(x, scale))'s bits.
  virtual void mean_amax_scaled(const Tensor& x, const Tensor& scale, const Tensor& out);
  // Its gradients for gy [outer, 2, inner], out the forward's: with gz mean_amax_backward's
  // gradient at the product, gx = gz * scale (or with `accumulate` gx + that) and g_scale = the
  // sum over inner of gz * x, mul's gradients of its factors: the composed formulas' bits.
  virtual void mean_amax_scaled_backward(const Tensor& x, const Tensor& scale, const Tensor& out,
                                         const Tensor& gy, const Tensor& gx, const Tensor& g_scale,
                                         bool accumulate = false);
  // out = (x * scale) * spatial, rounded as the two muls round it.
  virtual void mul3(const Tensor& x, const Tensor& scale, const Tensor& spatial, const Tensor& out);
  // out = relu(residual + (x * scale) * spatial) for residual of x's layout, rounded as mul3 and
  // add_relu round it: add_relu(residual, mul3(...))'s bits. (Its backward is add_relu's mask and
  // mul3_backward.)
  virtual void mul3_add_relu(const Tensor& residual, const Tensor& x, const Tensor& scale,
                             const Tensor& spatial, const Tensor& out);
  // Its gradients for gy of x's shape, the two muls': with g1 = gy * spatial, gx = g1 * scale,
  // g_scale = the sum over inner of g1 * x, g_spatial = the sum over the middle axis of gy * (x *
  // scale), each sum as mul's gradient for a broadcast factor adds it (mul_gradients). The default
  // composes them from ops; a kernel reads gy and x once for the three.
  virtual void mul3_backward(const Tensor& gy, const Tensor& x, const Tensor& scale,
                             const Tensor& spatial, const Tensor& gx, const Tensor& g_scale,
                             const Tensor& g_spatial);

  // ---- matmul ---------------------------------------------------------------------------------
  // out[b] = a[b] @ b[b], or out[b] += a[b] @ b[b] when `accumulate` (how linear() adds its bias
  // without a second pass). a is [B, M, K], b is [B, K, N], each with unit stride in one of its
  // two last dims (so a transposed operand is read in place); a batch stride of 0 broadcasts.
  // a and b share a dtype; out has it too, or is float32 when a and b are bfloat16 (mixed
  // precision: bfloat16 products accumulated and returned in float32, engine/autocast.h).
  virtual void matmul(const Tensor& a, const Tensor& b, const Tensor& out,
                      bool accumulate = false) = 0;
  // out[b] = a[b] @ b[b] + bias, the [N] bias added to every row, then with relu max(out, 0):
  // linear()'s and linear_relu()'s forward, operands as for matmul. The default writes the bias
  // into out, accumulates the product over it and applies unary relu (passes of their own over out,
  // which the GEMM reads back); a backend whose GEMM finishes each tile of out as it stores it
  // overrides this.
  virtual void matmul_plus_bias(const Tensor& a, const Tensor& b, const Tensor& bias,
                                const Tensor& out, bool relu = false);
  // Optional: a, b and out given as [B1, B2, M, K], [B1, B2, K, N] and [B1, B2, M, N] too, a grid
  // of products with a stride per batch dim (either may be 0), for operands whose batch dims do
  // not collapse to one stride: attention's heads, [B, T, H, d] viewed as [B, H, T, d], are then
  // read in place. Backends that say no here get 3-D operands only (matmul copies the rest);
  // those that say yes take both forms in matmul and matmul_rounding_to_bf16.
  virtual bool supports_matmul_with_two_batch_dims() const;
  // Optional: the same mixed-precision product with float32 a and b, each value rounded to
  // bfloat16 (to nearest even) inside the kernel, into a float32 out. It spares autocast a
  // rounded bfloat16 copy of every operand (the CPU's AMX GEMM rounds while it packs). Backends
  // without such a kernel keep the defaults (no, and a throw if called anyway), and matmul's
  // callers round the operands into bfloat16 tensors first.
  virtual bool supports_matmul_rounding_to_bf16() const;
  virtual void matmul_rounding_to_bf16(const Tensor& a, const Tensor& b, const Tensor& out,
                                       bool accumulate = false);

  // ---- convolution ----------------------------------------------------------------------------
  // im2col: x [N, C, H, W] (contiguous) -> cols [N, C * kh * kw, Ho * Wo], where
  // cols[n][(c * kh + i) * kw + j][oh * Wo + ow] = x[n][c][oh * sh - ph + i * dh][ow * sw - pw + j
  // * dw], or pad_value outside the input. A convolution is then a matmul of the weights by cols.
  virtual void im2col(const Tensor& x, const Window2d& window, const Tensor& cols,
                      double pad_value) = 0;
  // The adjoint of im2col: x[n][c][h][w] += every cols entry that im2col read from it (x
  // contiguous, accumulated into; padding positions are dropped).
  virtual void col2im(const Tensor& cols, const Window2d& window, const Tensor& x) = 0;

  // conv2d (PyTorch's conv2d, engine/ops.h): x [N, C, H, W] and weight [O, C / groups, kh, kw]
  // contiguous, bias [O] contiguous or undefined, the window's stride and padding already checked
  // against x (its dilation is 1). The default composes the op from the kernels above and
  // matmul: cols = im2col(x) [N, groups, K, L] (K = C / groups * kh * kw, L = Ho * Wo), y = the
  // weights [groups, O / groups, K] @ cols, one batched product, plus the bias; it keeps cols as
  // `saved`. The CPU's runs image by image on columns that stay in its L2 cache
  // (engine/cpu/conv2d_kernels.cpp) and saves nothing.
  virtual Conv2dForward conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                       const Window2d& window, int64_t groups);
  // From gy [N, O, Ho, Wo] (contiguous) and the forward's `saved`: gx = col2im(W^T @ gy),
  // gweight = sum over the images of gy @ cols^T, gbias = gy summed over N, Ho and Wo, each
  // overwritten. gx, gweight and gbias may each be undefined (not wanted). With `accumulate_gx`,
  // gx holds a sum the backward sweep offers (autograd.h) and x's gradient is added into it, gx =
  // gx + gradient element by element; the default makes the gradient apart and adds it.
  virtual void conv2d_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                               const Tensor& saved, const Window2d& window, int64_t groups,
                               const Tensor& gx, const Tensor& gweight, const Tensor& gbias,
                               bool accumulate_gx = false);
  // Whether conv2d_backward adds x's gradient into an offered sum in place, without making it
  // apart (conv2d's rule asks the sweep for the sum only then): the CPU's 1x1 kernel at stride 2
  // and above, whose gradient is zero at all but one position in stride^2. The default: nowhere.
  virtual bool conv2d_adds_into_gx(const Tensor& x, const Tensor& weight, const Window2d& window,
                                   int64_t groups) const;

  // ---- fused row kernels (contiguous, over the last dimension) ----------------------------------
  virtual void softmax(const Tensor& x, const Tensor& out, bool log) = 0;
  // gx from gy and the forward output y (y = softmax or log_softmax output).
  virtual void softmax_backward(const Tensor& gy, const Tensor& y, const Tensor& gx, bool log) = 0;
  // out = (x - mean) * rstd * weight + bias per row; mean/rstd are [rows] (saved for backward).
  // weight and bias may be undefined.
  virtual void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                          const Tensor& out, const Tensor& mean, const Tensor& rstd) = 0;
  // gweight/gbias may be undefined when weight/bias are.
  virtual void layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                                   const Tensor& mean, const Tensor& rstd, const Tensor& gx,
                                   const Tensor& gweight, const Tensor& gbias) = 0;

  // ---- batch normalization (x [N, C, ...] contiguous; statistics per channel c over N and the
  // trailing dims; mean, var, rstd [C] contiguous in x's dtype)
  // ------------------------------------- Training writes the batch's mean and biased variance into
  // mean and var; eval reads them (the running statistics). Both write rstd = 1 / sqrt(var + eps)
  // and out = (x - mean) * rstd * weight + bias; weight and bias [C] may be undefined; with relu,
  // out = max(that, 0) (NaN passes, as relu's). The default composes the formula from ops (a
  // backend without the kernel still runs it); the CPU's is fused.
  virtual void batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                          bool training, const Tensor& mean, const Tensor& var, const Tensor& rstd,
                          const Tensor& out, bool relu);
  // From the saved mean and rstd, with xhat = (x - mean) * rstd: gweight = sum(gy * xhat) and
  // gbias = sum(gy) per channel; gx = weight * rstd * (gy - mean(gy) - xhat * mean(gy * xhat)) in
  // training (the statistics depend on x), weight * rstd * gy in eval. gx, gweight and gbias may
  // each be undefined (not wanted); weight undefined means ones. A defined relu_output (the
  // forward's output with relu) masks gy first as relu_backward(gy, relu_output) does: 0 where the
  // output is <= 0. A kernel may instead recompute the output's sign from x, weight and bias (the
  // forward's, bias undefined meaning zeros) where it gets the forward's values bit for bit (the
  // CPU's float32 kernels do).
  virtual void batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                                   const Tensor& bias, const Tensor& mean, const Tensor& rstd,
                                   bool training, const Tensor& relu_output, const Tensor& gx,
                                   const Tensor& gweight, const Tensor& gbias);

  // ---- indexing (x contiguous, index int64 contiguous, bounds checked by the caller) ------------
  // out = x selected along `dim` at the 1-D `index`.
  virtual void index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) = 0;
  // out[..., index[i], ...] += src[..., i, ...] along `dim` (out contiguous, accumulated into).
  virtual void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;
  // torch.gather: out[i][j][k] = x[i][index[i][j][k]][k] (for dim 1); index has out's shape.
  virtual void gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) = 0;
  // The adjoint of gather: out[i][index[i][j][k]][k] += src[i][j][k].
  virtual void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) = 0;

  // ---- random (counter-based, see engine/random.h; out contiguous) ------------------------------
  virtual void random_uniform(const Tensor& out, uint64_t seed, uint64_t offset, double low,
                              double high) = 0;
  virtual void random_normal(const Tensor& out, uint64_t seed, uint64_t offset, double mean,
                             double std) = 0;
  // out = value with probability p else 0, in out's dtype. A value other than 1 is dropout's mask
  // with its 1 / (1 - p) scale folded in, which spares a pass over the mask.
  virtual void random_bernoulli(const Tensor& out, uint64_t seed, uint64_t offset, double p,
                                double value) = 0;
  // The same values drawn by example (engine/example_draws.h): row b of out (its first dim) is
  // example examples[b] (int64, on out's device), element (b, c1..c4) drawn by
  // philox::example_bernoulli(key, examples[b], c1..c4), the trailing dims right-aligned.
  virtual void random_bernoulli_by_example(const Tensor& out, uint64_t key, const Tensor& examples,
                                           double p, double value) = 0;

  // ---- dropout (x and gy contiguous, float32 or float64; 0 < p < 1) -----------------------------
  // out = x * m, m being the fill random_bernoulli (or random_bernoulli_by_example) draws from
  // `draws` with probability 1 - p and value 1 / (1 - p): bitwise that multiply. Returns the mask
  // dropout_backward reads, of x's shape in a form the backend chooses. The default draws the
  // float mask, multiplies and returns the mask; the CPU's fused kernel writes out and one byte
  // per element (bool: kept) in one pass.
  virtual Tensor dropout_forward(const Tensor& x, const DropoutDraws& draws, double p,
                                 const Tensor& out);
  // gx = gy * m from the mask dropout_forward returned: bitwise the multiply's backward.
  virtual void dropout_backward(const Tensor& gy, const Tensor& mask, double p, const Tensor& gx);
  // dropout of gelu(x), the feed-forward block's hidden activation, with the same draws and mask:
  // out = gelu(x) * m, bitwise unary(gelu, x) then dropout_forward; `gelu` is UnaryOp::gelu_erf or
  // gelu_tanh. The default runs those two; the CPU's kernel computes gelu(x) as it applies the
  // mask, so the activation is never written to memory and read back.
  virtual Tensor gelu_dropout_forward(const Tensor& x, UnaryOp gelu, const DropoutDraws& draws,
                                      double p, const Tensor& out);
  // gx = (gy * m) * gelu'(x), bitwise dropout_backward then binary(gelu_*_backward, ., x).
  virtual void gelu_dropout_backward(const Tensor& gy, const Tensor& x, UnaryOp gelu,
                                     const Tensor& mask, double p, const Tensor& gx);
  // A residual block's sum: out = residual + x * m (residual contiguous, x's shape and dtype),
  // bitwise dropout_forward then binary(add, residual, .), returning the same mask; its backward
  // is dropout_backward's. The default runs those two; the CPU's adds as it applies the mask.
  virtual Tensor dropout_add_forward(const Tensor& x, const Tensor& residual,
                                     const DropoutDraws& draws, double p, const Tensor& out);

  // ---- optimizer ------------------------------------------------------------------------------
  // One fused Adam/AdamW step over a contiguous parameter and its state (all same shape/dtype).
  // weight_decay is L2 (added to the gradient) unless decoupled (AdamW: param *= 1 - lr*wd).
  virtual void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                         const Tensor& exp_avg_sq, double lr, double beta1, double beta2,
                         double eps, double weight_decay, bool decoupled, int64_t step) = 0;
  // The same step for a list of parameters in one call (torch's foreach=True), each with its own
  // group's lr and weight decay and its own step count; every element bitwise what adam_step
  // computes for it. The default calls adam_step per parameter; the CPU's wakes its threads once
  // for the list.
  struct AdamParameter {
    Tensor param, grad, exp_avg, exp_avg_sq;
    double lr = 0, weight_decay = 0;
    int64_t step = 0;
  };
  virtual void adam_steps(const std::vector<AdamParameter>& list, double beta1, double beta2,
                          double eps, bool decoupled);

  // ---- gradient clipping (clip_grad_norm_) ----------------------------------------------------
  // The sum of x * x over every element of every tensor, each square rounded in its tensor's
  // floating dtype as torch's norm takes it. The default composes sum(square(x)) per tensor (each
  // tensor's sum rounded to its dtype) and totals them in float64; the CPU's kernel adds the
  // squares in float64 throughout.
  virtual double sum_of_squares(const std::vector<Tensor>& xs);
  // x *= scale in place for every tensor, scale rounded to the tensor's dtype first (mul_scalar's
  // bits). The default writes mul(x, scale) back with copy_.
  virtual void scale_(const std::vector<Tensor>& xs, double scale);

  // ---- fused attention (optional) -------------------------------------------------------------
  // Attention in one pass that never stores the T x S scores (engine/attention_problem.h): masks,
  // patterns and dropout as the problem says. A backend says which problems it takes in
  // supports_attention; nn falls back to attention composed from the kernels above for the rest.
  // The CPU's kernel takes every float32/float64 problem. The defaults translate the problem to
  // the device kernel below (one key-padding mask and a causal flag, engine/fused_attention_plan.h)
  // when the backend has one, and take no dropout.
  virtual bool supports_attention(const AttentionProblem& problem) const;
  virtual AttentionForward attention_forward(const AttentionProblem& problem);
  // grad_out is shaped like forward.out (any strides). `into`, when its tensors are defined, is
  // where the gradients go (shaped like q, k, v, e.g. views of one packed [.., T, 3E] tensor,
  // efficient_attention_packed's), and is returned; otherwise the backend allocates them. The
  // CPU's kernel writes rows in place, so it requires each one's last stride to be 1; the
  // default computes them apart and copies them in (any strides).
  virtual AttentionGradients attention_backward(const AttentionProblem& problem,
                                                const AttentionForward& forward,
                                                const Tensor& grad_out,
                                                const AttentionGradients& into);

  // The device kernel the defaults above are built on: softmax(scale * q k^T, with hidden keys at
  // -inf) v. q is [B, H, Tq, d], k and v [B, H, Tk, d], all contiguous; key_padding_mask is
  // undefined or a contiguous bool [B, Tk] (true = key hidden from every query of batch b);
  // `causal` hides key j from query i when j > i. A query that sees no key gets zeros and
  // lse = -inf. out is [B, H, Tq, d]; lse [B, H, Tq] is each query's log-sum-exp, kept for the
  // backward, which overwrites grad_q/grad_k/grad_v (shaped like q/k/v).
  //
  // A backend that has such a kernel says so in supports_fused_attention; the others keep the
  // defaults (no, and a throw if called anyway).
  virtual bool supports_fused_attention(DType dtype, int64_t head_dim, int64_t batch_heads) const;
  virtual void fused_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                                       const Tensor& key_padding_mask, bool causal, double scale,
                                       const Tensor& out, const Tensor& lse);
  virtual void fused_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                        const Tensor& key_padding_mask, bool causal, double scale,
                                        const Tensor& out, const Tensor& lse,
                                        const Tensor& grad_out, const Tensor& grad_q,
                                        const Tensor& grad_k, const Tensor& grad_v);

  // Optional: attention of one query row per (batch, head) for a decoding step, inference only.
  // q [B, H, 1, d] contiguous, k [B, H, S, d] and v [B, H, S, dv] each with one dense [S, d]
  // block per (batch, head) (a KV-cache buffer's first S positions qualify), key_padding_mask
  // undefined or contiguous bool [B, S]; out [B, H, 1, dv] = softmax(q k^T * scale) v, zeros
  // for a row whose keys are all padding. Backends without it say no (and throw if called).
  virtual bool supports_decode_attention(DType dtype) const;
  virtual void decode_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& key_padding_mask, double scale, const Tensor& out);
};

// The backend of a device. The CPU backend always exists; others register themselves.
Backend& backend_for(Device device);
void register_backend(DeviceKind kind, Backend* backend);
bool has_backend(DeviceKind kind);

}  // namespace qkv
