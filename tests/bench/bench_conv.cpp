// Builds `bench_conv`: conv2d forward and forward+backward through the im2col op, beside the
// convolution composed from strided views (nn::pad2d + nn::unfold2d + matmul, the same result
// without the op), both measured in this run; then the CNN+CBAM step's convolutions (batch 128)
// by im2col + GEMM and by the direct convolution (engine/cpu/direct_conv.h), the backend's forward,
// weight gradient and input gradient kernels timed alone, with the FMA peak measured in the same
// run; the direct weight gradient split into its copies and its register tiles; the 1x1
// shortcuts warm and from memory; last the CNN's
// BatchNorm2d + ReLU as two ops and as the fused batch_norm_relu. Flag: --threads N.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/direct_conv.h"
#include "engine/cpu/winograd_conv.h"
#include "engine/ops.h"
#include "engine/parallel.h"
#include "nn/conv.h"
#include "train/bench/fma_peak.h"

using namespace qkv;

namespace {

// The fastest of `reps` calls of fn after one to warm up, with `before` (untimed) ahead of each.
double best_ms(const std::function<void()>& fn, int reps = 7,
               const std::function<void()>& before = {}) {
  fn();  // warm up the allocator's free lists and the thread pool
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    if (before) before();
    auto t0 = std::chrono::steady_clock::now();
    fn();
    best = std::min(
        best,
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return best;
}

// Writes 64 MB (more than the L3) each call, so that the next call finds its operands in memory,
// as the step's convolutions do.
std::function<void()> cache_evictor() {
  auto evict = std::make_shared<std::vector<char>>(size_t(64) << 20);
  auto round = std::make_shared<int>(0);
  return [evict, round] {
    ++*round;
    for (size_t i = 0; i < evict->size(); i += 64) (*evict)[i] = char(*round);
  };
}

// The reference: windows as a stack of strided views; autograd through view/stack/matmul.
Tensor conv_from_views(const Tensor& x, const Tensor& w, const Tensor& b, int64_t pad) {
  const int64_t B = x.size(0), O = w.size(0), K = w.size(1) * w.size(2) * w.size(3);
  Tensor win = nn::unfold2d(nn::pad2d(x, pad, pad), w.size(2), w.size(3), 1, 1);
  const int64_t Ho = win.size(4), Wo = win.size(5);
  Tensor y = matmul(w.reshape({O, K}), win.reshape({B, K, Ho * Wo})).reshape({B, O, Ho, Wo});
  return add(y, b.reshape({1, O, 1, 1}));
}

// The CNN+CBAM step's convolutions, the backend's kernels timed alone (best of 7): the forward,
// the weight gradient alone and the input gradient alone (conv2d_backward with only that output),
// by im2col and the GEMM and by the AVX-512 kernels (direct_conv.h, and pointwise_conv.h for the
// 1x1 shortcuts).
void direct_against_im2col() {
  const bool direct_here = cpu::direct_conv_enabled();
  std::printf(
      "\nthe CNN+CBAM step's convolutions, batch 128, GFLOP/s (im2col + GEMM / direct; 1x1:"
      " pointwise), %d"
      " threads; FMA peak %.1f GFLOP/s measured now%s\n",
      num_threads(), bench::measured_fma_peak_gflops(num_threads()),
      direct_here ? "" : " (no AVX-512: both columns are im2col)");
  std::printf("%-26s %6s %15s %15s %15s\n", "[N,C,H,W] -> O", "kernel", "forward", "weight grad",
              "input grad");
  struct Layer {
    int64_t c, h, o, k, stride, pad;
  };
  for (Layer l :
       {Layer{1, 28, 16, 3, 1, 1}, Layer{16, 28, 16, 3, 1, 1}, Layer{16, 28, 32, 3, 2, 1},
        Layer{32, 14, 32, 3, 1, 1}, Layer{32, 14, 64, 3, 2, 1}, Layer{64, 7, 64, 3, 1, 1},
        Layer{16, 28, 32, 1, 2, 0}, Layer{32, 14, 64, 1, 2, 0}, Layer{2, 28, 1, 7, 1, 3}}) {
    manual_seed(2);
    Tensor x = randn({128, l.c, l.h, l.h}), w = randn({l.o, l.c, l.k, l.k});
    const Window2d window{.kernel_h = l.k,
                          .kernel_w = l.k,
                          .stride_h = l.stride,
                          .stride_w = l.stride,
                          .pad_h = l.pad,
                          .pad_w = l.pad};
    Backend& cpu = x.backend();
    Tensor gy = cpu.conv2d_forward(x, w, Tensor(), window, 1).y;
    Tensor gx = Tensor::empty(x.shape()), gw = Tensor::empty(w.shape());
    const double flop = 2.0 * double(gy.numel()) * double(l.c * l.k * l.k);
    double rate[2][3];
    for (int direct = 0; direct < 2; ++direct) {
      cpu::set_direct_conv_enabled(direct == 1);
      const double f = best_ms([&] { cpu.conv2d_forward(x, w, Tensor(), window, 1); });
      const double wg = best_ms(
          [&] { cpu.conv2d_backward(gy, x, w, Tensor(), window, 1, Tensor(), gw, Tensor()); });
      const double xg = best_ms(
          [&] { cpu.conv2d_backward(gy, x, w, Tensor(), window, 1, gx, Tensor(), Tensor()); });
      rate[direct][0] = flop / f / 1e6, rate[direct][1] = flop / wg / 1e6;
      rate[direct][2] = flop / xg / 1e6;
    }
    cpu::set_direct_conv_enabled(true);
    char name[64], kernel[16];
    std::snprintf(name, sizeof name, "[128,%ld,%ld,%ld] -> %ld", long(l.c), long(l.h), long(l.h),
                  long(l.o));
    std::snprintf(kernel, sizeof kernel, "%ldx%ld/%ld", long(l.k), long(l.k), long(l.stride));
    std::printf("%-26s %6s", name, kernel);
    for (int part = 0; part < 3; ++part)
      std::printf("   %5.1f / %5.1f", rate[0][part], rate[1][part]);
    std::printf("\n");
  }
}

// The CNN's BatchNorm2d + ReLU (stem and blocks, training, batch 128): relu(batch_norm(x)) as two
// ops against the fused batch_norm_relu, forward alone and forward + backward, best of 15 each
// (the two alternate, so a noisy neighbour slows both).
void batch_norm_relu_against_two_ops() {
  std::printf("\nthe CNN's BatchNorm2d + ReLU, batch 128, float32, %d threads, ms\n",
              num_threads());
  std::printf("%-18s %12s %12s %7s %12s %12s %7s\n", "[N,C,H,W]", "two ops fwd", "fused fwd",
              "ratio", "two ops f+b", "fused f+b", "ratio");
  for (Shape shape : {Shape{128, 16, 28, 28}, Shape{128, 32, 14, 14}, Shape{128, 64, 7, 7}}) {
    manual_seed(2);
    Tensor x = randn(shape).requires_grad_(), g = randn(shape);
    Tensor w = add(randn({shape[1]}), 1.0).requires_grad_(), b = randn({shape[1]}).requires_grad_();
    auto forward = [&](bool fused) {
      return fused ? batch_norm_relu(x, Tensor(), Tensor(), w, b, true)
                   : relu(batch_norm(x, Tensor(), Tensor(), w, b, true));
    };
    double fwd[2] = {1e30, 1e30}, both[2] = {1e30, 1e30};
    for (int round = 0; round < 15; ++round)
      for (int fused = 0; fused < 2; ++fused) {
        fwd[fused] = std::min(fwd[fused], best_ms(
                                              [&] {
                                                NoGrad no_grad;
                                                forward(fused);
                                              },
                                              1));
        both[fused] = std::min(both[fused], best_ms(
                                                [&] {
                                                  forward(fused).backward(g);
                                                  x.zero_grad(), w.zero_grad(), b.zero_grad();
                                                },
                                                1));
      }
    std::printf("%-18s %12.3f %12.3f %6.2fx %12.3f %12.3f %6.2fx\n", shape_str(shape).c_str(),
                fwd[0], fwd[1], fwd[0] / fwd[1], both[0], both[1], both[0] / both[1]);
  }
}

// The direct weight gradient of the step's 3x3 layers split in two (one thread, 128 images, the
// inputs evicted from the caches first, as in the step, best of 7): the copies each pass of
// images makes (padded planes, gy transposed to [positions, channels]) and the register tiles
// that multiply them, both by the functions conv2d_backward calls (engine/cpu/direct_conv.h), in
// passes of the same 512 KB.
void weight_gradient_copies_against_tiles() {
  if (!cpu::direct_conv_enabled()) return;
  std::printf(
      "\nthe direct weight gradient, 128 images from memory, 1 thread: copies against tiles"
      " (best of 7); FMA peak %.1f GFLOP/s measured now\n",
      bench::measured_fma_peak_gflops(1));
  std::printf("%-26s %6s %12s %12s %12s %12s\n", "[N,C,H,W] -> O", "kernel", "copies ms",
              "(padding ms)", "tiles ms", "tiles GF/s");
  struct Layer {
    int64_t c, h, o, stride;
  };
  std::vector<char> evict(size_t(64) << 20);  // larger than the L3
  for (Layer l : {Layer{16, 28, 16, 1}, Layer{16, 28, 32, 2}, Layer{32, 14, 32, 1},
                  Layer{32, 14, 64, 2}, Layer{64, 7, 64, 1}}) {
    const cpu::DirectConvShape d(l.c, l.h, l.h, l.o, 3, 3, 1, 1, l.stride);
    const int64_t N = 128, L = d.Ho * d.Wo, image = l.c * l.h * l.h;
    manual_seed(2);
    Tensor x = randn({N, l.c, l.h, l.h}), gy = randn({N, l.o, d.Ho, d.Wo});
    const float* xs = x.data<float>();
    const float* gys = gy.data<float>();
    const int64_t per_pass = std::clamp<int64_t>(
        (int64_t(512) << 10) / int64_t(sizeof(float) * (d.padded_floats() + l.o * L)), 1, N);
    Tensor xp = Tensor::empty({per_pass * d.padded_floats()});
    Tensor gyt = Tensor::empty({per_pass * l.o * L});
    Tensor gwt = zeros({d.K * l.o});
    double copies = 1e30, padding = 1e30, tiles = 1e30;
    for (int round = 0; round < 7; ++round) {
      for (size_t i = 0; i < evict.size(); i += 64) evict[i] = char(round);
      double c = 0, p = 0, t = 0;
      for (int64_t first = 0; first < N; first += per_pass) {
        const int64_t images = std::min(per_pass, N - first);
        auto t0 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < images; ++i)
          cpu::direct_conv_pad(d, xs + (first + i) * image,
                               xp.data<float>() + i * d.padded_floats());
        auto t1 = std::chrono::steady_clock::now();
        for (int64_t i = 0; i < images; ++i)
          cpu::direct_conv_gy_transposed(d, gys + (first + i) * l.o * L,
                                         gyt.data<float>() + i * l.o * L);
        auto t2 = std::chrono::steady_clock::now();
        cpu::direct_conv_weight_grad_in_channel_lanes(d, images, xp.data<float>(),
                                                      gyt.data<float>(), gwt.data<float>());
        auto t3 = std::chrono::steady_clock::now();
        using ms = std::chrono::duration<double, std::milli>;
        p += ms(t1 - t0).count(), c += ms(t2 - t0).count(), t += ms(t3 - t2).count();
      }
      copies = std::min(copies, c), padding = std::min(padding, p), tiles = std::min(tiles, t);
    }
    const double flop = 2.0 * double(N * l.o * L * d.K);
    char name[64], kernel[16];
    std::snprintf(name, sizeof name, "[128,%ld,%ld,%ld] -> %ld", long(l.c), long(l.h), long(l.h),
                  long(l.o));
    std::snprintf(kernel, sizeof kernel, "3x3/%ld", long(l.stride));
    std::printf("%-26s %6s %12.3f %12.3f %12.3f %12.1f\n", name, kernel, copies, padding, tiles,
                flop / tiles / 1e6);
  }
}

// The 1x1 shortcuts from memory: in the step their input was written many megabytes before, so
// they read it from memory, where the stride-2 rows (every other row skipped) are read at the
// rate of what the prefetchers bring. conv2d_forward and conv2d_backward (gx and gw), the caches
// evicted before each call and, for comparison, warm (best of 7, ms).
void shortcuts_from_memory() {
  if (!cpu::direct_conv_enabled()) return;  // the pointwise kernel runs only where this one does
  std::printf("\nthe 1x1 shortcuts, batch 128, %d threads: warm / from memory (best of 7, ms)\n",
              num_threads());
  std::printf("%-26s %6s %17s %17s\n", "[N,C,H,W] -> O", "kernel", "forward", "backward");
  const std::function<void()> evict_caches = cache_evictor();
  struct Layer {
    int64_t c, h, o;
  };
  for (Layer l : {Layer{16, 28, 32}, Layer{32, 14, 64}}) {
    manual_seed(2);
    Tensor x = randn({128, l.c, l.h, l.h}), w = randn({l.o, l.c, 1, 1});
    const Window2d window{.stride_h = 2, .stride_w = 2};
    Backend& cpu = x.backend();
    Tensor gy = cpu.conv2d_forward(x, w, Tensor(), window, 1).y;
    Tensor gx = Tensor::empty(x.shape()), gw = Tensor::empty(w.shape());
    double ms[2][2];
    for (int cold = 0; cold < 2; ++cold) {
      const std::function<void()> before = cold ? evict_caches : nullptr;
      ms[cold][0] = best_ms([&] { cpu.conv2d_forward(x, w, Tensor(), window, 1); }, 7, before);
      ms[cold][1] = best_ms(
          [&] { cpu.conv2d_backward(gy, x, w, Tensor(), window, 1, gx, gw, Tensor()); }, 7, before);
    }
    char name[64];
    std::snprintf(name, sizeof name, "[128,%ld,%ld,%ld] -> %ld", long(l.c), long(l.h), long(l.h),
                  long(l.o));
    std::printf("%-26s %6s   %6.3f / %6.3f   %6.3f / %6.3f\n", name, "1x1/2", ms[0][0], ms[1][0],
                ms[0][1], ms[1][1]);
  }
}

// Winograd's F(2x2, 3x3) against the direct convolution on the 3x3 layers at stride 1 with padding
// 1: the CNN's three, and three where it is not taken because it was not faster (winograd_conv.h),
// taken here all the same. The forward and the input gradient (the forward of gy by the flipped
// kernel), warm and from memory as in the step (64 MB written before each call), best of 7, ms.
void winograd_against_direct() {
  if (!cpu::direct_conv_enabled()) return;  // both kernels need AVX-512
  std::printf(
      "\n3x3/1 convolutions, batch 128, %d threads: direct / Winograd F(2x2,3x3), warm and"
      " from memory (best of 7, ms)\n",
      num_threads());
  std::printf("%-26s %9s %17s %17s %17s %17s\n", "[N,C,H,W] -> O", "taken", "forward warm",
              "forward memory", "input grad warm", "input grad memory");
  const std::function<void()> evict_caches = cache_evictor();
  struct Layer {
    int64_t c, h, o;
  };
  for (Layer l : {Layer{16, 28, 16}, Layer{32, 14, 32}, Layer{64, 7, 64}, Layer{8, 28, 8},
                  Layer{16, 14, 16}, Layer{16, 7, 16}}) {
    manual_seed(2);
    Tensor x = randn({128, l.c, l.h, l.h}), w = randn({l.o, l.c, 3, 3});
    const Window2d window{.kernel_h = 3, .kernel_w = 3, .pad_h = 1, .pad_w = 1};
    Backend& cpu = x.backend();
    Tensor gy = cpu.conv2d_forward(x, w, Tensor(), window, 1).y;
    Tensor gx = Tensor::empty(x.shape());
    const bool taken = cpu::winograd_conv_takes(l.c, l.h, l.h, l.o);
    double ms[2][4];  // direct, Winograd; forward and gx, warm and from memory
    for (int winograd = 0; winograd < 2; ++winograd) {
      cpu::set_winograd_conv_use(winograd ? cpu::WinogradUse::always : cpu::WinogradUse::off);
      for (int cold = 0; cold < 2; ++cold) {
        const std::function<void()> before = cold ? evict_caches : nullptr;
        ms[winograd][cold] =
            best_ms([&] { cpu.conv2d_forward(x, w, Tensor(), window, 1); }, 7, before);
        ms[winograd][2 + cold] = best_ms(
            [&] { cpu.conv2d_backward(gy, x, w, Tensor(), window, 1, gx, Tensor(), Tensor()); }, 7,
            before);
      }
    }
    cpu::set_winograd_conv_use(cpu::WinogradUse::where_faster);
    char name[64];
    std::snprintf(name, sizeof name, "[128,%ld,%ld,%ld] -> %ld", long(l.c), long(l.h), long(l.h),
                  long(l.o));
    std::printf("%-26s %9s", name, taken ? "yes" : "no");
    for (int part = 0; part < 4; ++part) std::printf("   %6.3f / %6.3f", ms[0][part], ms[1][part]);
    std::printf("\n");
  }
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
  direct_against_im2col();
  weight_gradient_copies_against_tiles();
  shortcuts_from_memory();
  winograd_against_direct();
  batch_norm_relu_against_two_ops();
  return 0;
}
