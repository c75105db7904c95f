#include "train/colormap.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace qkv::train {

namespace {

struct Rgb {
  double r, g, b;
};

// Nine control points at t = 0, 1/8, ..., 1, in 0..255. Lightness increases along the list.
constexpr std::array<Rgb, 9> kControl = {{
    {68, 1, 84},
    {71, 45, 123},
    {59, 82, 139},
    {44, 114, 142},
    {33, 145, 140},
    {39, 173, 129},
    {92, 200, 99},
    {170, 220, 50},
    {253, 231, 37},
}};

}  // namespace

Color colormap(double t) {
  if (std::isnan(t)) return {255, 0, 255};
  t = std::fmin(1.0, std::fmax(0.0, t));
  double pos = t * double(kControl.size() - 1);
  size_t i = std::min(size_t(pos), kControl.size() - 2);
  double f = pos - double(i);
  const Rgb& a = kControl[i];
  const Rgb& b = kControl[i + 1];
  auto mix = [f](double u, double v) { return uint8_t(std::lround(u + (v - u) * f)); };
  return {mix(a.r, b.r), mix(a.g, b.g), mix(a.b, b.b)};
}

}  // namespace qkv::train
