// Integer dot products for int8 inference: int8 activations x int8 weights, int32 accumulation.
//
// Two kernels compute exactly the same integers. The AVX-512 VNNI one uses vpdpbusd, which
// multiplies unsigned by signed bytes and adds four products into each int32 lane; activations are
// therefore shifted to unsigned (x + 128) and the shift is taken back out with the weight row sums:
// sum((x + 128) w) - 128 sum(w) = sum(x w). The portable one is a plain loop. Dispatch is at run
// time by __builtin_cpu_supports, so one binary runs on any x86-64 (or other) CPU.
#pragma once

#include <cstdint>

namespace qkv::nn {

// acc[r * out + o] = sum_k x[r * K + k] * w[o * K + k] for rows x [rows, K] and weights [out, K].
// K must be a multiple of 64 (callers pad with zeros); w_sums[o] = sum_k w[o * K + k].
void int8_matmul(const int8_t* x, int64_t rows, const int8_t* w, const int32_t* w_sums, int64_t out,
                 int64_t K, int32_t* acc, bool use_vnni);

// Whether this CPU has AVX-512 VNNI (and the build targets x86-64).
bool cpu_has_vnni();

}  // namespace qkv::nn
