// Indexing kernels: index_select / index_add (embedding and its backward), gather / scatter_add.
// Tensors are viewed as [outer, size along dim, inner] (engine/split_at.h); indices were
// bounds-checked by the op.
#include "engine/cpu/cpu_backend.h"
#include "engine/dispatch.h"
#include "engine/parallel.h"
#include "engine/split_at.h"

namespace qkv::cpu {

void CpuBackend::index_select(const Tensor& x, int dim, const Tensor& index, const Tensor& out) {
  Split3 s = split_at(x.shape(), dim);
  const int64_t n = index.numel();
  const int64_t* idx = index.data<int64_t>();
  QKV_DISPATCH_ALL(x.dtype(), "index_select", [&] {
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    // A copy: worth a second thread only for about as many elements as strided_loop's grain.
    parallel_for(0, s.outer * n, std::max<int64_t>(1, 32768 / s.inner), [&](int64_t b, int64_t e) {
      for (int64_t r = b; r < e; ++r) {
        int64_t o = r / n, i = r % n;
        const T* src = xp + (o * s.mid + idx[i]) * s.inner;
        T* dst = op + r * s.inner;
        for (int64_t k = 0; k < s.inner; ++k) dst[k] = src[k];
      }
    });
  });
}

void CpuBackend::index_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  Split3 s = split_at(out.shape(), dim);
  const int64_t n = index.numel();
  const int64_t* idx = index.data<int64_t>();
  QKV_DISPATCH_FLOAT(out.dtype(), "index_add", [&] {
    T* op = out.data<T>();
    const T* sp = src.data<T>();
    // Rows may repeat in `index`, so threads split the inner columns, never the rows.
    parallel_for(0, s.inner, 256, [&](int64_t k0, int64_t k1) {
      for (int64_t o = 0; o < s.outer; ++o)
        for (int64_t i = 0; i < n; ++i) {
          T* dst = op + (o * s.mid + idx[i]) * s.inner;
          const T* from = sp + (o * n + i) * s.inner;
          for (int64_t k = k0; k < k1; ++k) dst[k] += from[k];
        }
    });
  });
}

void CpuBackend::gather(const Tensor& x, int dim, const Tensor& index, const Tensor& out) {
  Split3 sx = split_at(x.shape(), dim), si = split_at(index.shape(), dim);
  const int64_t* idx = index.data<int64_t>();
  QKV_DISPATCH_ALL(x.dtype(), "gather", [&] {
    const T* xp = x.data<T>();
    T* op = out.data<T>();
    parallel_for(0, index.numel(), 16384, [&](int64_t b, int64_t e) {
      for (int64_t p = b; p < e; ++p) {
        int64_t k = p % si.inner, o = p / (si.inner * si.mid);
        op[p] = xp[(o * sx.mid + idx[p]) * sx.inner + k];
      }
    });
  });
}

void CpuBackend::scatter_add(const Tensor& out, int dim, const Tensor& index, const Tensor& src) {
  Split3 so = split_at(out.shape(), dim), si = split_at(index.shape(), dim);
  const int64_t* idx = index.data<int64_t>();
  QKV_DISPATCH_FLOAT(out.dtype(), "scatter_add", [&] {
    T* op = out.data<T>();
    const T* sp = src.data<T>();
    // Different (outer, inner) pairs never collide, so threads split the outer range.
    parallel_for(0, si.outer, 16, [&](int64_t o0, int64_t o1) {
      for (int64_t o = o0; o < o1; ++o)
        for (int64_t m = 0; m < si.mid; ++m)
          for (int64_t k = 0; k < si.inner; ++k) {
            int64_t p = (o * si.mid + m) * si.inner + k;
            op[(o * so.mid + idx[p]) * so.inner + k] += sp[p];
          }
    });
  });
}

}  // namespace qkv::cpu
