// The pictures a run draws: attention maps, loss curves, bar charts, heatmap overlays.
//
// Each function returns an Image (so tests and callers can compose or inspect it); the *_png
// variants write it to a file atomically.
#pragma once

#include <string>
#include <vector>

#include "train/png.h"

namespace qkv::train {

// ---- attention ------------------------------------------------------------------------------

// One attention map: `weights` is [T, S] row-major (row t = what query t attends to over the S
// keys), drawn as coloured cells with the query tokens down the left, the key tokens along the
// top (written upwards), a title, and a colour bar from 0 to the largest weight. A token that is
// a single space is shown as "_" so it is visible. `vmax` > 0 fixes the top of the colour scale
// (to compare several maps); 0 uses this map's largest weight.
Image attention_heatmap(const std::vector<float>& weights,
                        const std::vector<std::string>& row_tokens,
                        const std::vector<std::string>& col_tokens, const std::string& title,
                        double vmax = 0);

// One layer's heads side by side (`heads[h]` is [T, S]), followed by their average, in a grid of
// at most `columns` maps per row, under a common title. All maps share one colour scale.
Image attention_grid(const std::vector<std::vector<float>>& heads,
                     const std::vector<std::string>& row_tokens,
                     const std::vector<std::string>& col_tokens, const std::string& title,
                     int columns = 4);

// ---- curves and bars ------------------------------------------------------------------------

struct Series {
  std::string name;
  std::vector<double> x, y;  // same length; NaN or infinite points are skipped
};

struct PlotOptions {
  std::string title, x_label = "step", y_label;
  bool log_y = false;  // for losses spanning decades; non-positive values are skipped
  bool log_x = false;  // base 2, ticks at powers of two (sequence lengths, sizes); x <= 0 skipped
  int width = 720, height = 440;
};

// Lines with labelled axes, "nice" tick values (1, 2, 5 x 10^k), grid lines and a legend.
Image line_plot(const std::vector<Series>& series, const PlotOptions& options);
void loss_curve_png(const std::string& path, const std::vector<Series>& series,
                    const PlotOptions& options);

// Vertical bars (e.g. the channel weights of a squeeze-and-excitation block), one per value;
// `labels` may be empty (bars are then numbered).
Image bar_chart(const std::vector<double>& values, const std::vector<std::string>& labels,
                const PlotOptions& options);
void bar_chart_png(const std::string& path, const std::vector<double>& values,
                   const std::vector<std::string>& labels, const PlotOptions& options);

// ---- images ---------------------------------------------------------------------------------

// A grayscale image `gray` [height, width] in [0, 1] with a heatmap `heat` [heat_h, heat_w]
// (e.g. CBAM's spatial attention, possibly at a lower resolution) stretched over it and blended
// with weight `alpha`; the heat is normalized to its own min..max. Each pixel is drawn as
// `scale` x `scale` pixels so a 28x28 image is visible.
Image overlay_heatmap_on_image(const std::vector<float>& gray, int height, int width,
                               const std::vector<float>& heat, int heat_h, int heat_w,
                               double alpha = 0.5, int scale = 8);

// Tick positions from at or below lo to at or above hi, with a step of 1, 2 or 5 times a power of
// ten, about `target` of them. Exposed for tests.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
// "0.5", "1e-04", "2000": short tick labels.
std::string tick_label(double value);

}  // namespace qkv::train
