// A perceptual colormap: equal steps in value look like equal steps in colour, lightness rises
// monotonically (so the picture survives grayscale printing), and it reads for colour-blind people.
// The map runs dark blue-purple -> teal -> green -> yellow, like matplotlib's viridis, built from a
// handful of control points with linear interpolation between them.
#pragma once

#include "train/png.h"

namespace qkv::train {

// t in [0, 1] (clamped; NaN draws as magenta so it stands out).
Color colormap(double t);

}  // namespace qkv::train
