// `qkv demo`: a few seconds of real training with nothing but the engine - a two-layer MLP
// learning to tell two interleaved spirals apart. It shows the whole loop a learner writes first:
// forward, loss, backward, optimizer step, and a falling loss with a rising accuracy.
#include <chrono>
#include <cmath>
#include <cstdio>

#include "engine/backend.h"
#include "engine/ops.h"
#include "train/commands/commands.h"

namespace qkv::cli {

namespace {

// Two spirals of n points each, in 2-D; label 0 for one arm, 1 for the other.
void make_spirals(int n, Generator& gen, Tensor& x, Tensor& y) {
  Tensor noise = randn({2 * n, 2}, {}, &gen);
  std::vector<double> pts, labels;
  auto nv = noise.to_vector<double>();
  for (int arm = 0; arm < 2; ++arm)
    for (int i = 0; i < n; ++i) {
      double t = 0.25 + 3.0 * M_PI * i / n;  // angle grows along the arm
      double r = t / (3.0 * M_PI);
      double sign = arm == 0 ? 1 : -1;
      int k = arm * n + i;
      pts.push_back(sign * r * std::cos(t) + 0.02 * nv[2 * k]);
      pts.push_back(sign * r * std::sin(t) + 0.02 * nv[2 * k + 1]);
      labels.push_back(arm);
    }
  x = tensor(pts, {2 * n, 2});
  y = tensor(labels, {2 * n}).to(DType::i64);
}

Tensor parameter(const Shape& shape, double scale, Generator& gen) {
  return mul(randn(shape, {}, &gen), scale).detach().requires_grad_();
}

}  // namespace

int demo_command(const DemoOptions& options) {
  Generator gen(options.seed);
  Tensor x, y;
  make_spirals(500, gen, x, y);
  const int hidden = 64;
  std::vector<Tensor> params = {parameter({2, hidden}, 1.0, gen),
                                zeros({hidden}, {.requires_grad = true}),
                                parameter({hidden, hidden}, 1.0 / std::sqrt(hidden), gen),
                                zeros({hidden}, {.requires_grad = true}),
                                parameter({hidden, 2}, 1.0 / std::sqrt(hidden), gen),
                                zeros({2}, {.requires_grad = true})};
  std::vector<Tensor> m, v;
  for (const Tensor& p : params) m.push_back(zeros_like(p)), v.push_back(zeros_like(p));
  auto forward = [&](const Tensor& in) {
    Tensor h = tanh(add(matmul(in, params[0]), params[1]));
    h = gelu(add(matmul(h, params[2]), params[3]));
    return add(matmul(h, params[4]), params[5]);
  };
  auto accuracy = [&] {
    NoGrad no_grad;
    return mean(eq(argmax(forward(x), 1), y).to(DType::f32)).item();
  };
  std::printf("demo: a 2-64-64-2 MLP learning two spirals (1000 points) with Adam\n");
  auto start = std::chrono::steady_clock::now();
  for (int step = 1; step <= options.steps; ++step) {
    Tensor loss = cross_entropy(forward(x), y);
    for (Tensor& p : params) p.zero_grad();
    loss.backward();
    for (size_t i = 0; i < params.size(); ++i)
      params[i].backend().adam_step(params[i], params[i].grad(), m[i], v[i], 0.01, 0.9, 0.999, 1e-8,
                                    0.0, false, step);
    if (step == 1 || step % 100 == 0)
      std::printf("step %4d  loss %.4f  accuracy %.3f\n", step, loss.item(), accuracy());
  }
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  double acc = accuracy();
  std::printf("final training accuracy %.3f after %d steps in %.1f s\n", acc, options.steps,
              seconds);
  return acc > 0.9 ? 0 : 1;
}

}  // namespace qkv::cli
