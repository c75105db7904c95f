// Branch-free float math the compiler can vectorize: exp, sigmoid and erf for the softmax, sigmoid
// and GELU kernels.
//
// std::exp and std::erf are calls into libm that GCC will not vectorize, which caps a softmax at a
// few GB/s. These versions are straight-line arithmetic on one float (with selects, not branches),
// so a loop calling them under `#pragma omp simd` becomes AVX-512 (or AVX2) code. Accuracy is a
// few float32 ulps, checked against libm in tests/engine/test_vec_math.cpp.
#pragma once

#include <bit>
#include <cmath>
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

// sigmoid(x) = 1 / (1 + exp(-x)) in the two-sided form, e = exp(-|x|) never overflowing: 1 / (1 +
// e) for x >= 0, e / (1 + e) below, chosen by a select. Relative error a few ulps; 0 (not a
// subnormal) below x = -87.3, where fast_exp returns 0; NaN stays NaN.
inline float fast_sigmoid(float x) {
  const float e = fast_exp(x < 0.0f ? x : -x);
  const float r = 1.0f / (1.0f + e);
  return x >= 0.0f ? r : e * r;
}

// erf(x) = x P(x^2) / Q(x^2) on |x| <= 3.92 (beyond, erf is +-1 in float), with P and Q of
// degree 5: a rational fit made for qkv by weighted least squares (Sanathanan-Koerner
// iterations, numpy, 40000 points on [0, 3.92]); 5.5e-8 absolute error in exact arithmetic,
// about 3.5e-7 evaluated in float. Eleven FMAs and one division, no exp: about a third of the
// work of the Abramowitz & Stegun 7.1.26 form it replaced (1 - t poly(t) exp(-x^2)), which
// kept GELU under half of memory bandwidth.
inline float fast_erf(float x) {
  const float limit = 3.92f;
  const float xc = x < -limit ? -limit : (x > limit ? limit : x);
  const float u = xc * xc;
  float p = 2.090992429e-06f;
  p = p * u + 2.865264037e-04f;
  p = p * u + 3.729245174e-03f;
  p = p * u + 5.264087596e-02f;
  p = p * u + 1.892325653e-01f;
  p = p * u + 1.128379077f;
  float q = 3.860212003e-05f;
  q = q * u + 1.158385128e-03f;
  q = q * u + 1.489290107e-02f;
  q = q * u + 1.136676607e-01f;
  q = q * u + 5.010352526e-01f;
  q = q * u + 1.0f;
  const float y = xc * p / q;
  return y > 1.0f ? 1.0f : (y < -1.0f ? -1.0f : y);
}

// The `Math` of engine/gelu.h for the CPU's kernels: float uses the vectorizable erf and exp above,
// double keeps libm's.
struct CpuMath {
  static float erf(float v) { return fast_erf(v); }
  static double erf(double v) { return std::erf(v); }
  static float exp(float v) { return fast_exp(v); }
  static double exp(double v) { return std::exp(v); }
};

}  // namespace qkv::cpu
