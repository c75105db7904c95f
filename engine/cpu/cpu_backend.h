// The CPU implementation of Backend. Kernels live in engine/cpu/*_kernels.cpp by family.
#pragma once

#include "engine/backend.h"
#include "engine/caching_allocator.h"

namespace qkv::cpu {

class CpuBackend final : public Backend {
 public:
  CpuBackend();
  Device device() const override { return Device::cpu(); }

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
  void extreme_backward(const Tensor& x, const Tensor& kept, const Tensor& gy,
                        const Tensor& gx) override;  // engine/cpu/reduction_gradients.cpp
  void product_sum(const Tensor& a, const Tensor& b, const Tensor& out) override;
  void mul_gradients(const Tensor& gy, const Tensor& full, const Tensor& factor,
                     const Tensor& g_full, const Tensor& g_factor) override;
  void mean_amax(const Tensor& x, const Tensor& out) override;
  void mean_amax_backward(const Tensor& x, const Tensor& out, const Tensor& gy, const Tensor& gx,
                          bool accumulate = false) override;
  // CBAM's passes with the channel weights folded in: engine/cpu/cbam_kernels.cpp
  void mean_amax_scaled(const Tensor& x, const Tensor& scale, const Tensor& out) override;
  void mean_amax_scaled_backward(const Tensor& x, const Tensor& scale, const Tensor& out,
                                 const Tensor& gy, const Tensor& gx, const Tensor& g_scale,
                                 bool accumulate = false) override;
  void mul3(const Tensor& x, const Tensor& scale, const Tensor& spatial,
            const Tensor& out) override;
  void mul3_add_relu(const Tensor& residual, const Tensor& x, const Tensor& scale,
                     const Tensor& spatial, const Tensor& out) override;
  void mul3_backward(const Tensor& gy, const Tensor& x, const Tensor& scale, const Tensor& spatial,
                     const Tensor& gx, const Tensor& g_scale, const Tensor& g_spatial) override;
  void matmul(const Tensor& a, const Tensor& b, const Tensor& out,
              bool accumulate = false) override;
  // One product with a float bias (and ReLU): the GEMM's epilogue, on each tile as it is stored.
  void matmul_plus_bias(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out,
                        bool relu) override;
  bool supports_matmul_with_two_batch_dims() const override;  // yes
  bool supports_matmul_rounding_to_bf16() const override;     // bf16_kernel() (gemm_bf16.h)
  void matmul_rounding_to_bf16(const Tensor& a, const Tensor& b, const Tensor& out,
                               bool accumulate = false) override;
  void im2col(const Tensor& x, const Window2d& window, const Tensor& cols,
              double pad_value) override;
  void col2im(const Tensor& cols, const Window2d& window, const Tensor& x) override;
  // conv2d_kernels.cpp: float32 and float64 image by image, and autocast's bfloat16 products
  // where bf16_kernel() has a kernel (else the default).
  Conv2dForward conv2d_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                               const Window2d& window, int64_t groups) override;
  void conv2d_backward(const Tensor& gy, const Tensor& x, const Tensor& weight, const Tensor& saved,
                       const Window2d& window, int64_t groups, const Tensor& gx,
                       const Tensor& gweight, const Tensor& gbias,
                       bool accumulate_gx = false) override;
  bool conv2d_adds_into_gx(const Tensor& x, const Tensor& weight, const Window2d& window,
                           int64_t groups) const override;
  void softmax(const Tensor& x, const Tensor& out, bool log) override;
  void softmax_backward(const Tensor& gy, const Tensor& y, const Tensor& gx, bool log) override;
  void layer_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  const Tensor& out, const Tensor& mean, const Tensor& rstd) override;
  void layer_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                           const Tensor& mean, const Tensor& rstd, const Tensor& gx,
                           const Tensor& gweight, const Tensor& gbias) override;
  void batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                  bool training, const Tensor& mean, const Tensor& var, const Tensor& rstd,
                  const Tensor& out, bool relu) override;  // engine/cpu/batch_norm_kernels.cpp
  void batch_norm_backward(const Tensor& gy, const Tensor& x, const Tensor& weight,
                           const Tensor& bias, const Tensor& mean, const Tensor& rstd,
                           bool training, const Tensor& relu_output, const Tensor& gx,
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
  // dropout_kernels.cpp: float32 and float64 fused (a one-byte mask), the default otherwise.
  Tensor dropout_forward(const Tensor& x, const DropoutDraws& draws, double p,
                         const Tensor& out) override;
  void dropout_backward(const Tensor& gy, const Tensor& mask, double p, const Tensor& gx) override;
  Tensor gelu_dropout_forward(const Tensor& x, UnaryOp gelu, const DropoutDraws& draws, double p,
                              const Tensor& out) override;
  void gelu_dropout_backward(const Tensor& gy, const Tensor& x, UnaryOp gelu, const Tensor& mask,
                             double p, const Tensor& gx) override;
  Tensor dropout_add_forward(const Tensor& x, const Tensor& residual, const DropoutDraws& draws,
                             double p, const Tensor& out) override;
  double sum_of_squares(const std::vector<Tensor>& xs) override;  // gradient_clipping.cpp
  void scale_(const std::vector<Tensor>& xs, double scale) override;
  void adam_step(const Tensor& param, const Tensor& grad, const Tensor& exp_avg,
                 const Tensor& exp_avg_sq, double lr, double beta1, double beta2, double eps,
                 double weight_decay, bool decoupled, int64_t step) override;
  void adam_steps(const std::vector<AdamParameter>& list, double beta1, double beta2, double eps,
                  bool decoupled) override;

  // attention_kernels.cpp: every float32/float64 problem, dropout included.
  bool supports_attention(const AttentionProblem& problem) const override;
  AttentionForward attention_forward(const AttentionProblem& problem) override;
  AttentionGradients attention_backward(const AttentionProblem& problem,
                                        const AttentionForward& forward, const Tensor& grad_out,
                                        const AttentionGradients& into) override;
  // decode_attention.cpp: float32 and float64.
  bool supports_decode_attention(DType dtype) const override;
  void decode_attention(const Tensor& q, const Tensor& k, const Tensor& v,
                        const Tensor& key_padding_mask, double scale, const Tensor& out) override;

  CachingAllocator& allocator() { return allocator_; }

 private:
  void matmul_bf16(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate);

  CachingAllocator allocator_;
};

CpuBackend& cpu_backend();

}  // namespace qkv::cpu
