// Backend's default multi-tensor Adam step: adam_step per parameter, what a backend without a
// list kernel of its own (CUDA) runs. The CPU's is one job over the list
// (engine/cpu/adam_kernel.cpp).
#include "engine/backend.h"

namespace qkv {

void Backend::adam_steps(const std::vector<AdamParameter>& list, double beta1, double beta2,
                         double eps, bool decoupled) {
  for (const AdamParameter& a : list)
    adam_step(a.param, a.grad, a.exp_avg, a.exp_avg_sq, a.lr, beta1, beta2, eps, a.weight_decay,
              decoupled, a.step);
}

}  // namespace qkv
