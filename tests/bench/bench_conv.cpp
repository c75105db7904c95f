// Builds `bench_conv`: conv2d forward and forward+backward through the im2col op, beside the
// convolution composed from strided views (nn::pad2d + nn::unfold2d + matmul, the same result
// without the op), both measured in this run. Flag: --threads N.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>

#include "engine/ops.h"
#include "engine/parallel.h"
#include "nn/conv.h"

using namespace qkv;

namespace {

double best_ms(const std::function<void()>& fn, int reps = 7) {
  fn();  // warm up the allocator's free lists and the thread pool
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// The reference: windows as a stack of strided views; autograd through view/stack/matmul.
Tensor conv_from_views(const Tensor& x, const Tensor& w, const Tensor& b, int64_t pad) {
  const int64_t B = x.size(0), O = w.size(0), K = w.size(1) * w.size(2) * w.size(3);
  Tensor win = nn::unfold2d(nn::pad2d(x, pad, pad), w.size(2), w.size(3), 1, 1);
  const int64_t Ho = win.size(4), Wo = win.size(5);
  Tensor y = matmul(w.reshape({O, K}), win.reshape({B, K, Ho * Wo})).reshape({B, O, Ho, Wo});
  return add(y, b.reshape({1, O, 1, 1}));
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i)
    if (!std::strcmp(argv[i], "--threads") && i + 1 < argc) set_num_threads(std::atoi(argv[++i]));
  std::printf("conv2d 3x3, padding 1, float32, %d threads (best of 7, ms)\n", num_threads());
  std::printf("%-22s %10s %10s %10s %10s %8s\n", "shape [N,C,H,W]->O", "views fwd", "op fwd",
              "views f+b", "op f+b", "speedup");
  struct Shape4 {
    int64_t n, c, h, w, o;
  };
  for (Shape4 s :
       {Shape4{64, 16, 28, 28, 16}, Shape4{64, 3, 32, 32, 32}, Shape4{32, 64, 14, 14, 64}}) {
    manual_seed(1);
    Tensor x = randn({s.n, s.c, s.h, s.w}).requires_grad_();
    Tensor w = randn({s.o, s.c, 3, 3}).requires_grad_();
    Tensor b = randn({s.o}).requires_grad_();
    auto fwd = [&](bool op) {
      NoGrad no_grad;
      return op ? conv2d(x, w, b, 1, 1) : conv_from_views(x, w, b, 1);
    };
    auto step = [&](bool op) {
      Tensor y = op ? conv2d(x, w, b, 1, 1) : conv_from_views(x, w, b, 1);
      sum(y).backward();
      x.zero_grad(), w.zero_grad(), b.zero_grad();
    };
    const double vf = best_ms([&] { fwd(false); }), of = best_ms([&] { fwd(true); });
    const double vb = best_ms([&] { step(false); }), ob = best_ms([&] { step(true); });
    char name[64];
    std::snprintf(name, sizeof name, "[%ld,%ld,%ld,%ld]->%ld", long(s.n), long(s.c), long(s.h),
                  long(s.w), long(s.o));
    std::printf("%-22s %10.2f %10.2f %10.2f %10.2f %7.1fx\n", name, vf, of, vb, ob, vb / ob);
  }
  return 0;
}
