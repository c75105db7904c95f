// CUDA benchmarks, for `qkv bench gemm --device cuda`, `qkv bench attention --device cuda` and
// tests/bench/bench_cuda (which tests/gpu/run.sh runs):
//
//   matmul     qkv::matmul against cublasGemmStridedBatchedEx called directly on the same
//              operands: float32, TF32, and bf16 products under Autocast (qkv's time then
//              includes rounding the float32 operands; cuBLAS is handed bf16 copies)
//   attention  the fused flash-attention kernels, forward and backward, T = 1024 ... 8192, d = 64,
//              against attention composed from qkv ops (the T x T scores materialized); the
//              tensor-core (bf16) kernels first, named "... bf16" like torch_reference.py's lines
//
// Each line starting "RESULT |" gives both times and their ratio (reference / qkv: above 1, qkv
// is faster); run.sh collects them into its summary table. Nothing is asserted: tests/cuda checks
// correctness. The GPU side lives in libqkv_cuda.so (cuda/bench/cuda_bench.cpp); without that
// library, a driver or a GPU these throw qkv::Error saying which is missing.
#pragma once

#include <string>

namespace qkv::bench {

bool cuda_bench_available();  // built with CUDA and a GPU is present (initializes the backend)
// device: "cuda" or "cuda:0" (the backend drives device 0); anything else is refused.
int run_cuda_matmul_bench(const std::string& device = "cuda");
int run_cuda_attention_bench(const std::string& device = "cuda");

}  // namespace qkv::bench
