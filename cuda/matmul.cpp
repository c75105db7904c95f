// Batched matmul through cuBLAS (cublasGemmStridedBatchedEx).
//
// cuBLAS is column-major; qkv is row-major. A row-major matrix with row stride ld, read
// column-major with leading dimension ld, is its transpose, so the row-major product C = A B is
// computed as the column-major product C^T = B^T A^T: swap the operands, and each operand's
// "transposed in place" flag carries over unchanged.
//
// The Backend contract lets a leading dimension be anything along a dimension of size 1 (even 0),
// and a broadcast operand may have stride 0 between rows; cuBLAS wants ld >= the rows of its
// column-major view. A size-1 dimension's ld is never used, so it is replaced; a genuinely invalid
// one (rows repeated by broadcasting) is copied to a contiguous matrix first. A batch stride of 0
// is fine for cuBLAS as it is.
#include <climits>

#include "cuda/check.h"
#include "cuda/cuda_backend.h"
#include "cuda/cuda_backend_impl.h"
#include "engine/ops.h"

namespace qkv::cuda {

namespace {

// One operand as cuBLAS will read it: pointer, in-place transpose flag, leading dim, batch stride.
struct GemmOperand {
  const void* data;
  bool transposed;
  int64_t ld;
  int64_t batch_stride;
  Tensor keep_alive;  // a contiguous copy, when one was needed
};

// `t` is [B, rows, cols] with unit stride along one of its two last dims (backend.h).
GemmOperand gemm_operand(const Tensor& t, Backend& backend) {
  const int64_t rows = t.size(1), cols = t.size(2);
  const bool transposed = t.strides()[2] != 1 && cols > 1;
  // Column-major, a non-transposed operand is a cols x rows matrix, a transposed one rows x cols;
  // ld must cover that first extent, and only matters when the other extent exceeds 1.
  const int64_t used_extent = transposed ? cols : rows;
  const int64_t min_ld = std::max<int64_t>(1, transposed ? rows : cols);
  int64_t ld = transposed ? t.strides()[2] : t.strides()[1];
  if (used_extent <= 1) ld = min_ld;
  if (ld >= min_ld) return {t.raw_data(), transposed, ld, t.strides()[0], Tensor()};
  // Rows that overlap (a stride-0 broadcast): make one dense copy of each distinct matrix.
  const bool batch_broadcast = t.strides()[0] == 0;
  Tensor src = batch_broadcast ? make_view(t, {1, rows, cols}, t.strides(), t.offset()) : t;
  Tensor dense = Tensor::empty(src.shape(), t.dtype(), t.device());
  backend.copy(src, dense);
  return {dense.raw_data(), false, std::max<int64_t>(1, cols), batch_broadcast ? 0 : rows * cols,
          dense};
}

int as_int(int64_t v, const char* what) {
  QKV_CHECK(v <= INT_MAX, "matmul", what, " ", v, " exceeds cuBLAS's int range");
  return int(v);
}

}  // namespace

void CudaBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  // cuBLAS's strided batch has one batch stride: this backend says no to the [B1, B2, ...] grid
  // (supports_matmul_with_two_batch_dims), so the matmul op only ever sends 3-D operands.
  QKV_CHECK(a.dim() == 3 && b.dim() == 3 && out.dim() == 3, "matmul",
            "the CUDA backend takes [batch, rows, cols] operands, got ", shape_str(a.shape()),
            " @ ", shape_str(b.shape()), " -> ", shape_str(out.shape()));
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  if (batch == 0 || m == 0 || n == 0) return;
  // An empty sum: out = 0 (or stays, accumulating); fill_ also zeroes a padded, strided out.
  if (k == 0) return accumulate ? void() : fill_(out, 0.0);
  QKV_CHECK(out.strides()[2] == 1 && (m == 1 || out.strides()[1] >= n), "matmul",
            "the output must have unit column stride, got strides ", shape_str(out.strides()));
  const GemmOperand A = gemm_operand(a, *this), B = gemm_operand(b, *this);
  const int64_t ldc = m == 1 ? n : out.strides()[1];

  // Operand and result types: equal, or bfloat16 operands with a float32 result (mixed
  // precision, engine/autocast.h), which cuBLAS runs on tensor cores with float32 accumulation.
  QKV_CHECK(a.dtype() == b.dtype() && (out.dtype() == a.dtype() ||
                                       (a.dtype() == DType::bf16 && out.dtype() == DType::f32)),
            "matmul", "operands ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()),
            " cannot produce ", dtype_name(out.dtype()));
  cudaDataType_t in_type, out_type;
  cublasComputeType_t compute;
  const float alpha32 = 1, beta32 = accumulate ? 1 : 0;
  const double alpha64 = 1, beta64 = accumulate ? 1 : 0;
  const void *alpha = &alpha32, *beta = &beta32;
  switch (a.dtype()) {
    case DType::f32:
      in_type = out_type = CUDA_R_32F;
      compute = allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
      break;
    case DType::bf16:  // bf16 in, bf16 or float32 out, float32 accumulation
      in_type = CUDA_R_16BF;
      out_type = out.dtype() == DType::f32 ? CUDA_R_32F : CUDA_R_16BF;
      compute = CUBLAS_COMPUTE_32F;
      break;
    case DType::f64:
      in_type = out_type = CUDA_R_64F;
      compute = CUBLAS_COMPUTE_64F;
      alpha = &alpha64, beta = &beta64;
      break;
    default:
      throw Error(std::string("matmul: expected float32, float64 or bfloat16, got ") +
                  dtype_name(out.dtype()));
  }
  // Column-major C^T (n x m) = op(B^T) (n x k) * op(A^T) (k x m).
  QKV_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas(), B.transposed ? CUBLAS_OP_T : CUBLAS_OP_N, A.transposed ? CUBLAS_OP_T : CUBLAS_OP_N,
      as_int(n, "N"), as_int(m, "M"), as_int(k, "K"), alpha, B.data, in_type, as_int(B.ld, "ldb"),
      B.batch_stride, A.data, in_type, as_int(A.ld, "lda"), A.batch_stride, beta, out.raw_data(),
      out_type, as_int(ldc, "ldc"), out.strides()[0], as_int(batch, "batch"), compute,
      CUBLAS_GEMM_DEFAULT));
}

}  // namespace qkv::cuda
