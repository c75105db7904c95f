// The CUDA implementation of qkv::Backend (internal to cuda/; users include cuda/cuda_backend.h).
//
// One backend object drives device 0 (the engine registers one backend per device kind). All
// kernels, copies and cuBLAS calls go to one stream, so work runs in the order it was issued and
// the caching allocator may hand a freed block to the next tensor at once. Kernels live in
// cuda/*_kernels.cu by family, matmul in cuda/matmul.cpp.
#pragma once

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <mutex>

#include "engine/backend.h"
#include "engine/caching_allocator.h"

namespace qkv::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int device_index);
  Device device() const override { return Device::cuda(device_index_); }

  void* allocate(size_t bytes) override { return allocator_.allocate(bytes); }
  void deallocate(void* ptr, size_t bytes) override { allocator_.deallocate(ptr, bytes); }
  MemoryStats memory_stats() const override { return allocator_.stats(); }
  void reset_peak_memory() override { allocator_.reset_peak(); }
  void copy_to_host(const void* src, void* dst, size_t bytes) override;
  void copy_from_host(const void* src, void* dst, size_t bytes) override;

  void copy(const Tensor& src, const Tensor& dst) override;
  void fill(const Tensor& dst, double value) override;
  void unary(UnaryOp op, const Tensor& x, const Tensor& out, double scalar) override;
  void binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void where(const Tensor& cond, const Tensor& a, const Tensor& b, const Tensor& out) override;
  void reduce(ReduceOp op, const Tensor& x, const Tensor& out) override;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out,
              bool accumulate = false) override;
  void im2col(const Tensor& x, const Window2d& window, const Tensor& cols,
              double pad_value) override;
  void col2im(const Tensor& cols, const Window2d& window, const Tensor& x) override;
  void softmax(const Tensor& x, const Tensor& out, bool log) override;
  void softmax_backward(const Tensor& gy, const Tensor& y, const Tensor& gx, bool log) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  const Tensor& out, const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, const Tensor& gx,
                           const Tensor& gweight, const Tensor& gbias) override;
  void index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) override;
  void index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;
  void gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) override;
  void scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) override;
  void random_uniform(const Tensor& out, uint64_t seed, uint64_t offset, double low,
                      double high) override;
  void random_normal(const Tensor& out, uint64_t seed, uint64_t offset, double mean,
                     double std) override;
  void random_bernoulli(const Tensor& out, uint64_t seed, uint64_t offset, double p,
                        double value) override;
  void random_bernoulli_by_example(const Tensor& out, uint64_t key, const Tensor& examples,
                                   double p, double value) override;
  void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, double lr, double beta1, double beta2, double eps,
                 double weight_decay, bool decoupled, int64_t step) override;
  // The flash kernels of cuda/flash_attention.h: float32, head width <= 128.
  bool supports_fused_attention(DType dtype, int64_t head_dim, int64_t batch_heads) const override;
  void fused_attention_forward(const Tensor& q, const Tensor& k, const Tensor& v,
                               const Tensor& key_padding_mask, bool causal, double scale,
                               const Tensor& out, const Tensor& lse) override;
  void fused_attention_backward(const Tensor& q, const Tensor& k, const Tensor& v,
                                const Tensor& key_padding_mask, bool causal, double scale,
                                const Tensor& out, const Tensor& lse, const Tensor& grad_out,
                                const Tensor& grad_q, const Tensor& grad_k,
                                const Tensor& grad_v) override;

  cudaStream_t stream() const { return stream_; }
  // Created on first use: initializing cuBLAS takes time and GPU memory that a run without a
  // product on the GPU need not pay.
  cublasHandle_t cublas();
  void synchronize() override;

 private:
  int device_index_;
  cudaStream_t stream_ = nullptr;
  std::once_flag cublas_once_;
  cublasHandle_t cublas_ = nullptr;
  // Reusing a freed block at once is safe: all work runs on one stream, so a kernel still reading
  // the block was queued before any kernel that writes its new owner.
  CachingAllocator allocator_;
};

// The registered backend (init() must have succeeded).
CudaBackend& cuda_backend();

}  // namespace qkv::cuda
