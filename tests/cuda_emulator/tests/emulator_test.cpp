// The CPU emulator's own tests: that it runs kernels as CUDA defines them, and that it turns
// the mistakes a GPU would hide (or hang on) into wrong results or clear launch failures. Built
// into test_cuda_emulated only; the kernels below exist to be right or wrong on purpose.
#include <cuda_bf16.h>
#include <mma.h>

#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "cuda/launch.cuh"

namespace {

// ---- helpers ------------------------------------------------------------------------------------

template <typename T>
T* device_array(size_t n) {
  T* p = nullptr;
  BOOST_REQUIRE(cudaMalloc(&p, n * sizeof(T)) == cudaSuccess);
  return p;
}

template <typename T>
std::vector<T> to_host(const T* p, size_t n) {
  std::vector<T> v(n);
  BOOST_REQUIRE(cudaMemcpy(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost) == cudaSuccess);
  return v;
}

// The launch failed, and the emulator's reason contains every fragment.
void check_failure(cudaError_t expected, const std::vector<std::string>& fragments) {
  const cudaError_t got = cudaGetLastError();
  BOOST_TEST(got == expected, "got " << cudaGetErrorName(got));
  const std::string why = cudaGetErrorString(got);
  for (const std::string& f : fragments) BOOST_TEST(why.find(f) != std::string::npos, why);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);  // reported once
}

// ---- kernels ------------------------------------------------------------------------------------

__global__ void reverse_in_block(const int* in, int* out, bool with_barrier) {
  __shared__ int tile[64];
  const int t = threadIdx.x, base = blockIdx.x * blockDim.x;
  tile[t] = in[base + t];
  if (with_barrier) __syncthreads();
  out[base + t] = tile[blockDim.x - 1 - t];
}

// Each thread reads its right neighbour's value, then overwrites its own slot: the write must wait
// for the neighbour's read (a write-after-read hazard without the second barrier).
__global__ void read_then_overwrite(const int* in, int* out, bool with_barrier) {
  __shared__ int tile[64];
  const int t = threadIdx.x, n = blockDim.x, base = blockIdx.x * n;
  tile[t] = in[base + t];
  __syncthreads();
  const int right = t + 1 < n ? tile[t + 1] : 0;
  if (with_barrier) __syncthreads();
  tile[t] = -1;
  out[base + t] = right;
}

__global__ void early_return(int* out) {
  if (threadIdx.x == 3) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void two_barriers(int* out) {
  if (threadIdx.x < 16)
    __syncthreads();
  else
    __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void warp_sums(const float* in, float* xor_sum, float* down_sum) {
  const float v = in[threadIdx.x];
  float a = v, b = v;
  for (int offset = 16; offset > 0; offset /= 2) {
    a += __shfl_xor_sync(0xffffffffu, a, offset);
    b += __shfl_down_sync(0xffffffffu, b, offset);
  }
  xor_sum[threadIdx.x] = a;   // every lane: the warp's sum
  down_sum[threadIdx.x] = b;  // lane 0: the warp's sum
}

__global__ void full_mask_shuffle(float* out) {
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, float(threadIdx.x), 1);
}

__global__ void builtins(unsigned* out) {
  const unsigned block = blockIdx.y * gridDim.x + blockIdx.x;
  const unsigned thread = threadIdx.y * blockDim.x + threadIdx.x;
  out[block * blockDim.x * blockDim.y + thread] = block * 1000 + thread;
}

using Bf16 = __nv_bfloat16;
__global__ void tile_product(const Bf16* a, const Bf16* b, float* c, int offset) {
  namespace wmma = nvcuda::wmma;
  wmma::fragment<wmma::matrix_a, 16, 16, 16, Bf16, wmma::row_major> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, Bf16, wmma::col_major> fb;  // b stored transposed
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  wmma::fill_fragment(acc, 1.f);
  wmma::load_matrix_sync(fa, a + offset, 16);
  wmma::load_matrix_sync(fb, b, 16);
  wmma::mma_sync(acc, fa, fb, acc);
  wmma::store_matrix_sync(c, acc, 16, wmma::mem_row_major);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(emulator)

BOOST_AUTO_TEST_CASE(a_missing_barrier_gives_a_wrong_result) {
  constexpr int n = 64, blocks = 2;
  std::vector<int> values(n * blocks);
  for (int i = 0; i < n * blocks; ++i) values[i] = 10 * i;
  int *in = device_array<int>(values.size()), *out = device_array<int>(values.size());
  BOOST_REQUIRE(cudaMemcpy(in, values.data(), values.size() * sizeof(int),
                           cudaMemcpyHostToDevice) == cudaSuccess);
  for (bool with_barrier : {true, false}) {
    // read-after-write: block 0 runs its threads in increasing order, so thread 0 reads slot 63
    // before thread 63 wrote it
    QKV_LAUNCH(reverse_in_block, blocks, n, 0, nullptr)(in, out, with_barrier);
    BOOST_REQUIRE(cudaGetLastError() == cudaSuccess);
    const std::vector<int> got = to_host(out, values.size());
    int wrong = 0;
    for (int b = 0; b < blocks; ++b)
      for (int t = 0; t < n; ++t) wrong += got[b * n + t] != values[b * n + n - 1 - t];
    BOOST_TEST((wrong == 0) == with_barrier, "with_barrier " << with_barrier << ": " << wrong);

    // write-after-read: block 1 runs in decreasing order, so thread 63 overwrites slot 63 before
    // thread 62 read it
    QKV_LAUNCH(read_then_overwrite, blocks, n, 0, nullptr)(in, out, with_barrier);
    const std::vector<int> right = to_host(out, values.size());
    int wrong_in_block_1 = 0;
    for (int t = 0; t < n; ++t)
      wrong_in_block_1 += right[n + t] != (t + 1 < n ? values[n + t + 1] : 0);
    BOOST_TEST((wrong_in_block_1 == 0) == with_barrier,
               "with_barrier " << with_barrier << ": " << wrong_in_block_1);
  }
  cudaFree(in);
  cudaFree(out);
}

BOOST_AUTO_TEST_CASE(barrier_misuse_fails_the_launch_with_the_place) {
  int* out = device_array<int>(32);
  QKV_LAUNCH(early_return, 1, 32, 0, nullptr)(out);
  check_failure(cudaErrorLaunchFailure, {"__syncthreads", "emulator_test.cpp", "thread (3,0,0)",
                                         "returned without reaching it"});
  QKV_LAUNCH(two_barriers, 1, 32, 0, nullptr)(out);
  check_failure(cudaErrorLaunchFailure, {"different barriers", "emulator_test.cpp"});
  // a full mask in a block of 16 threads names lanes that do not exist
  float* f = device_array<float>(32);
  QKV_LAUNCH(full_mask_shuffle, 1, 16, 0, nullptr)(f);
  check_failure(cudaErrorLaunchFailure, {"__shfl_xor_sync", "lane 16", "does not have"});
  // and a correct launch after a failed one runs
  QKV_LAUNCH(full_mask_shuffle, 1, 32, 0, nullptr)(f);
  BOOST_TEST(cudaGetLastError() == cudaSuccess);
  cudaFree(f);
  cudaFree(out);
}

BOOST_AUTO_TEST_CASE(shuffles_exchange_lane_values) {
  std::vector<float> values(32);
  for (int i = 0; i < 32; ++i) values[i] = float(i * i % 17);
  float *in = device_array<float>(32), *a = device_array<float>(32), *b = device_array<float>(32);
  BOOST_REQUIRE(cudaMemcpy(in, values.data(), sizeof(float) * 32, cudaMemcpyHostToDevice) ==
                cudaSuccess);
  QKV_LAUNCH(warp_sums, 1, 32, 0, nullptr)(in, a, b);
  BOOST_REQUIRE(cudaGetLastError() == cudaSuccess);
  float total = 0;
  for (float v : values) total += v;
  const std::vector<float> xor_sums = to_host(a, 32), down_sums = to_host(b, 32);
  for (float s : xor_sums) BOOST_TEST(s == total);
  BOOST_TEST(down_sums[0] == total);
  BOOST_TEST(down_sums[31] == values[31] * 32);  // past the end a lane keeps its own value
  cudaFree(in);
  cudaFree(a);
  cudaFree(b);
}

BOOST_AUTO_TEST_CASE(built_in_indices_cover_a_2d_grid_of_2d_blocks) {
  const dim3 grid(3, 2), block(4, 8);
  const size_t n = 3 * 2 * 4 * 8;
  unsigned* out = device_array<unsigned>(n);
  QKV_LAUNCH(builtins, grid, block, 0, nullptr)(out);
  BOOST_REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::vector<unsigned> got = to_host(out, n);
  for (size_t i = 0; i < n; ++i) BOOST_TEST(got[i] == i / 32 * 1000 + i % 32);
  cudaFree(out);
}

BOOST_AUTO_TEST_CASE(wmma_tiles_multiply_like_the_definition) {
  std::vector<Bf16> a(16 * 16 + 16), bt(16 * 16);  // a has room for a misaligned start
  std::vector<float> af(a.size()), bf(bt.size());
  for (size_t i = 0; i < a.size(); ++i) af[i] = float(int(i * 7 % 11) - 5) / 4;  // exact in bf16
  for (size_t i = 0; i < bt.size(); ++i) bf[i] = float(int(i * 5 % 13) - 6) / 8;
  for (size_t i = 0; i < a.size(); ++i) a[i] = __float2bfloat16(af[i]);
  for (size_t i = 0; i < bt.size(); ++i) bt[i] = __float2bfloat16(bf[i]);
  Bf16 *da = device_array<Bf16>(a.size()), *db = device_array<Bf16>(bt.size());
  float* dc = device_array<float>(256);
  cudaMemcpy(da, a.data(), sizeof(Bf16) * a.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(db, bt.data(), sizeof(Bf16) * bt.size(), cudaMemcpyHostToDevice);
  QKV_LAUNCH(tile_product, 1, 32, 0, nullptr)(da, db, dc, 0);
  BOOST_REQUIRE(cudaGetLastError() == cudaSuccess);
  const std::vector<float> c = to_host(dc, 256);
  for (int i = 0; i < 16; ++i)
    for (int j = 0; j < 16; ++j) {
      double want = 1;  // the accumulator's fill
      for (int k = 0; k < 16; ++k) want += double(af[i * 16 + k]) * bf[j * 16 + k];
      BOOST_TEST(c[i * 16 + j] == want, "c[" << i << "][" << j << "]");
    }
  // 8 elements in: 16 bytes, not the 32 that WMMA needs
  QKV_LAUNCH(tile_product, 1, 32, 0, nullptr)(da, db, dc, 8);
  check_failure(cudaErrorLaunchFailure, {"load_matrix_sync", "not 32-byte aligned"});
  cudaFree(da);
  cudaFree(db);
  cudaFree(dc);
}

BOOST_AUTO_TEST_CASE(bad_configurations_and_pointers_are_refused) {
  unsigned* out = device_array<unsigned>(4096);
  QKV_LAUNCH(builtins, 1, 2048, 0, nullptr)(out);
  check_failure(cudaErrorInvalidConfiguration, {"2048 threads per block"});
  QKV_LAUNCH(builtins, 1, 32, 300 * 1024, nullptr)(out);
  check_failure(cudaErrorInvalidConfiguration, {"dynamic shared memory"});

  std::vector<unsigned> host(8);
  BOOST_TEST(cudaMemcpy(host.data(), host.data() + 4, 16, cudaMemcpyDeviceToHost) ==
             cudaErrorInvalidValue);  // the "device" source is host memory
  BOOST_TEST(cudaMemcpy(out + 4095, host.data(), 8, cudaMemcpyHostToDevice) ==
             cudaErrorInvalidValue);  // runs past the end of the allocation
  BOOST_TEST(cudaFree(host.data()) == cudaErrorInvalidDevicePointer);
  BOOST_TEST(cudaFree(out) == cudaSuccess);
}

BOOST_AUTO_TEST_SUITE_END()
