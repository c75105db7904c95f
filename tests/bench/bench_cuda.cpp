// CUDA benchmarks: qkv's matmul against cuBLAS called directly, and the fused flash attention
// against attention composed from qkv ops. Prints GFLOP/s and ratios measured in the same run;
// asserts nothing (tests/cuda checks correctness). Lines starting "RESULT |" are collected into
// the summary table by tests/gpu/run.sh.
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>

#include "engine/backend.h"
#include "engine/error.h"
#include "engine/ops.h"

#ifdef QKV_WITH_CUDA
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include "cuda/cuda_backend.h"
#include "cuda/flash_attention.h"
#endif

#ifndef QKV_WITH_CUDA
int main() {
  std::printf("bench_cuda: built without CUDA, nothing to measure\n");
  return 0;
}
#else

using namespace qkv;

namespace {

// Median-free and simple: warm up, then the mean of `reps` runs, with the device drained before
// and after so queued work is counted.
double time_ms(const std::function<void()>& run, int reps) {
  run();
  cuda::synchronize();
  cudaDeviceSynchronize();
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) run();
  cuda::synchronize();
  cudaDeviceSynchronize();
  const auto stop = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(stop - start).count() / reps;
}

void result(const char* what, const std::string& shape, double qkv_ms, double ref_ms, double gflop,
            const char* ref_name) {
  const double gflops = gflop / (qkv_ms * 1e-3);
  if (std::isnan(ref_ms))
    std::printf("RESULT | %-20s | %-22s | qkv %9.3f ms %9.1f GFLOP/s | %-8s %9s    | ratio  -\n",
                what, shape.c_str(), qkv_ms, gflops, ref_name, "-");
  else
    std::printf(
        "RESULT | %-20s | %-22s | qkv %9.3f ms %9.1f GFLOP/s | %-8s %9.3f ms | ratio %.2f\n", what,
        shape.c_str(), qkv_ms, gflops, ref_name, ref_ms, ref_ms / qkv_ms);
  std::fflush(stdout);
}

void check(cublasStatus_t s) {
  if (s != CUBLAS_STATUS_SUCCESS) throw Error("bench_cuda: a direct cuBLAS call failed");
}

void bench_matmul(cublasHandle_t handle, int64_t batch, int64_t m, int64_t n, int64_t k,
                  bool tf32) {
  cuda::set_allow_tf32(tf32);
  const TensorOptions on_gpu{.device = Device::cuda()};
  Tensor a = randn({batch, m, k}, on_gpu), b = randn({batch, k, n}, on_gpu);
  Tensor c = Tensor::empty({batch, m, n}, DType::f32, Device::cuda());
  const double gflop = 2.0 * batch * m * n * k * 1e-9;
  const int reps = gflop > 100 ? 5 : 20;
  const double qkv_ms = time_ms([&] { Tensor out = qkv::matmul(a, b); }, reps);
  // cuBLAS directly: the same column-major trick (C^T = B^T A^T), the same compute type
  const float one = 1, zero = 0;
  const cublasComputeType_t compute = tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const double ref_ms = time_ms(
      [&] {
        check(cublasGemmStridedBatchedEx(
            handle, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k), &one, b.raw_data(),
            CUDA_R_32F, int(n), n * k, a.raw_data(), CUDA_R_32F, int(k), m * k, &zero, c.raw_data(),
            CUDA_R_32F, int(n), m * n, int(batch), compute, CUBLAS_GEMM_DEFAULT));
      },
      reps);
  char shape[64];
  std::snprintf(shape, sizeof shape, "%ldx%ldx%ldx%ld", long(batch), long(m), long(n), long(k));
  result(tf32 ? "matmul f32 (tf32)" : "matmul f32", shape, qkv_ms, ref_ms, gflop, "cuBLAS");
  cuda::set_allow_tf32(false);
}

void bench_attention(int64_t batch, int64_t heads, int64_t t, int64_t d, bool causal) {
  const TensorOptions on_gpu{.device = Device::cuda()};
  const Shape shape{batch, heads, t, d};
  Tensor q = randn(shape, on_gpu), k = randn(shape, on_gpu), v = randn(shape, on_gpu);
  Tensor go = randn(shape, on_gpu);
  Tensor out = Tensor::empty(shape, DType::f32, Device::cuda());
  Tensor lse = Tensor::empty({batch, heads, t}, DType::f32, Device::cuda());
  Tensor gq = Tensor::empty(shape, DType::f32, Device::cuda()), gk = gq.clone(), gv = gq.clone();
  const double scale = 1 / std::sqrt(double(d));
  // forward: QK^T and PV, 2 flops per multiply-add; causal does about half
  const double fwd_gflop = 4.0 * batch * heads * t * t * d * 1e-9 * (causal ? 0.5 : 1);
  const int reps = t >= 4096 ? 3 : 10;
  const double fwd_ms = time_ms(
      [&] { cuda::flash_attention_forward(q, k, v, Tensor(), causal, scale, out, lse); }, reps);
  const double bwd_ms = time_ms(
      [&] {
        cuda::flash_attention_backward(q, k, v, Tensor(), causal, scale, out, lse, go, gq, gk, gv);
      },
      reps);
  // the composed reference materializes the [T, T] scores (forward only)
  double composed_ms = NAN;
  if (!causal) {
    composed_ms = time_ms(
        [&] {
          NoGrad no_grad;
          Tensor o = qkv::matmul(softmax(qkv::matmul(q, k.transpose(-1, -2)) * scale, -1), v);
        },
        reps);
  }
  char desc[64];
  std::snprintf(desc, sizeof desc, "B%ld H%ld T%ld d%ld", long(batch), long(heads), long(t),
                long(d));
  result(causal ? "flash fwd causal" : "flash fwd", desc, fwd_ms, composed_ms, fwd_gflop,
         "composed");
  // backward: about 2.5x the forward's flops (five T x T x d products against two)
  result(causal ? "flash bwd causal" : "flash bwd", desc, bwd_ms, NAN, 2.5 * fwd_gflop, "-");
}

}  // namespace

int main() {
  if (!cuda::init()) {
    std::printf("bench_cuda: no GPU (%s), nothing to measure\n", cuda::status().c_str());
    return 0;
  }
  std::printf("bench_cuda on %s\n", cuda::status().c_str());
  cublasHandle_t handle;
  check(cublasCreate(&handle));
  for (bool tf32 : {false, true}) {
    bench_matmul(handle, 1, 1024, 1024, 1024, tf32);
    bench_matmul(handle, 1, 4096, 4096, 4096, tf32);
    bench_matmul(handle, 64, 512, 512, 64, tf32);  // attention-shaped: many small products
  }
  for (int64_t t : {1024, 2048, 4096, 8192})
    for (bool causal : {false, true}) bench_attention(2, 8, t, 64, causal);
  cublasDestroy(handle);
  const MemoryStats m = backend_for(Device::cuda()).memory_stats();
  std::printf("device memory: peak %.1f MiB in use, %.1f MiB cached\n", m.peak_bytes / 1048576.0,
              m.bytes_cached / 1048576.0);
  return 0;
}

#endif
