// The register-blocked inner kernel of the packed GEMM, and the cache blocking that goes with it.
//
// A microkernel multiplies one packed micro-panel of A (mr rows, stored k-major: mr values per k)
// by one packed micro-panel of B (nr columns, stored k-major: nr values per k) and updates an
// mr x nr tile of row-major C. Its tile sizes decide how the packing lays memory out, and the cache
// block sizes (mc, kc, nc) are tuned to its tile, so both travel together in one struct.
//
// Several kernels are compiled into every binary (a portable one, AVX2+FMA, AVX-512); the fastest
// one the running CPU supports is chosen once, at run time.
#pragma once

#include <cstdint>
#include <vector>

namespace qkv::cpu {

template <typename T>
struct GemmMicrokernel {
  const char* name;
  int mr, nr;          // register tile: C rows x C columns kept in registers
  int64_t mc, kc, nc;  // cache blocks: rows of packed A, depth of both panels, columns of packed B
  // C[i, j] = alpha * (sum over p < kc of a[p*mr + i] * b[p*ldb + j]) + beta * C[i, j] for
  // i < rows <= mr, j < cols <= nr: a full tile, or a ragged one at the bottom or right edge of C
  // (the panels hold full tiles either way, zero-padded). ldb is nr for a packed B panel, or B's
  // own row stride when a small B is read in place. With beta == 0, C is only written (it may
  // hold NaN or garbage).
  void (*run)(int64_t kc, const T* a, const T* b, int64_t ldb, T* c, int64_t ldc, T alpha, T beta,
              int rows, int cols);
  // A faster packing of transposed panels for the same ISA, or nullptr for the portable loop.
  void (*pack_transposed)(const T* src, int64_t line_stride, int64_t lines, int64_t depth,
                          int width, T* dst) = nullptr;
  // Like run, but reading A unpacked, as stored (not transposed): a[i * lda + p]. Used for small
  // products, where transposing A into panels costs more than the kernel's strided reads. nullptr
  // when the kernel has no such variant.
  void (*run_a_in_place)(int64_t kc, const T* a, int64_t lda, const T* b, int64_t ldb, T* c,
                         int64_t ldc, T alpha, T beta, int rows, int cols) = nullptr;
  // Like run, but reading op(A) = A^T in place: a[p * lda + i], the rows of the stored matrix
  // being the depth steps. A packed panel is this layout with lda == mr, so no transpose is
  // needed: only reuse decides whether packing pays. nullptr when the kernel has no such variant.
  void (*run_a_transposed_in_place)(int64_t kc, const T* a, int64_t lda, const T* b, int64_t ldb,
                                    T* c, int64_t ldc, T alpha, T beta, int rows,
                                    int cols) = nullptr;
  // Like run_a_transposed_in_place, prefetching B's rows some steps ahead: for the first row tile
  // over a B read in place, which finds B in memory (a saved activation, in dW = dy^T x), its rows
  // ldb apart, a stride the hardware prefetchers follow poorly. Later row tiles find the panel in
  // L2, where the prefetches would only cost issue slots. nullptr when the kernel has none.
  void (*run_a_transposed_in_place_prefetching_b)(int64_t kc, const T* a, int64_t lda, const T* b,
                                                  int64_t ldb, T* c, int64_t ldc, T alpha, T beta,
                                                  int rows, int cols) = nullptr;
  // Like run_a_in_place, finishing the tile as it stores it: C = max(alpha A B + beta C + bias, 0)
  // with bias (cols values) when not null and the max when relu; for a product whose depth is
  // one block, instead of a pass over the stored tile. nullptr when the kernel has none.
  void (*run_a_in_place_finishing)(int64_t kc, const T* a, int64_t lda, const T* b, int64_t ldb,
                                   T* c, int64_t ldc, T alpha, T beta, int rows, int cols,
                                   const T* bias, bool relu) = nullptr;
  // Like run (packed panels), finishing the tile as run_a_in_place_finishing does.
  void (*run_finishing)(int64_t kc, const T* a, const T* b, int64_t ldb, T* c, int64_t ldc, T alpha,
                        T beta, int rows, int cols, const T* bias, bool relu) = nullptr;
};

// Each returns nullptr when this CPU cannot run that kernel.
template <typename T>
const GemmMicrokernel<T>* gemm_kernel_avx512();
template <typename T>
const GemmMicrokernel<T>* gemm_kernel_avx2();
template <typename T>
const GemmMicrokernel<T>* gemm_kernel_generic();  // never nullptr

// Every kernel this CPU can run, fastest first; the first one is what gemm() uses.
template <typename T>
const std::vector<const GemmMicrokernel<T>*>& gemm_kernels();

}  // namespace qkv::cpu
