// The CPU backend object, its matmul entry (engine/cpu/gemm.h does the work) and the registry of
// backends by device kind.
#include "engine/cpu/cpu_backend.h"

#include <array>

#include "engine/cpu/gemm.h"
#include "engine/cpu/gemm_bf16.h"
#include "engine/cpu/host_memory.h"
#include "engine/device_loader.h"
#include "engine/dispatch.h"

namespace qkv {

namespace cpu {

namespace {
// The caching allocator's raw memory (engine/cpu/host_memory.h): never destroyed, as the backend.
CachingAllocator::RawMemory host_memory() {
  static HostMemory* memory = new HostMemory();
  return {[](size_t bytes) { return memory->allocate(bytes); },
          [](void* ptr) { memory->free(ptr); }};
}
}  // namespace

CpuBackend::CpuBackend() : allocator_("host", 64, host_memory()) {}

CpuBackend& cpu_backend() {
  // Never destroyed: tensors held in static objects may be freed after main returns.
  static CpuBackend* backend = new CpuBackend();
  return *backend;
}

namespace {

// `t` widened to a contiguous float32 tensor (exact: every bfloat16 is a float32).
Tensor widened_to_float32(const Tensor& t) {
  Tensor wide = Tensor::empty(t.shape(), DType::f32, t.device());
  cpu_backend().copy(t, wide);
  return wide;
}

// How gemm.h reads the operands of a [batch, m, k] @ [batch, k, n] product. An operand with unit
// stride along its last dim is read as stored (N, leading dimension = row stride); otherwise the
// caller made its second-to-last dim unit-stride and it is read transposed in place (T). A leading
// dimension is just the stride between rows and may be 0 for a broadcast operand. The batch is one
// dim, or two ([B1, B2, rows, cols]: a grid of matrices, batch_strides.h).
struct GemmOperands {
  int64_t batch, m, n, k;
  bool trans_a, trans_b;
  int64_t lda, ldb;
  BatchStrides stride_a, stride_b, stride_c;
};

BatchStrides batch_strides(const Tensor& t) {
  if (t.dim() == 3) return BatchStrides(t.strides()[0]);
  return BatchStrides(t.strides()[0], t.strides()[1], t.size(1));
}

GemmOperands gemm_operands(const Tensor& a, const Tensor& b, const Tensor& out) {
  QKV_CHECK((out.dim() == 3 || out.dim() == 4) && a.dim() == out.dim() && b.dim() == out.dim(),
            "matmul",
            "the backend takes [batch, rows, cols] or [batch1, batch2, rows, cols] "
            "operands, got ",
            shape_str(a.shape()), " @ ", shape_str(b.shape()), " -> ", shape_str(out.shape()));
  const int r = out.dim() - 2;  // the matrix dims are the last two
  const int64_t batch = out.dim() == 3 ? out.size(0) : out.size(0) * out.size(1);
  GemmOperands g{batch, out.size(r),      out.size(r + 1),  a.size(r + 1),     false, false, 0,
                 0,     batch_strides(a), batch_strides(b), batch_strides(out)};
  g.trans_a = a.strides()[r + 1] != 1 && g.k > 1;
  g.trans_b = b.strides()[r + 1] != 1 && g.n > 1;
  g.lda = g.trans_a ? a.strides()[r + 1] : a.strides()[r];
  g.ldb = g.trans_b ? b.strides()[r + 1] : b.strides()[r];
  return g;
}

}  // namespace

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  QKV_CHECK(a.dtype() == b.dtype() && (out.dtype() == a.dtype() ||
                                       (a.dtype() == DType::bf16 && out.dtype() == DType::f32)),
            "matmul", "operands ", dtype_name(a.dtype()), " and ", dtype_name(b.dtype()),
            " cannot produce ", dtype_name(out.dtype()));
  if (a.dtype() == DType::bf16) return matmul_bf16(a, b, out, accumulate);
  const GemmOperands g = gemm_operands(a, b, out);
  QKV_DISPATCH_FLOAT(out.dtype(), "matmul", [&] {
    gemm_batched<T>(g.batch, g.trans_a, g.trans_b, g.m, g.n, g.k, T(1), a.data<T>(), g.lda,
                    g.stride_a, b.data<T>(), g.ldb, g.stride_b, T(accumulate ? 1 : 0),
                    out.data<T>(), g.n, g.stride_c);
  });
}

void CpuBackend::matmul_plus_bias(const Tensor& a, const Tensor& b, const Tensor& bias,
                                  const Tensor& out, bool relu) {
  const GemmOperands g = gemm_operands(a, b, out);
  if (a.dtype() != out.dtype() || bias.dtype() != out.dtype() || g.batch != 1 ||
      (bias.strides()[0] != 1 && g.n > 1))
    return Backend::matmul_plus_bias(a, b, bias, out, relu);
  QKV_DISPATCH_FLOAT(out.dtype(), "matmul", [&] {
    gemm<T>(g.trans_a, g.trans_b, g.m, g.n, g.k, T(1), a.data<T>(), g.lda, b.data<T>(), g.ldb, T(0),
            out.data<T>(), g.n, {bias.data<T>(), relu});
  });
}

// bfloat16 operands: the float32-accumulated product of the bfloat16 values, on the bfloat16 kernel
// the CPU has (AMX tiles or VDPBF16PS, bf16_kernel() in gemm_bf16.h); elsewhere the float32 GEMM
// on the operands widened (exactly), which is the same product summed in another order.
void CpuBackend::matmul_bf16(const Tensor& a, const Tensor& b, const Tensor& out, bool accumulate) {
  if (out.dtype() == DType::bf16) {  // float32 result, rounded to bfloat16 once at the end
    Tensor out32 = accumulate ? widened_to_float32(out) : Tensor::empty(out.shape(), DType::f32);
    matmul_bf16(a, b, out32, accumulate);
    return copy(out32, out);
  }
  if (bf16_kernel() == Bf16Kernel::none)
    return matmul(widened_to_float32(a), widened_to_float32(b), out, accumulate);
  const GemmOperands g = gemm_operands(a, b, out);
  gemm_bf16_batched(g.batch, g.trans_a, g.trans_b, g.m, g.n, g.k, a.data<bf16_t>(), g.lda,
                    g.stride_a, b.data<bf16_t>(), g.ldb, g.stride_b, accumulate, out.data<float>(),
                    g.n, g.stride_c);
}

bool CpuBackend::supports_matmul_with_two_batch_dims() const { return true; }

bool CpuBackend::supports_matmul_rounding_to_bf16() const {
  return bf16_kernel() != Bf16Kernel::none;
}

void CpuBackend::matmul_rounding_to_bf16(const Tensor& a, const Tensor& b, const Tensor& out,
                                         bool accumulate) {
  if (!supports_matmul_rounding_to_bf16())  // the base class's error: ask first
    return Backend::matmul_rounding_to_bf16(a, b, out, accumulate);
  QKV_CHECK(a.dtype() == DType::f32 && b.dtype() == DType::f32 && out.dtype() == DType::f32,
            "matmul", "rounding to bfloat16 takes float32 operands and result, got ",
            dtype_name(a.dtype()), ", ", dtype_name(b.dtype()), " -> ", dtype_name(out.dtype()));
  const GemmOperands g = gemm_operands(a, b, out);
  gemm_bf16_batched(g.batch, g.trans_a, g.trans_b, g.m, g.n, g.k, a.data<float>(), g.lda,
                    g.stride_a, b.data<float>(), g.ldb, g.stride_b, accumulate, out.data<float>(),
                    g.n, g.stride_c);
}

}  // namespace cpu

namespace {
std::array<Backend*, 2>& backends() {
  static std::array<Backend*, 2> table{&cpu::cpu_backend(), nullptr};
  return table;
}
}  // namespace

// A device other than the CPU is loaded the first time it is asked for (engine/device_loader.h).
Backend& backend_for(Device device) {
  Backend* b = backends()[size_t(device.kind)];
  if (b == nullptr && ensure_backend(device.kind)) b = backends()[size_t(device.kind)];
  if (b == nullptr) {
    std::string why = backend_status(device.kind);
    if (why.rfind("unavailable: ", 0) == 0) why.erase(0, 13);
    QKV_CHECK(false, "device", device.str(), " is not available: ", why);
  }
  return *b;
}

void register_backend(DeviceKind kind, Backend* backend) { backends()[size_t(kind)] = backend; }

bool has_backend(DeviceKind kind) { return backends()[size_t(kind)] != nullptr; }

}  // namespace qkv
