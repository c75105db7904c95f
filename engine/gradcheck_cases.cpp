// One gradcheck case per differentiable engine op (see engine/op_registry.h). Shapes are small
// (numeric differentiation costs two forward passes per input element) but exercise what can go
// wrong: broadcasting, non-contiguous inputs, batch dims, masks, ignored targets, and the branches
// of a formula that lie outside [-2, 2] (in_range).
#include "engine/autograd.h"
#include "engine/example_draws.h"
#include "engine/op_registry.h"
#include "engine/ops.h"

namespace qkv {

namespace {
using X = const std::vector<Tensor>&;
}

void register_engine_gradcheck_cases(OpRegistry& r) {
  const LayerCases add_case{r, "engine", ""};
  const Domain pos = Domain::positive, away = Domain::away;

  // views and shapes (sum over a non-contiguous result checks the strides too)
  add_case("reshape", {{{2, 3, 4}}}, [](X x) { return reshape(transpose(x[0], 0, 2), {4, 6}); });
  add_case("view", {{{2, 3, 4}}}, [](X x) { return view(x[0], {6, -1}); });
  add_case("permute", {{{2, 3, 4}}}, [](X x) { return permute(x[0], {2, 0, 1}); });
  add_case("transpose", {{{3, 4}}}, [](X x) { return transpose(x[0], 0, 1); });
  add_case("narrow", {{{4, 5}}}, [](X x) { return narrow(x[0], 1, 1, 3); });
  add_case("select", {{{4, 5}}}, [](X x) { return select(x[0], 0, 2); });
  add_case("expand", {{{3, 1}}}, [](X x) { return expand(x[0], {2, 3, 4}); });
  add_case("squeeze", {{{3, 1, 2}}}, [](X x) { return squeeze(x[0], 1); });
  add_case("unsqueeze", {{{3, 2}}}, [](X x) { return unsqueeze(x[0], 1); });
  add_case("flatten", {{{2, 3, 2}}}, [](X x) { return flatten(x[0], 1); });
  add_case("contiguous", {{{3, 4}}}, [](X x) { return contiguous(transpose(x[0], 0, 1)); });
  add_case("clone", {{{3, 4}}}, [](X x) { return clone(x[0]); });
  // float32 in the middle: a coarse step keeps the difference far above float32 rounding
  add_case("cast", {{{3, 4}}}, [](X x) { return cast(cast(x[0], DType::f32), DType::f64); },
           {.eps = 1e-2, .atol = 1e-3, .rtol = 1e-2});
  // the same round trip through float32 on the GPU (CUDA kernels run float32)
  r.add({"to_device",
         "engine",
         {{{3, 4}}},
         [](X x) {
           Tensor on_gpu = to_device(cast(x[0], DType::f32), Device::cuda());
           return cast(to_device(on_gpu, Device::cpu()), DType::f64);
         },
         {.eps = 1e-2, .atol = 1e-3, .rtol = 1e-2},
         /*needs_cuda=*/true});

  // unary
  add_case("neg", {{{3, 4}}}, [](X x) { return neg(x[0]); });
  add_case("exp", {{{3, 4}}}, [](X x) { return exp(x[0]); });
  add_case("log", {{{3, 4}, pos}}, [](X x) { return log(x[0]); });
  add_case("sqrt", {{{3, 4}, pos}}, [](X x) { return sqrt(x[0]); });
  add_case("rsqrt", {{{3, 4}, pos}}, [](X x) { return rsqrt(x[0]); });
  add_case("abs", {{{3, 4}, away}}, [](X x) { return abs(x[0]); });
  add_case("pow", {{{3, 4}, pos}}, [](X x) { return pow(x[0], 2.5); });
  add_case("square", {{{3, 4}}}, [](X x) { return square(x[0]); });
  add_case("tanh", {{{3, 4}}}, [](X x) { return tanh(x[0]); });
  add_case("tanh", {in_range({3, 4}, -8, 8)}, [](X x) { return tanh(x[0]); });  // saturated
  // far into saturation on both sides: exp(x) / (1 + exp(x)) alone would be inf / inf above 709
  add_case("sigmoid", {{{3, 4}}}, [](X x) { return sigmoid(x[0]); });
  add_case("sigmoid", {in_range({3, 4}, -800, 800)}, [](X x) { return sigmoid(x[0]); });
  add_case("relu", {{{3, 4}, away}}, [](X x) { return relu(x[0]); });
  // add_relu: b within 0.1 of zero keeps a + b clear of the kink; broadcast b as a bias row
  add_case("add_relu", {{{3, 4}, away}, in_range({3, 4}, -0.1, 0.1)},
           [](X x) { return add_relu(x[0], x[1]); });
  add_case("add_relu.broadcast", {{{3, 4}, away}, in_range({4}, -0.1, 0.1)},
           [](X x) { return add_relu(x[0], x[1]); });
  // relu's backward op records only when a gradient is taken with create_graph
  add_case("relu_backward", {{{3, 4}, away}}, [](X x) {
    EnableGrad recording;
    return grad(sum(mul(relu(x[0]), x[0])), {x[0]}, Tensor(), false, /*create_graph=*/true)[0];
  });
  for (GeluApprox a : {GeluApprox::none, GeluApprox::tanh}) {
    add_case("gelu", {{{3, 4}}}, [a](X x) { return gelu(x[0], a); });
    add_case("gelu", {in_range({3, 4}, -7, 7)}, [a](X x) { return gelu(x[0], a); });
    // gelu's backward is an op of its own (so that gelu's gradient is differentiable): it
    // records only when a gradient is taken with create_graph. gy = x[1] makes the result depend
    // on both of its inputs: gelu'(x[0]) * x[1].
    add_case("gelu_backward", {in_range({3, 4}, -5, 5), {{3, 4}}}, [a](X x) {
      EnableGrad recording;  // gradcheck's finite differences run under NoGrad
      return grad(sum(mul(gelu(x[0], a), x[1])), {x[0]}, Tensor(), false, /*create_graph=*/true)[0];
    });
  }

  // binary with broadcasting
  add_case("add", {{{2, 3, 4}}, {{3, 1}}}, [](X x) { return add(x[0], x[1]); });
  add_case("sub", {{{2, 3, 4}}, {{4}}}, [](X x) { return sub(x[0], x[1]); });
  add_case("mul", {{{2, 1, 4}}, {{3, 1}}}, [](X x) { return mul(x[0], x[1]); });
  add_case("div", {{{2, 3}}, {{3}, pos}}, [](X x) { return div(x[0], x[1]); });
  add_case("maximum", {{{3, 4}}, {{4}}}, [](X x) { return maximum(x[0], x[1]); });
  add_case("minimum", {{{3, 4}}, {{3, 4}}}, [](X x) { return minimum(x[0], x[1]); });
  add_case("add_scalar", {{{3, 4}}}, [](X x) { return add(x[0], 1.5); });
  add_case("mul_scalar", {{{3, 4}}}, [](X x) { return mul(x[0], -2.5); });
  add_case("rsub_scalar", {{{3, 4}}}, [](X x) { return rsub(x[0], 3.0); });
  add_case("where", {{{3, 4}, Domain::mask}, {{3, 4}}, {{4}}},
           [](X x) { return where(x[0], x[1], x[2]); });
  add_case("masked_fill", {{{3, 4}}, {{1, 4}, Domain::mask}},
           [](X x) { return masked_fill(x[0], x[1], -1.0); });

  // reductions
  add_case("sum", {{{2, 3, 4}}}, [](X x) { return sum(x[0], {0, 2}, true); });
  add_case("mean", {{{2, 3, 4}}}, [](X x) { return mean(x[0], {1}); });
  add_case("var", {{{3, 5}}}, [](X x) { return var(x[0], {1}); });
  add_case("amax", {{{3, 5}}}, [](X x) { return amax(x[0], {1}); });
  add_case("amin", {{{3, 5}}}, [](X x) { return amin(x[0], {0}, true); });
  add_case("mean_amax", {{{2, 3, 2, 2}}}, [](X x) { return mean_amax(x[0], {2, 3}); });
  add_case("mean_amax.middle", {{{2, 3, 4}}}, [](X x) { return mean_amax(x[0], {1}); });
  // CBAM's passes with a factor per channel (and per position): the gradients of all inputs
  add_case("mean_amax_scaled", {{{2, 3, 2, 2}}, {{2, 3, 1, 1}}},
           [](X x) { return mean_amax_scaled(x[0], x[1]); });
  add_case("mul3", {{{2, 3, 2, 2}}, {{2, 3, 1, 1}}, {{2, 1, 2, 2}}},
           [](X x) { return mul3(x[0], x[1], x[2]); });
  // the product within 0.1 of zero keeps residual + product clear of the kink
  add_case("mul3_add_relu",
           {{{2, 3, 2, 2}, away},
            in_range({2, 3, 2, 2}, -0.5, 0.5),
            in_range({2, 3, 1, 1}, -0.5, 0.5),
            in_range({2, 1, 2, 2}, -0.4, 0.4)},
           [](X x) { return mul3_add_relu(x[0], x[1], x[2], x[3]); });

  // linear algebra: batch broadcasting, a transposed operand, vectors
  add_case("matmul", {{{2, 3, 4}}, {{4, 5}}}, [](X x) { return matmul(x[0], x[1]); });
  add_case("matmul", {{{2, 1, 3, 4}}, {{3, 5, 4}}},
           [](X x) { return matmul(x[0], transpose(x[1], -1, -2)); });
  add_case("matmul", {{{4}}, {{4, 3}}}, [](X x) { return matmul(x[0], x[1]); });
  // attention's heads: [B, L, H, d] viewed as [B, H, L, d] (two batch strides, read in place)
  add_case("matmul", {{{2, 3, 2, 4}}, {{2, 5, 2, 4}}}, [](X x) {
    return matmul(transpose(x[0], 1, 2), transpose(transpose(x[1], 1, 2), -1, -2));
  });
  // linear: with a bias, without one, a 1-D input, and a weight that is itself a transposed view
  add_case("linear", {{{2, 3, 4}}, {{5, 4}}, {{5}}}, [](X x) { return linear(x[0], x[1], x[2]); });
  add_case("linear", {{{3, 4}}, {{2, 4}}}, [](X x) { return linear(x[0], x[1]); });
  add_case("linear", {{{4}}, {{3, 4}}, {{3}}}, [](X x) { return linear(x[0], x[1], x[2]); });
  add_case("linear", {{{3, 4}}, {{4, 5}}, {{5}}},
           [](X x) { return linear(x[0], transpose(x[1], 0, 1), x[2]); });
  // linear_relu: the ReLU in the GEMM's epilogue (with a bias), composed after it (without)
  add_case("linear_relu", {{{2, 3, 4}}, {{5, 4}}, {{5}}},
           [](X x) { return linear_relu(x[0], x[1], x[2]); });
  add_case("linear_relu", {{{3, 4}}, {{2, 4}}}, [](X x) { return linear_relu(x[0], x[1]); });

  // neural-network primitives
  add_case("softmax", {{{3, 5}}}, [](X x) { return softmax(x[0], 1); });
  add_case("softmax", {{{4, 3, 2}}}, [](X x) { return softmax(x[0], 0); });
  add_case("log_softmax", {{{3, 5}}}, [](X x) { return log_softmax(x[0], -1); });
  // logits whose exp overflows float64: only the max-subtracted form stays finite
  add_case("softmax", {in_range({3, 5}, -800, 800)}, [](X x) { return softmax(x[0], 1); });
  add_case("log_softmax", {in_range({3, 5}, -800, 800)}, [](X x) { return log_softmax(x[0], 1); });
  add_case("layer_norm", {{{3, 6}}, {{6}}, {{6}}},
           [](X x) { return layer_norm(x[0], {6}, x[1], x[2]); });
  add_case("layer_norm", {{{2, 2, 3}}}, [](X x) { return layer_norm(x[0], {2, 3}); });
  // batch_norm: training (the statistics depend on x) with and without the affine, eval (running
  // statistics held constant), and a channel whose values are equal to within 1e-9 (gradcheck
  // draws from a non-empty range): its variance, under 1e-18, vanishes beside eps, so rstd is
  // 1 / sqrt(eps) and xhat about 0, the constant channel the closed form must still get right
  add_case("batch_norm", {{{2, 3, 2, 2}}, {{3}}, {{3}}},
           [](X x) { return batch_norm(x[0], Tensor(), Tensor(), x[1], x[2], true); });
  add_case("batch_norm", {{{4, 2, 3}}}, [](X x) {
    return batch_norm(x[0], Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-3);
  });
  add_case("batch_norm", {{{2, 3, 2, 2}}, {{3}}, {{3}}}, [](X x) {
    const Tensor running_mean = tensor({0.25, -0.5, 1.0}, {3}, {.dtype = DType::f64});
    const Tensor running_var = tensor({0.6, 1.3, 2.0}, {3}, {.dtype = DType::f64});
    return batch_norm(x[0], running_mean, running_var, x[1], x[2], false);
  });
  add_case("batch_norm", {{{2, 2, 2, 2}}, in_range({2, 1, 2, 2}, 0.7, 0.7 + 1e-9), {{3}}, {{3}}},
           [](X x) {
             return batch_norm(cat({x[0], x[1]}, 1), Tensor(), Tensor(), x[2], x[3], true);
           });
  // batch_norm_relu: training with the affine, and eval; the bias keeps some outputs clipped
  add_case("batch_norm_relu", {{{3, 2, 2, 2}}, {{2}}, {{2}}},
           [](X x) { return batch_norm_relu(x[0], Tensor(), Tensor(), x[1], x[2], true); });
  add_case("batch_norm_relu", {{{2, 3, 2, 2}}}, [](X x) {
    const Tensor running_mean = tensor({0.25, -0.5, 1.0}, {3}, {.dtype = DType::f64});
    const Tensor running_var = tensor({0.6, 1.3, 2.0}, {3}, {.dtype = DType::f64});
    return batch_norm_relu(x[0], running_mean, running_var, Tensor(), Tensor(), false);
  });
  add_case("embedding", {{{5, 3}}, {{2, 4}, Domain::index, 5}},
           [](X x) { return embedding(x[0], x[1]); });
  add_case("dropout", {{{4, 5}}}, [](X x) {
    Generator gen(7);  // the same mask on every evaluation
    return dropout(x[0], 0.3, true, &gen);
  });
  add_case("dropout", {{{3, 2, 5}}}, [](X x) {
    Generator gen(7);
    const ExampleDraws draws(gen, {4, 0, 9});  // the rows' masks drawn by example
    return dropout(x[0], 0.5, true, &gen);
  });
  add_case("gelu_dropout", {{{4, 5}}}, [](X x) {
    Generator gen(7);
    return gelu_dropout(x[0], 0.3, true, &gen);
  });
  add_case("gelu_dropout", {{{3, 2, 5}}}, [](X x) {
    Generator gen(7);
    const ExampleDraws draws(gen, {4, 0, 9});
    return gelu_dropout(x[0], 0.5, true, &gen, GeluApprox::tanh);
  });
  add_case("dropout_add", {{{4, 5}}, {{4, 5}}}, [](X x) {
    Generator gen(7);
    return dropout_add(x[0], x[1], 0.3, true, &gen);
  });
  add_case("dropout_add", {{{3, 2, 5}}, {{3, 2, 5}}}, [](X x) {
    Generator gen(7);
    const ExampleDraws draws(gen, {4, 0, 9});
    return dropout_add(x[0], x[1], 0.5, true, &gen);
  });
  add_case("cross_entropy", {{{4, 5}}, {{4}, Domain::index, 5}},
           [](X x) { return cross_entropy(x[0], x[1]); });
  add_case("cross_entropy", {in_range({4, 5}, -800, 800), {{4}, Domain::index, 5}},
           [](X x) { return cross_entropy(x[0], x[1]); });
  add_case("cross_entropy", {{{2, 5, 3}}, {{2, 3}, Domain::index, 5}}, [](X x) {
    // label smoothing, and target class 0 ignored
    return cross_entropy(x[0], x[1], 0, 0.1);
  });
  add_case("nll_loss", {{{4, 5}}, {{4}, Domain::index, 5}},
           [](X x) { return nll_loss(log_softmax(x[0], 1), x[1], -100, Reduction::sum); });

  // convolution and pooling: padding, stride 2 with a remainder, groups, a non-square kernel
  add_case("conv2d", {{{2, 3, 5, 4}}, {{4, 3, 3, 2}}, {{4}}},
           [](X x) { return conv2d(x[0], x[1], x[2], 1, 1); });
  add_case("conv2d", {{{1, 4, 7, 6}}, {{6, 2, 3, 3}}},
           [](X x) { return conv2d(x[0], x[1], Tensor(), 2, 1, 2); });
  // random inputs almost never tie, where max pooling's gradient jumps
  add_case("max_pool2d", {{{2, 2, 5, 6}}}, [](X x) { return max_pool2d(x[0], 3, 2, 1); });
  add_case("avg_pool2d", {{{2, 2, 5, 5}}}, [](X x) { return avg_pool2d(x[0], 3, 2, 1); });

  // joining and indexing
  add_case("cat", {{{2, 3}}, {{2, 2}}}, [](X x) { return cat({x[0], x[1]}, 1); });
  add_case("stack", {{{2, 3}}, {{2, 3}}}, [](X x) { return stack({x[0], x[1]}, 0); });
  add_case("split", {{{5, 2}}}, [](X x) {
    auto parts = split(x[0], 2, 0);
    return mul(parts[0], parts[1]);  // uses two of the three pieces
  });
  add_case("chunk", {{{2, 6}}}, [](X x) {
    auto parts = chunk(x[0], 3, 1);
    return sub(parts[2], parts[0]);
  });
  add_case("index_select", {{{5, 3}}, {{7}, Domain::index, 5}},
           [](X x) { return index_select(x[0], 0, x[1]); });
  add_case("gather", {{{3, 4}}, {{3, 2}, Domain::index, 4}},
           [](X x) { return gather(x[0], 1, x[1]); });
}

}  // namespace qkv
