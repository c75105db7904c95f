// `qkv bench peak`'s tile ceiling (train/bench/tile_ceiling.h): the call it times is a real
// product of its two panels by the kernel gemm() uses; the result names that kernel and its depth.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <string>
#include <vector>

#include "engine/cpu/gemm_kernel.h"
#include "engine/cpu/scratch_buffer.h"
#include "engine/parallel.h"
#include "train/bench/tile_ceiling.h"

using namespace qkv;

BOOST_AUTO_TEST_SUITE(tile_ceiling)

BOOST_AUTO_TEST_CASE(the_timed_call_is_the_panels_product_by_gemms_kernel) {
  const cpu::GemmMicrokernel<float>& k = *cpu::gemm_kernels<float>().front();
  const int64_t depth = bench::ceiling_tile_depth();
  BOOST_TEST(int64_t(sizeof(float)) * depth * (k.mr + k.nr) <= (int64_t(24) << 10));
  BOOST_TEST(depth >= 64);
  // 64-byte aligned panels of small integers, a different pattern in each row and column
  cpu::ScratchBuffer a_panel, b_panel;
  float* pa = static_cast<float*>(a_panel.get(sizeof(float) * size_t(depth * k.mr)));
  float* pb = static_cast<float*>(b_panel.get(sizeof(float) * size_t(depth * k.nr)));
  std::vector<float> c(size_t(k.mr * k.nr), NAN);
  for (int64_t p = 0; p < depth; ++p) {
    for (int i = 0; i < k.mr; ++i) pa[p * k.mr + i] = float((p * 3 + i * 7) % 11) - 5;
    for (int j = 0; j < k.nr; ++j) pb[p * k.nr + j] = float((p * 5 + j * 3) % 13) - 6;
  }
  bench::run_ceiling_tile(depth, pa, pb, c.data());
  for (int i = 0; i < k.mr; ++i)
    for (int j = 0; j < k.nr; ++j) {
      double expected = 0;  // small integers: every partial sum exact in float32
      for (int64_t p = 0; p < depth; ++p)
        expected += double(pa[p * k.mr + i]) * double(pb[p * k.nr + j]);
      BOOST_TEST(c[size_t(i * k.nr + j)] == expected, "tile (" << i << ", " << j << ")");
    }
}

BOOST_AUTO_TEST_CASE(the_ceiling_names_its_kernel_and_depth_and_restores_the_pool) {
  const cpu::GemmMicrokernel<float>& k = *cpu::gemm_kernels<float>().front();
  const int saved = num_threads();
  const bench::TileCeiling one = bench::measured_tile_ceiling(1, 0.02);
  const bench::TileCeiling two = bench::measured_tile_ceiling(2, 0.02);
  BOOST_TEST(num_threads() == saved);  // the pool's size is restored
  BOOST_TEST(one.kernel ==
             std::string(k.name) + " " + std::to_string(k.mr) + "x" + std::to_string(k.nr));
  BOOST_TEST(one.depth == bench::ceiling_tile_depth());
  BOOST_TEST(std::isfinite(one.gflops));
  BOOST_TEST(one.gflops > 0);
  BOOST_TEST(std::isfinite(two.gflops));
  BOOST_TEST(two.gflops > 0);
}

BOOST_AUTO_TEST_SUITE_END()
