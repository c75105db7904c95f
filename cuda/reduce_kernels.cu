// Reductions over the middle axis of a contiguous [outer, reduced, inner] tensor.
//
// Two shapes of work: when inner == 1 each reduced row is contiguous and one block reduces it
// cooperatively; otherwise one thread per output walks its column, and neighbouring threads read
// neighbouring addresses. Sums accumulate in double (int64 for integers) like the CPU; max/min
// keep the CPU's rules: NaN wins, and among equal values the first index wins.
#include <limits>

#include "cuda/block_reduce.cuh"
#include "cuda/cuda_backend_impl.h"
#include "cuda/launch.cuh"

namespace qkv::cuda {

namespace {

template <typename T, typename Acc>
struct SumReducer {
  using State = Acc;
  __device__ State empty() const { return Acc(0); }
  __device__ State take(State s, T v, int64_t) const { return s + Acc(v); }
  __device__ State operator()(State a, State b) const { return a + b; }
  __device__ void store(State s, void* out, int64_t at) const { static_cast<T*>(out)[at] = T(s); }
};

template <typename T>
struct Extreme {
  T value;
  int64_t index;  // -1: no element seen yet
};

// max/min/argmax/argmin. The combine is order-free (it compares indices), so a tree over threads
// gives what the CPU's left-to-right scan gives: the first NaN if any, else the first extreme.
template <typename T>
struct ExtremeReducer {
  using State = Extreme<T>;
  bool is_max;
  bool want_index;
  __device__ State empty() const { return {T(0), -1}; }
  __device__ State take(State s, T v, int64_t r) const { return (*this)(s, State{v, r}); }
  __device__ State operator()(State a, State b) const {
    if (a.index < 0) return b;
    if (b.index < 0) return a;
    const bool a_nan = a.value != a.value, b_nan = b.value != b.value;
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return a.index < b.index ? a : b;
      return a_nan ? a : b;
    }
    if (is_max ? b.value > a.value : b.value < a.value) return b;
    if (is_max ? a.value > b.value : a.value < b.value) return a;
    return a.index < b.index ? a : b;
  }
  __device__ void store(State s, void* out, int64_t at) const {
    if (want_index)
      static_cast<int64_t*>(out)[at] = s.index;
    else
      static_cast<T*>(out)[at] = s.value;
  }
};

// inner == 1: block b reduces rows b, b + gridDim.x, ...
template <typename T, typename R>
__global__ void reduce_rows_kernel(int64_t rows, int64_t reduced, const T* x, void* out, R r) {
  __shared__ typename R::State scratch[kMaxBlockReduceThreads];
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {
    const T* xr = x + row * reduced;
    typename R::State s = r.empty();
    for (int64_t i = threadIdx.x; i < reduced; i += blockDim.x) s = r.take(s, xr[i], i);
    s = block_reduce(s, r, scratch);
    if (threadIdx.x == 0) r.store(s, out, row);
  }
}

// inner > 1: one thread per (outer, inner) output.
template <typename T, typename R>
__global__ void reduce_columns_kernel(int64_t outer, int64_t reduced, int64_t inner, const T* x,
                                      void* out, R r) {
  for (int64_t idx = grid_start(); idx < outer * inner; idx += grid_step()) {
    const int64_t o = idx / inner, i = idx % inner;
    const T* p = x + o * reduced * inner + i;
    typename R::State s = r.empty();
    for (int64_t k = 0; k < reduced; ++k) s = r.take(s, p[k * inner], k);
    r.store(s, out, idx);
  }
}

template <typename T, typename R>
void run_reduce(const Tensor& x, const Tensor& out, R r, cudaStream_t stream) {
  const int64_t outer = x.size(0), reduced = x.size(1), inner = x.size(2);
  if (outer * inner == 0) return;
  const T* xp = static_cast<const T*>(x.raw_data());
  if (inner == 1) {
    const int threads = row_threads(reduced);
    QKV_LAUNCH(reduce_rows_kernel, blocks_for(outer, 1), threads, 0, stream)
    (outer, reduced, xp, out.raw_data(), r);
  } else {
    QKV_LAUNCH(reduce_columns_kernel, blocks_for(outer * inner), kThreads, 0, stream)
    (outer, reduced, inner, xp, out.raw_data(), r);
  }
  QKV_CUDA_CHECK_LAUNCH();
}

}  // namespace

void CudaBackend::reduce(ReduceOp op, const Tensor& x, const Tensor& out) {
  QKV_DISPATCH_ALL(x.dtype(), "reduce", [&] {
    using Acc = std::conditional_t<std::is_floating_point_v<T>, double, int64_t>;
    if (op == ReduceOp::sum) return run_reduce<T>(x, out, SumReducer<T, Acc>{}, stream_);
    const bool is_max = op == ReduceOp::max || op == ReduceOp::argmax;
    const bool want_index = op == ReduceOp::argmax || op == ReduceOp::argmin;
    QKV_CHECK(x.size(1) > 0 || x.size(0) * x.size(2) == 0, "reduce",
              "max/min over an empty dimension");
    run_reduce<T>(x, out, ExtremeReducer<T>{is_max, want_index}, stream_);
  });
}

}  // namespace qkv::cuda
