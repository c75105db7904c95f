// The differentiable operations on tensors (and the factories that make tensors).
//
// Each op validates its inputs (throwing qkv::Error that names the op and the shapes/dtypes),
// runs its kernel through the inputs' backend and records its backward rule (engine/autograd.h).
// Implementations are grouped by family in engine/ops/*.cpp, forward and backward side by side.
#pragma once

#include <optional>
#include <vector>

#include "engine/autograd.h"
#include "engine/random.h"
#include "engine/tensor.h"

namespace qkv {

// ---- factories (engine/ops/factory.cpp)
// -----------------------------------------------------------
Tensor zeros(const Shape& shape, TensorOptions opts = {});
Tensor ones(const Shape& shape, TensorOptions opts = {});
Tensor full(const Shape& shape, double value, TensorOptions opts = {});
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
Tensor full_like(const Tensor& t, double value);
Tensor arange(double start, double end, double step = 1, TensorOptions opts = {});
Tensor arange(int64_t end, TensorOptions opts = {.dtype = DType::i64});
Tensor rand(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);   // U[0,1)
Tensor randn(const Shape& shape, TensorOptions opts = {}, Generator* gen = nullptr);  // N(0,1)
Tensor uniform(const Shape& shape, double low, double high, TensorOptions opts = {},
               Generator* gen = nullptr);
// `value` (1 unless given) with probability p, else 0. Dropout's mask holds 1 / (1 - p), its scale:
// dropout(x) is bitwise mul(x, bernoulli(x.shape(), 1 - p, ..., 1 / (1 - p))).
Tensor bernoulli(const Shape& shape, double p, TensorOptions opts = {}, Generator* gen = nullptr,
                 double value = 1);
// From host values (row-major), converted to opts.dtype. numel(shape) must equal values.size();
// an empty shape means 1-D of values.size().
Tensor tensor(const std::vector<double>& values, const Shape& shape = {}, TensorOptions opts = {});
Tensor tensor_i64(const std::vector<int64_t>& values, const Shape& shape = {},
                  Device device = Device::cpu());
Tensor scalar_tensor(double value, TensorOptions opts = {});

// ---- views and shape (engine/ops/view_ops.cpp): share storage when possible
// ------------------------
Tensor reshape(const Tensor& x, const Shape& shape);  // one dim may be -1; copies if it must
Tensor view(const Tensor& x, const Shape& shape);     // like reshape, but never copies (throws)
Tensor permute(const Tensor& x, const std::vector<int>& dims);
Tensor transpose(const Tensor& x, int dim0, int dim1);
Tensor narrow(const Tensor& x, int dim, int64_t start, int64_t length);
Tensor select(const Tensor& x, int dim, int64_t index);  // narrow + squeeze
Tensor expand(const Tensor& x, const Shape& shape);      // -1 keeps a dim
Tensor squeeze(const Tensor& x, int dim);
Tensor unsqueeze(const Tensor& x, int dim);
Tensor flatten(const Tensor& x, int start_dim = 0, int end_dim = -1);
Tensor contiguous(const Tensor& x);
Tensor clone(const Tensor& x);
Tensor cast(const Tensor& x, DType dtype);  // differentiable between floating types
Tensor to_device(const Tensor& x, Device device);
// Sums `g` down to `shape` (the adjoint of broadcasting `shape` to g's shape).
Tensor sum_to(const Tensor& g, const Shape& shape);

// ---- elementwise (engine/ops/elementwise.cpp)
// -------------------------------------------------------
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor tanh(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor relu(const Tensor& x);
// relu(add(a, b)) in one pass each way (a residual block's sum and ReLU): the same values and
// gradients, without add's output written and read back. Broadcasts as add.
Tensor add_relu(const Tensor& a, const Tensor& b);
enum class GeluApprox { none, tanh };
Tensor gelu(const Tensor& x, GeluApprox approximate = GeluApprox::none);
Tensor square(const Tensor& x);

Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor rsub(const Tensor& a, double b);  // b - a

// Comparisons produce bool masks (no gradient).
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, double b);
Tensor lt(const Tensor& a, double b);
Tensor gt(const Tensor& a, double b);
Tensor logical_and(const Tensor& a, const Tensor& b);
Tensor logical_or(const Tensor& a, const Tensor& b);
Tensor logical_not(const Tensor& a);

// cond ? a : b, broadcasting all three; cond is bool.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
Tensor where(const Tensor& cond, const Tensor& a, double b);
Tensor where(const Tensor& cond, double a, const Tensor& b);
// x with `value` wherever mask (bool, broadcast to x) is true.
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// ---- reductions (engine/ops/reduce.cpp); empty dims = all dims
// --------------------------------------
Tensor sum(const Tensor& x, std::vector<int> dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, std::vector<int> dims = {}, bool keepdim = false);
Tensor var(const Tensor& x, std::vector<int> dims = {}, bool unbiased = true, bool keepdim = false);
// Maximum/minimum values; the gradient is shared equally among tied maxima (PyTorch's amax).
Tensor amax(const Tensor& x, std::vector<int> dims = {}, bool keepdim = false);
Tensor amin(const Tensor& x, std::vector<int> dims = {}, bool keepdim = false);
// torch.stack((x.mean(dims), x.amax(dims)), dims.front()) over adjacent dims: the mean and the
// maximum side by side where the dims were, [N, C, 2] for x [N, C, H, W] and dims {2, 3}, [N, 2,
// H, W] for dims {1}: CBAM's two poolings, each one pass over x instead of two, each gradient one
// full-size write instead of amax's and two sums of full-size gradients. float32 and float64.
Tensor mean_amax(const Tensor& x, std::vector<int> dims);
// CBAM's spatial pooling of its channel-weighted input, mean_amax(mul(x, scale), {1}) for x [N,
// C, ...] and scale [N, C, 1, ...], without the product written out: the same values and
// gradients, bit for bit (engine/ops/cbam_ops.cpp). float32 and float64.
Tensor mean_amax_scaled(const Tensor& x, const Tensor& scale);
// CBAM's output, mul(mul(x, scale), spatial) for scale [N, C, 1, ...] and spatial [N, 1, ...],
// without x * scale written out: the same values and gradients, bit for bit.
Tensor mul3(const Tensor& x, const Tensor& scale, const Tensor& spatial);
// A residual block's end after CBAM, add_relu(residual, mul3(x, scale, spatial)) for residual of
// x's shape, without the product written out: the same values and gradients, bit for bit.
Tensor mul3_add_relu(const Tensor& residual, const Tensor& x, const Tensor& scale,
                     const Tensor& spatial);
Tensor argmax(const Tensor& x, int dim, bool keepdim = false);  // int64
Tensor argmin(const Tensor& x, int dim, bool keepdim = false);
// torch.max(x, dim): values and indices.
struct ValuesIndices {
  Tensor values, indices;
};
ValuesIndices max(const Tensor& x, int dim, bool keepdim = false);
ValuesIndices min(const Tensor& x, int dim, bool keepdim = false);

// ---- linear algebra (engine/ops/matmul.cpp)
// --------------------------------------------------------- torch.matmul: 1-D operands are
// promoted, batch dimensions broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// torch.nn.functional.linear: x [..., in] @ weight [out, in]^T + bias [out] (bias may be
// undefined). One GEMM; the CPU's adds the bias as it stores each tile (Backend::matmul_plus_bias).
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// relu(linear(x, weight, bias)), the ReLU applied by the same GEMM as it stores each tile (a
// feed-forward block's first layer): the same values, one pass over the output fewer.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());
// relu's gradient: 0 where x <= 0, else gy (PyTorch's threshold_backward at 0: a NaN x passes gy).
Tensor relu_backward(const Tensor& gy, const Tensor& x);
// gelu's gradient in one pass: gy * gelu'(x) (PyTorch's gelu_backward), the derivative of the
// approximation gelu used.
Tensor gelu_backward(const Tensor& gy, const Tensor& x, GeluApprox approximate = GeluApprox::none);

// ---- neural-network primitives (engine/ops/nn_ops.cpp)
// -----------------------------------------------
Tensor softmax(const Tensor& x, int dim);
Tensor log_softmax(const Tensor& x, int dim);
// Normalizes over the trailing dims given by normalized_shape; weight/bias optional.
Tensor layer_norm(const Tensor& x, const Shape& normalized_shape, const Tensor& weight = Tensor(),
                  const Tensor& bias = Tensor(), double eps = 1e-5);
// torch.nn.functional.batch_norm over x [N, C, ...] (engine/ops/batch_norm.cpp): per channel,
// training normalizes with the batch's mean and biased variance and, where running_mean /
// running_var are defined, folds them in (running = (1 - momentum) * running + momentum * batch,
// the variance unbiased); eval normalizes with running_mean / running_var (both required). Then
// the affine weight / bias [C] (optional). The running statistics may be of any floating dtype.
Tensor batch_norm(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                  const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                  bool training = false, double momentum = 0.1, double eps = 1e-5);
// relu(batch_norm(...)) with the same arguments, the ReLU fused into batch_norm's kernels (no
// separate pass forward or backward); the same values and gradients as the two ops.
Tensor batch_norm_relu(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                       const Tensor& weight = Tensor(), const Tensor& bias = Tensor(),
                       bool training = false, double momentum = 0.1, double eps = 1e-5);
// Rows of weight [num, dim] at the int64 indices (any shape) -> indices.shape + [dim].
Tensor embedding(const Tensor& weight, const Tensor& indices);
// Zeroes elements with probability p and scales the rest by 1/(1-p) when training: one recorded op
// drawing its decisions as that Bernoulli fill would (engine/ops/dropout.cpp). x itself when not
// training or p = 0, x * 0 when p = 1 (PyTorch's F.dropout); float32 or float64.
Tensor dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr);
// dropout(gelu(x, approximate), p, training, gen): the same values, gradients and draws, in one
// pass over memory each way on the CPU (a feed-forward block's hidden activation).
Tensor gelu_dropout(const Tensor& x, double p, bool training = true, Generator* gen = nullptr,
                    GeluApprox approximate = GeluApprox::none);
// add(residual, dropout(x, p, training, gen)): a residual block's sum, the same values, gradients
// and draws in one pass over memory on the CPU. residual has x's dtype and device; one that
// broadcasts to x's shape is added by add, after the dropout.
Tensor dropout_add(const Tensor& x, const Tensor& residual, double p, bool training = true,
                   Generator* gen = nullptr);
// Mean (or sum/none) of -log_softmax(logits)[target], logits [N, C] or [N, C, d...] and targets
// [N] or [N, d...] int64; ignore_index targets contribute nothing (mean divides by the others).
enum class Reduction { none, mean, sum };
Tensor cross_entropy(const Tensor& logits, const Tensor& target, int64_t ignore_index = -100,
                     double label_smoothing = 0.0, Reduction reduction = Reduction::mean);
// Same, from log-probabilities.
Tensor nll_loss(const Tensor& log_probs, const Tensor& target, int64_t ignore_index = -100,
                Reduction reduction = Reduction::mean);

// ---- convolution and pooling over [N, C, H, W] (engine/ops/conv_ops.cpp), through im2col -------
// torch.nn.functional.conv2d: weight [O, C / groups, kh, kw], bias [O] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor(),
              int64_t stride = 1, int64_t padding = 0, int64_t groups = 1);
// Square windows; stride < 0 means stride = kernel_size. Max pooling pads with -inf (never
// chosen); average pooling pads with zeros counted in the mean (count_include_pad=True).
Tensor max_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride = -1, int64_t padding = 0);
Tensor avg_pool2d(const Tensor& x, int64_t kernel_size, int64_t stride = -1, int64_t padding = 0);

// ---- joining and indexing (engine/ops/index_ops.cpp)
// --------------------------------------------------
Tensor cat(const std::vector<Tensor>& tensors, int dim);
Tensor stack(const std::vector<Tensor>& tensors, int dim);
std::vector<Tensor> split(const Tensor& x, int64_t split_size, int dim);
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int dim);
Tensor index_select(const Tensor& x, int dim, const Tensor& index);
Tensor gather(const Tensor& x, int dim, const Tensor& index);

// ---- operators
// --------------------------------------------------------------------------------------
inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator-(const Tensor& a) { return neg(a); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(const Tensor& a, double b) { return add(a, -b); }
inline Tensor operator-(double a, const Tensor& b) { return rsub(b, a); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(const Tensor& a, double b) { return mul(a, 1.0 / b); }

// ---- in-place updates used by optimizers (no autograd; the caller holds NoGrad)
// ------------------ dst (a leaf or a buffer) takes the values of src (same shape; broadcasting src
// allowed).
void copy_(const Tensor& dst, const Tensor& src);
void fill_(const Tensor& dst, double value);

}  // namespace qkv
