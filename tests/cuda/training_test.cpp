// A short training run on CUDA against the same run on the CPU: a tiny translation transformer
// (tests/cuda/tiny_translation.h: copy task, 1+1 layers, d_model 32, 4 heads, dropout 0) from
// identical initial weights, the same 40 batches in the same order. Every kernel of a training
// step takes part (embedding gather and its index_add backward, matmuls, layer norms, fused
// attention with padding and causal masks, cross-entropy ignoring padding, the optimizer), so a
// wrong one shows as loss curves that part.
//
// Tolerances. Both sides compute in float32, in different orders (cuBLAS vs the CPU GEMM, the
// flash kernels' sequential sums, index_add's atomics). The first loss comes from identical
// weights, so only a forward pass's rounding separates it (1e-5 relative). After that the runs
// drift apart as training amplifies rounding, at a rate that was measured on the CPU by running
// the same loop twice, the second time from weights multiplied by (1 + u), u uniform in
// [-eps, eps] - eps = 1e-6 is about ten float32 ulps, eps = 1e-4 far more than reordering sums
// does - 5 to 8 seeds per setting:
//   - SGD (momentum 0.9, lr 0.03): at most 5e-6 relative for eps = 1e-6, 4.5e-5 for eps = 1e-4.
//     kSgdTol = 2e-4. Bugs emulated the same way (one parameter's gradient zeroed, e.g. the
//     self-attention key projection, the cross-attention values, a layer norm's weight or the
//     output bias) moved the curve by 1.8e-3 to 1.9e-2, so any of them fails this check.
//   - Adam (lr 3e-3), the trainer's optimizer: dividing by the gradient's RMS turns tiny
//     gradient differences into updates of up to lr, and the drift saturates near 1e-3 whatever
//     the perturbation (at most 8.6e-4 over 24 runs). kAdamTol = 5e-3: a coarser check, which
//     zeroed attention-projection gradients still exceed (2e-2 to 6e-2).
// Each run must also learn (the loss falls by a fifth at least), so the curves are worth comparing.
#include <algorithm>
#include <cmath>
#include <functional>
#include <memory>

#include "engine/autograd.h"
#include "tests/cuda/gpu_test_support.h"
#include "tests/cuda/tiny_translation.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

namespace {

constexpr int kSteps = 40;
constexpr double kFirstStepTol = 1e-5;  // relative: identical weights, one forward pass
constexpr double kSgdTol = 2e-4;        // relative, every step
constexpr double kAdamTol = 5e-3;       // relative, every step
constexpr double kMinDecrease = 0.2;    // last loss <= (1 - this) x first loss

using MakeOptimizer = std::function<std::unique_ptr<nn::Optimizer>(std::vector<Tensor>)>;

void compare_runs(const std::string& name, const MakeOptimizer& make_optimizer, double tol) {
  BOOST_TEST_CONTEXT(name) {
    const std::vector<TranslationBatch> batches = copy_task_batches(kSteps, 16, 10, 5);
    manual_seed(3);
    models::Seq2SeqTransformer cpu_model(tiny_translation_config());
    models::Seq2SeqTransformer gpu_model(tiny_translation_config());
    gpu_model.load_state_dict(cpu_model.state_dict());
    gpu_model.to(Device::cuda());

    const auto cpu_optimizer = make_optimizer(cpu_model.parameters());
    const std::vector<double> cpu_losses =
        train_steps(cpu_model, batches, Device::cpu(), *cpu_optimizer);
    RecordedOps trace;
    const auto gpu_optimizer = make_optimizer(gpu_model.parameters());
    const std::vector<double> gpu_losses =
        train_steps(gpu_model, batches, Device::cuda(), *gpu_optimizer);
    const std::vector<std::string> ops = trace.names();

    // attention ran on the fused kernel (encoder, decoder self- and cross-attention all qualify)
    BOOST_TEST((std::find(ops.begin(), ops.end(), "efficient_attention") != ops.end()));
    BOOST_TEST((std::find(ops.begin(), ops.end(), "softmax") == ops.end()));

    BOOST_REQUIRE_EQUAL(gpu_losses.size(), cpu_losses.size());
    BOOST_TEST(cpu_losses.back() <= (1 - kMinDecrease) * cpu_losses.front(),
               "the CPU run did not learn: " << cpu_losses.front() << " -> " << cpu_losses.back());
    for (size_t i = 0; i < cpu_losses.size(); ++i) {
      const double bound = (i == 0 ? kFirstStepTol : tol) * std::abs(cpu_losses[i]);
      BOOST_TEST(std::abs(gpu_losses[i] - cpu_losses[i]) <= bound,
                 "step " << i << ": GPU loss " << gpu_losses[i] << ", CPU loss " << cpu_losses[i]);
    }
  }
}

}  // namespace

BOOST_AUTO_TEST_SUITE(training)

BOOST_AUTO_TEST_CASE(short_run_matches_the_cpu_loss_curve, *utf::precondition(gpu_present)) {
  compare_runs(
      "SGD",
      [](std::vector<Tensor> params) {
        return std::make_unique<nn::SGD>(std::move(params), 0.03, nn::SGDOptions{.momentum = 0.9});
      },
      kSgdTol);
  compare_runs(
      "Adam",
      [](std::vector<Tensor> params) {
        return std::make_unique<nn::Adam>(std::move(params), 3e-3);
      },
      kAdamTol);
}

BOOST_AUTO_TEST_SUITE_END()
