// Packing for the bfloat16 GEMMs (gemm_bf16_amx.cpp, and gemm_bf16_avx512.cpp, whose register
// tiles read the same layout): copying blocks of the operands into the
// order tile loads read them, zero-padded to whole tiles, and rounded to bfloat16 on the way when
// the operand is float32.
//
// An A tile is 16 rows of 32 depth values; a B tile is 16 rows of 16 columns x 2 depth values
// ("VNNI" order: each float32 lane of TDPBF16PS adds the products at depths 2r and 2r + 1, so
// those two values of a column sit side by side). The kernel works on 32 x 32 blocks of C, so
// operands are packed as panels of 32 rows (A) or 32 columns (B); per depth step of 32, a panel
// holds two tiles, 2 KiB, one after the other.
//
// Each operand comes as stored or transposed. The stored cases are straight copies (A) or an
// interleave of two rows (B); the transposed ones go through 16 x 16 transposes of 32-bit words
// in registers. Everything here uses AVX-512 and AVX512-BF16, and is called only when
// amx_bf16_available() or avx512_bf16_supported() (gemm_bf16_kernels.h).
#pragma once

#include <cstdint>

namespace qkv::cpu::amx {

constexpr int kBlock = 32;                   // rows of an A panel, columns of a B panel
constexpr int kStep = 32;                    // depth per tile product (64 bytes of bfloat16)
constexpr int kTileValues = 16 * kStep;      // bfloat16 values in one A or B tile (1 KiB)
constexpr int kPanelStep = 2 * kTileValues;  // one depth step of a panel: two tiles

inline int64_t div_up(int64_t x, int64_t y) { return (x + y - 1) / y; }

// Packs rows [0, rows) x depth [0, depth) of op(A): value (i, p) at a[i * lda + p] when A is as
// stored, a[i + p * lda] when transposed. Panel t, depth step s is at
// dst + (t * steps + s) * kPanelStep: 32 rows of 32 values (the step's two A tiles, one above the
// other). Source is uint16_t (bfloat16 bits) or float.
template <typename Source>
void pack_a(const Source* a, int64_t lda, bool transposed, int64_t rows, int64_t depth,
            uint16_t* dst);

// Packs depth [0, depth) x columns [0, cols) of op(B): value (p, j) at b[p * ldb + j] as stored,
// b[p + j * ldb] transposed. Panel t, depth step s is at dst + (t * steps + s) * kPanelStep: the
// tile of columns 0-15, then the tile of columns 16-31; row r of a tile holds its 16 columns'
// values at depths 2r and 2r + 1.
template <typename Source>
void pack_b(const Source* b, int64_t ldb, bool transposed, int64_t depth, int64_t cols,
            uint16_t* dst);

}  // namespace qkv::cpu::amx
