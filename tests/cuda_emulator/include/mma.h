// nvcuda::wmma for the CPU emulator (tests/cuda_emulator): the 16x16x16 bf16 tiles with float32
// accumulators that cuda/flash_attention_tc.cu uses.
//
// As on the hardware, a fragment is spread over the warp: each lane holds 8 of its 256 elements.
// Which ones is unspecified by CUDA; here lane l holds elements 8l..8l+7 of the tile in row-major
// order. Loads and stores move each lane's own elements, so a lane that reads a stored tile
// before the other lanes stored their parts (no __syncwarp between) reads stale values, as it
// could on a GPU. mma_sync is a warp collective: every lane's operands meet there.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <source_location>
#include <type_traits>

namespace nvcuda::wmma {

struct matrix_a {};
struct matrix_b {};
struct accumulator {};
struct row_major {};
struct col_major {};
enum layout_t { mem_row_major, mem_col_major };

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulator has 16x16x16 tiles only");

 public:
  using element_type = std::conditional_t<std::is_same_v<T, __nv_bfloat16>, __nv_bfloat16, float>;
  static constexpr int num_elements = 8;
  element_type x[num_elements];
};

namespace detail {

constexpr int kLaneElements = 8;

inline void check_pointer(const void* p, unsigned ldm, unsigned element_bytes, const char* what,
                          std::source_location where) {
  // CUDA: a 256-bit aligned pointer, and ldm a multiple of 16 bytes
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    qkv::cuda_emulator::fail(std::string(what) + ": the pointer is not 32-byte aligned", where);
  if (ldm * element_bytes % 16 != 0)
    qkv::cuda_emulator::fail(
        std::string(what) + ": ldm " + std::to_string(ldm) + " is not a multiple of 16 bytes",
        where);
}

// Element e of this lane's part: (row, column) of the 16x16 tile.
inline int row_of(int e) { return (qkv::cuda_emulator::lane_id() * kLaneElements + e) / 16; }
inline int col_of(int e) { return (qkv::cuda_emulator::lane_id() * kLaneElements + e) % 16; }
inline size_t offset(int row, int col, unsigned ldm, bool column_major) {
  return column_major ? size_t(col) * ldm + row : size_t(row) * ldm + col;
}
inline float to_float(float v) { return v; }
inline float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

}  // namespace detail

template <typename Use, typename T, typename Layout>
void fill_fragment(fragment<Use, 16, 16, 16, T, Layout>& f,
                   typename fragment<Use, 16, 16, 16, T, Layout>::element_type value) {
  for (auto& e : f.x) e = value;
}

// A or B tile: the layout is the fragment's.
template <typename Use, typename T, typename Layout>
void load_matrix_sync(fragment<Use, 16, 16, 16, T, Layout>& f, const T* p, unsigned ldm,
                      std::source_location where = std::source_location::current()) {
  static_assert(!std::is_same_v<Use, accumulator>, "an accumulator load takes a layout_t");
  detail::check_pointer(p, ldm, sizeof(T), "wmma::load_matrix_sync", where);
  for (int e = 0; e < detail::kLaneElements; ++e)
    f.x[e] = p[detail::offset(detail::row_of(e), detail::col_of(e), ldm,
                              std::is_same_v<Layout, col_major>)];
}

inline void load_matrix_sync(fragment<accumulator, 16, 16, 16, float>& f, const float* p,
                             unsigned ldm, layout_t layout,
                             std::source_location where = std::source_location::current()) {
  detail::check_pointer(p, ldm, sizeof(float), "wmma::load_matrix_sync", where);
  for (int e = 0; e < detail::kLaneElements; ++e)
    f.x[e] = p[detail::offset(detail::row_of(e), detail::col_of(e), ldm, layout == mem_col_major)];
}

inline void store_matrix_sync(float* p, const fragment<accumulator, 16, 16, 16, float>& f,
                              unsigned ldm, layout_t layout,
                              std::source_location where = std::source_location::current()) {
  detail::check_pointer(p, ldm, sizeof(float), "wmma::store_matrix_sync", where);
  for (int e = 0; e < detail::kLaneElements; ++e)
    p[detail::offset(detail::row_of(e), detail::col_of(e), ldm, layout == mem_col_major)] = f.x[e];
}

// d = a b + c. Each lane computes its 8 elements of d from every lane's part of a and b, summing
// the 16 products in float32 in order (products of bf16 values are exact in float32).
template <typename LayoutA, typename LayoutB>
void mma_sync(fragment<accumulator, 16, 16, 16, float>& d,
              const fragment<matrix_a, 16, 16, 16, __nv_bfloat16, LayoutA>& a,
              const fragment<matrix_b, 16, 16, 16, __nv_bfloat16, LayoutB>& b,
              const fragment<accumulator, 16, 16, 16, float>& c,
              std::source_location where = std::source_location::current()) {
  namespace emu = qkv::cuda_emulator;
  emu::LaneExchange& mine = emu::my_exchange();
  mine.a = &a;
  mine.b = &b;
  emu::warp_collective(0xffffffffu, "wmma::mma_sync", where);
  const emu::LaneExchange* lanes = emu::warp_exchange();
  // element (row, col) of the warp's a or b: held by lane index / 8, as its element index % 8
  auto a_at = [&](int row, int col) {
    const int index = row * 16 + col;
    const auto* part = static_cast<const std::remove_cvref_t<decltype(a)>*>(lanes[index / 8].a);
    return detail::to_float(part->x[index % 8]);
  };
  auto b_at = [&](int row, int col) {
    const int index = row * 16 + col;
    const auto* part = static_cast<const std::remove_cvref_t<decltype(b)>*>(lanes[index / 8].b);
    return detail::to_float(part->x[index % 8]);
  };
  float result[detail::kLaneElements];
  for (int e = 0; e < detail::kLaneElements; ++e) {
    const int row = detail::row_of(e), col = detail::col_of(e);
    float sum = c.x[e];
    for (int k = 0; k < 16; ++k) sum += a_at(row, k) * b_at(k, col);
    result[e] = sum;
  }
  emu::warp_collective(0xffffffffu, "wmma::mma_sync", where);  // every lane has read a and b
  for (int e = 0; e < detail::kLaneElements; ++e) d.x[e] = result[e];
}

}  // namespace nvcuda::wmma
