// cuBLAS's strided batched GEMM for the CPU emulator: the column-major definition, summed in
// double and rounded once to the result type. Slow and exact enough to judge qkv's use of the
// API (operands, transposes, leading dimensions, batch strides, alpha/beta, mixed types); cuBLAS
// itself is NVIDIA's and is measured on a GPU (tests/gpu/run.sh).
#include <cublas_v2.h>
#include <cuda_bf16.h>

#include <algorithm>
#include <cmath>

struct cublasContext {
  cudaStream_t stream = nullptr;
};

namespace {

double load(const void* base, cudaDataType type, long long index) {
  switch (type) {
    case CUDA_R_32F:
      return static_cast<const float*>(base)[index];
    case CUDA_R_64F:
      return static_cast<const double*>(base)[index];
    case CUDA_R_16BF:
      return __bfloat162float(static_cast<const __nv_bfloat16*>(base)[index]);
  }
  return NAN;
}

void store(void* base, cudaDataType type, long long index, double value) {
  switch (type) {
    case CUDA_R_32F:
      static_cast<float*>(base)[index] = float(value);
      break;
    case CUDA_R_64F:
      static_cast<double*>(base)[index] = value;
      break;
    case CUDA_R_16BF:
      static_cast<__nv_bfloat16*>(base)[index] = __float2bfloat16(float(value));
      break;
  }
}

bool known(cudaDataType t) { return t == CUDA_R_32F || t == CUDA_R_64F || t == CUDA_R_16BF; }

}  // namespace

cublasStatus_t cublasCreate(cublasHandle_t* handle) {
  *handle = new cublasContext;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasDestroy(cublasHandle_t handle) {
  delete handle;
  return CUBLAS_STATUS_SUCCESS;
}
cublasStatus_t cublasSetStream(cublasHandle_t handle, cudaStream_t stream) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  handle->stream = stream;
  return CUBLAS_STATUS_SUCCESS;
}

const char* cublasGetStatusName(cublasStatus_t status) {
  switch (status) {
    case CUBLAS_STATUS_SUCCESS:
      return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED:
      return "CUBLAS_STATUS_NOT_INITIALIZED";
    case CUBLAS_STATUS_ALLOC_FAILED:
      return "CUBLAS_STATUS_ALLOC_FAILED";
    case CUBLAS_STATUS_INVALID_VALUE:
      return "CUBLAS_STATUS_INVALID_VALUE";
    case CUBLAS_STATUS_NOT_SUPPORTED:
      return "CUBLAS_STATUS_NOT_SUPPORTED";
  }
  return "CUBLAS_STATUS_UNKNOWN";
}
const char* cublasGetStatusString(cublasStatus_t status) {
  return status == CUBLAS_STATUS_INVALID_VALUE   ? "emulator: an invalid argument"
         : status == CUBLAS_STATUS_NOT_SUPPORTED ? "emulator: this type combination"
                                                 : "emulator";
}

cublasStatus_t cublasGemmStridedBatchedEx(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void* alpha, const void* A, cudaDataType a_type,
                                          int lda, long long stride_a, const void* B,
                                          cudaDataType b_type, int ldb, long long stride_b,
                                          const void* beta, void* C, cudaDataType c_type, int ldc,
                                          long long stride_c, int batch_count,
                                          cublasComputeType_t compute, cublasGemmAlgo_t) {
  if (!handle) return CUBLAS_STATUS_NOT_INITIALIZED;
  const bool ta = transa != CUBLAS_OP_N, tb = transb != CUBLAS_OP_N;
  // cuBLAS's own argument checks: sizes, and leading dimensions at least the stored rows
  if (m < 0 || n < 0 || k < 0 || batch_count < 0 || ldc < std::max(1, m) ||
      lda < std::max(1, ta ? k : m) || ldb < std::max(1, tb ? n : k))
    return CUBLAS_STATUS_INVALID_VALUE;
  if (!known(a_type) || a_type != b_type || !known(c_type)) return CUBLAS_STATUS_NOT_SUPPORTED;
  // the combinations cuBLAS documents for these compute types
  const bool f64 = compute == CUBLAS_COMPUTE_64F;
  if (f64 != (a_type == CUDA_R_64F) || f64 != (c_type == CUDA_R_64F) ||
      (a_type == CUDA_R_32F && c_type != CUDA_R_32F))
    return CUBLAS_STATUS_NOT_SUPPORTED;
  const double al = f64 ? *static_cast<const double*>(alpha) : *static_cast<const float*>(alpha);
  const double be = f64 ? *static_cast<const double*>(beta) : *static_cast<const float*>(beta);
  for (int batch = 0; batch < batch_count; ++batch) {
    const long long a0 = batch * stride_a, b0 = batch * stride_b, c0 = batch * stride_c;
    for (int j = 0; j < n; ++j)
      for (int i = 0; i < m; ++i) {
        double sum = 0;
        for (int p = 0; p < k; ++p) {
          const long long ai = ta ? a0 + i * (long long)lda + p : a0 + p * (long long)lda + i;
          const long long bi = tb ? b0 + p * (long long)ldb + j : b0 + j * (long long)ldb + p;
          sum += load(A, a_type, ai) * load(B, b_type, bi);
        }
        const long long ci = c0 + j * (long long)ldc + i;
        // beta == 0: C is not read (it may hold NaN), as cuBLAS documents
        store(C, c_type, ci, al * sum + (be == 0 ? 0.0 : be * load(C, c_type, ci)));
      }
  }
  return CUBLAS_STATUS_SUCCESS;
}
