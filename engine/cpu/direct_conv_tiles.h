// The walk both direct convolutions' weight gradients take over gW [O, K] when positions run
// across the lanes (direct_conv.cpp in float32, direct_conv_bf16.cpp in bfloat16): tiles of 4
// output channels (then 2, 1) x 6 taps (12 for a lone channel; then the 1 to 5 left as one
// tile), each tile's sums kept in registers. Only the tile differs between the two, so it is passed
// in.
#pragma once

#include <cstdint>

// The tiles end in _mm512_reduce_add_ps, which GCC 12 builds on a self-initialized "undefined"
// vector; inlined into the tile lambdas below it is reported as -Wuninitialized (GCC bug 105593,
// fixed in GCC 13; batch_norm_kernels.cpp meets the same). Nothing reads an uninitialized value.
#if !defined(__clang__)  // a GCC-only warning; clang would warn about the unknown name
#pragma GCC diagnostic ignored "-Wuninitialized"
#endif

namespace qkv::cpu {

// Calls tile.template operator()<OB, KB>(o0, k0) for every tile of OB output channels from o0
// and KB taps from k0, covering [0, O) x [0, K). The tile is a generic lambda; it carries its
// file's target attribute, so the register tile it calls inlines into it.
template <typename Tile>
inline void for_each_weight_grad_tile(int64_t O, int64_t K, Tile&& tile) {
  const auto row = [&]<int OB>(int64_t o0) {
    int64_t k0 = 0;
    // A single output channel (CBAM's 7 x 7 spatial convolution, 2 -> 1): 6 sums would each wait
    // for their previous FMA; 12 taps a tile keep 12 in flight. Each weight's sum is the same.
    if constexpr (OB == 1)
      for (; k0 + 12 <= K; k0 += 12) tile.template operator()<1, 12>(o0, k0);
    for (; k0 + 6 <= K; k0 += 6) tile.template operator()<OB, 6>(o0, k0);
    switch (K - k0) {
      case 5:
        return tile.template operator()<OB, 5>(o0, k0);
      case 4:
        return tile.template operator()<OB, 4>(o0, k0);
      case 3:
        return tile.template operator()<OB, 3>(o0, k0);
      case 2:
        return tile.template operator()<OB, 2>(o0, k0);
      case 1:
        return tile.template operator()<OB, 1>(o0, k0);
      default:
        return;
    }
  };
  int64_t o0 = 0;
  for (; o0 + 4 <= O; o0 += 4) row.template operator()<4>(o0);
  if (o0 + 2 <= O) row.template operator()<2>(o0), o0 += 2;
  if (o0 < O) row.template operator()<1>(o0);
}

}  // namespace qkv::cpu
