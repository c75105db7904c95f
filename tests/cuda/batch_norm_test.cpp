// The batch_norm and batch_norm_relu ops on the GPU (Backend's composed default kernels) against
// the CPU's fused ones: output, running statistics and the gradients of x, weight and bias, in
// training and eval.
#include "tests/cuda/gpu_test_support.h"

using namespace qkv;
using namespace qkv::test;
namespace utf = boost::unit_test;

BOOST_AUTO_TEST_SUITE(batch_norm_op)

BOOST_AUTO_TEST_CASE(batch_norm_forward_backward_and_running_statistics,
                     *utf::precondition(gpu_present)) {
  for (DType t : {DType::f32, DType::f64})
    for (bool relu : {false, true})
      for (bool training : {true, false}) {
        const std::string what = std::string(relu ? "batch_norm_relu " : "batch_norm ") +
                                 dtype_name(t) + (training ? " training" : " eval");
        // an offset mean makes the two-pass statistics matter
        Tensor x = random_tensor({6, 5, 7, 9}, t, 3, 5, 81);
        Tensor gy = random_tensor({6, 5, 7, 9}, t, -1, 1, 82);
        Tensor w = random_tensor({5}, t, 0.5, 1.5, 83), b = random_tensor({5}, t, -1, 1, 84);
        Tensor mean_cpu = random_tensor({5}, t, -1, 1, 85),
               var_cpu = random_tensor({5}, t, 1, 2, 86);
        Tensor mean_gpu = on_gpu(mean_cpu), var_gpu = on_gpu(var_cpu);
        std::vector<Tensor> results[2];
        for (int side = 0; side < 2; ++side) {
          const bool gpu_side = side == 1;
          Tensor xs = (gpu_side ? on_gpu(x) : x.detach().clone()).requires_grad_();
          Tensor ws = (gpu_side ? on_gpu(w) : w.detach().clone()).requires_grad_();
          Tensor bs = (gpu_side ? on_gpu(b) : b.detach().clone()).requires_grad_();
          Tensor y = (relu ? batch_norm_relu : batch_norm)(xs, gpu_side ? mean_gpu : mean_cpu,
                                                           gpu_side ? var_gpu : var_cpu, ws, bs,
                                                           training, 0.2, 1e-5);
          y.backward(gpu_side ? on_gpu(gy) : gy);
          results[side] = {y, xs.grad(), ws.grad(), bs.grad()};
        }
        const char* names[] = {" y", " grad x", " grad weight", " grad bias"};
        for (int i = 0; i < 4; ++i)
          check_close(results[1][i], results[0][i], 64 * tolerance(t), what + names[i]);
        check_close(mean_gpu, mean_cpu, 8 * tolerance(t), what + " running_mean");
        check_close(var_gpu, var_cpu, 8 * tolerance(t), what + " running_var");
      }
}

BOOST_AUTO_TEST_SUITE_END()
