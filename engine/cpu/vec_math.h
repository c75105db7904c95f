// Branch-free float math the compiler can vectorize: exp and erf for the softmax and GELU kernels.
//
// std::exp and std::erf are calls into libm that GCC will not vectorize, which caps a softmax at a
// few GB/s. These versions are straight-line arithmetic on one float (with selects, not branches),
// so a loop calling them under `#pragma omp simd` becomes AVX-512 (or AVX2) code. Accuracy is a
// few float32 ulps, checked against libm in tests/engine/test_vec_math.cpp.
#pragma once

#include <bit>
#include <cstdint>

namespace qkv::cpu {

// exp(x) = 2^k * exp(r), k = round(x / ln 2), |r| <= ln(2)/2; exp(r) by its Taylor series to r^6
// (the r^7 term is below 1.3e-7 relative). Returns 0 below -87.3 (exactly 0 for -inf, which a
// masked softmax needs) and a large finite value for very large x.
inline float fast_exp(float x) {
  const float lo = -87.3f, hi = 88.3f;  // 2^k stays a normal float
  float xc = x < lo ? lo : (x > hi ? hi : x);
  // round to nearest by adding and removing 1.5 * 2^23 (floorf would stop the vectorizer)
  float k = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  // ln 2 split in two so that k * ln2 is exact in its high part
  float r = xc - k * 0.693145751953125f - k * 1.42860682030941723e-6f;
  float p = 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  float scale = std::bit_cast<float>((int32_t(k) + 127) << 23);
  return x < lo ? 0.0f : p * scale;
}

// erf by Abramowitz & Stegun 7.1.26 (absolute error below 1.5e-7), odd-extended.
inline float fast_erf(float x) {
  float a = x < 0 ? -x : x;
  float t = 1.0f / (1.0f + 0.3275911f * a);
  float poly =
      t * (0.254829592f +
           t * (-0.284496736f + t * (1.421413741f + t * (-1.453152027f + t * 1.061405429f))));
  float y = 1.0f - poly * fast_exp(-a * a);
  return x < 0 ? -y : y;
}

}  // namespace qkv::cpu
