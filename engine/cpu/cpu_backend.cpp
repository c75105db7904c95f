// The CPU backend object, its matmul entry (engine/cpu/gemm.h does the work) and the registry of
// backends by device kind.
#include "engine/cpu/cpu_backend.h"

#include <array>

#include "engine/cpu/dispatch.h"
#include "engine/cpu/gemm.h"

namespace qkv {

namespace cpu {

CpuBackend& cpu_backend() {
  // Never destroyed: tensors held in static objects may be freed after main returns.
  static CpuBackend* backend = new CpuBackend();
  return *backend;
}

void CpuBackend::matmul(const Tensor& a, const Tensor& b, const Tensor& out) {
  const int64_t batch = out.size(0), m = out.size(1), n = out.size(2), k = a.size(2);
  // An operand with unit stride along its last dim is read as stored (N, leading dimension =
  // row stride); otherwise the caller made its second-to-last dim unit-stride and it is read
  // transposed in place (T). A leading dimension is just the stride between rows and may be 0 for
  // a broadcast operand.
  const bool ta = a.strides()[2] != 1 && k > 1;
  const bool tb = b.strides()[2] != 1 && n > 1;
  const int64_t lda = ta ? a.strides()[2] : a.strides()[1];
  const int64_t ldb = tb ? b.strides()[2] : b.strides()[1];
  QKV_DISPATCH_FLOAT(out.dtype(), "matmul", [&] {
    gemm_batched<T>(batch, ta, tb, m, n, k, T(1), a.data<T>(), lda, a.strides()[0], b.data<T>(),
                    ldb, b.strides()[0], T(0), out.data<T>(), n, m * n);
  });
}

}  // namespace cpu

namespace {
std::array<Backend*, 2>& backends() {
  static std::array<Backend*, 2> table{&cpu::cpu_backend(), nullptr};
  return table;
}
}  // namespace

Backend& backend_for(Device device) {
  Backend* b = backends()[size_t(device.kind)];
  QKV_CHECK(b != nullptr, "device", device.str(),
            " is not available: qkv was built without its backend or it has not been initialized");
  return *b;
}

void register_backend(DeviceKind kind, Backend* backend) { backends()[size_t(kind)] = backend; }

bool has_backend(DeviceKind kind) { return backends()[size_t(kind)] != nullptr; }

}  // namespace qkv
