// The CUDA benchmarks' GPU side (train/bench/cuda_bench.h says what they measure), inside
// libqkv_cuda.so because they call cuBLAS and the flash kernels directly; `qkv bench` reaches them
// through the engine's loader (engine/device_loader.h) by their extern "C" names.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <string>

#include "cuda/cuda_backend.h"
#include "cuda/flash_attention.h"
#include "engine/autocast.h"
#include "engine/backend.h"
#include "engine/error.h"
#include "engine/ops.h"

namespace qkv::cuda {

namespace {

// Warm up once, then the mean of `reps` runs, with the device drained before and after so that
// queued work is counted.
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
  if (s != CUBLAS_STATUS_SUCCESS) throw Error("bench: a direct cuBLAS call failed");
}

enum class Precision { f32, tf32, bf16 };

void bench_matmul(cublasHandle_t handle, int64_t batch, int64_t m, int64_t n, int64_t k,
                  Precision precision) {
  cuda::set_allow_tf32(precision == Precision::tf32);
  const TensorOptions on_gpu{.device = Device::cuda()};
  Tensor a = randn({batch, m, k}, on_gpu), b = randn({batch, k, n}, on_gpu);
  Tensor c = Tensor::empty({batch, m, n}, DType::f32, Device::cuda());
  const double gflop = 2.0 * batch * m * n * k * 1e-9;
  const int reps = gflop > 100 ? 5 : 20;
  const double qkv_ms = time_ms(
      [&] {
        Autocast scope(precision == Precision::bf16 ? DType::bf16 : DType::f32);
        Tensor out = qkv::matmul(a, b);
      },
      reps);
  // cuBLAS directly: the same column-major trick (C^T = B^T A^T), the same types
  const bool bf16 = precision == Precision::bf16;
  const Tensor a_in = bf16 ? a.to(DType::bf16) : a, b_in = bf16 ? b.to(DType::bf16) : b;
  const cudaDataType_t in_type = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  const cublasComputeType_t compute =
      precision == Precision::tf32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  const float one = 1, zero = 0;
  const double ref_ms = time_ms(
      [&] {
        check(cublasGemmStridedBatchedEx(
            handle, CUBLAS_OP_N, CUBLAS_OP_N, int(n), int(m), int(k), &one, b_in.raw_data(),
            in_type, int(n), n * k, a_in.raw_data(), in_type, int(k), m * k, &zero, c.raw_data(),
            CUDA_R_32F, int(n), m * n, int(batch), compute, CUBLAS_GEMM_DEFAULT));
      },
      reps);
  char shape[64];
  std::snprintf(shape, sizeof shape, "%ldx%ldx%ldx%ld", long(batch), long(m), long(n), long(k));
  const char* name = precision == Precision::f32    ? "matmul f32"
                     : precision == Precision::tf32 ? "matmul f32 (tf32)"
                                                    : "matmul bf16 autocast";
  result(name, shape, qkv_ms, ref_ms, gflop, "cuBLAS");
  cuda::set_allow_tf32(false);
}

// tensor_cores: the bf16 kernels (what --precision bf16 runs), else the float32 ones.
void bench_attention(int64_t batch, int64_t heads, int64_t t, int64_t d, bool causal,
                     bool tensor_cores) {
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
  const auto forward =
      tensor_cores ? cuda::flash_attention_forward_bf16 : cuda::flash_attention_forward;
  const auto backward =
      tensor_cores ? cuda::flash_attention_backward_bf16 : cuda::flash_attention_backward;
  const double fwd_ms = time_ms([&] { forward(q, k, v, Tensor(), causal, scale, out, lse); }, reps);
  const double bwd_ms =
      time_ms([&] { backward(q, k, v, Tensor(), causal, scale, out, lse, go, gq, gk, gv); }, reps);
  // the composed reference materializes the [T, T] scores (forward only, float32)
  double composed_ms = NAN;
  if (!causal && !tensor_cores) {
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
  const std::string suffix = tensor_cores ? " bf16" : "";
  result((std::string(causal ? "flash fwd causal" : "flash fwd") + suffix).c_str(), desc, fwd_ms,
         composed_ms, fwd_gflop, "composed");
  // backward: about 2.5x the forward's flops (five T x T x d products against two)
  result((std::string(causal ? "flash bwd causal" : "flash bwd") + suffix).c_str(), desc, bwd_ms,
         NAN, 2.5 * fwd_gflop, "-");
}

void print_memory() {
  const MemoryStats m = backend_for(Device::cuda()).memory_stats();
  std::printf("device memory: peak %.1f MiB in use, %.1f MiB cached\n", m.peak_bytes / 1048576.0,
              m.bytes_cached / 1048576.0);
}

}  // namespace

}  // namespace qkv::cuda

// Called by train/bench/cuda_bench.cpp through the engine's loader, once the backend is registered.
extern "C" int qkv_cuda_matmul_bench() {
  using namespace qkv::cuda;
  std::printf("matmul on %s\n", status().c_str());
  cublasHandle_t handle;
  check(cublasCreate(&handle));
  for (Precision p : {Precision::f32, Precision::tf32, Precision::bf16}) {
    bench_matmul(handle, 1, 1024, 1024, 1024, p);
    bench_matmul(handle, 1, 4096, 4096, 4096, p);
    bench_matmul(handle, 64, 512, 512, 64, p);  // attention-shaped: many small products
  }
  cublasDestroy(handle);
  print_memory();
  return 0;
}

extern "C" int qkv_cuda_attention_bench() {
  using namespace qkv::cuda;
  std::printf("flash attention on %s\n", status().c_str());
  for (bool tensor_cores : {true, false})  // bf16 first: the lines issue #6's target compares
    for (int64_t t : {1024, 2048, 4096, 8192})
      for (bool causal : {false, true}) bench_attention(2, 8, t, 64, causal, tensor_cores);
  print_memory();
  return 0;
}
