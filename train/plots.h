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
// keys), drawn as coloured cells under a title, with the axis titles "query" (left) and "key"
// (top), the query tokens down the left and the key tokens along the top, written across (in
// staggered rows where a token is wider than its column, each joined to its column by a thin
// line), and a colour bar of the weight from 0 to the largest weight. Tokens are drawn at twice
// the font size when the cells are large enough. A token that is a single space is shown as "_".
// `vmax` > 0 fixes the top of the colour scale (to compare several maps); 0 uses this map's
// largest weight.
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
  // Drawn against a second, linear y axis on the right (e.g. an accuracy beside a log-scale
  // loss); the legend says "(right axis)".
  bool right_axis = false;
};

struct PlotOptions {
  std::string title, x_label = "step", y_label;
  std::string right_y_label{};  // the right axis's title; empty: the right series' names
  bool log_y = false;  // the left axis; for losses spanning decades; values <= 0 are skipped
  bool log_x = false;  // base 2, ticks at powers of two (sequence lengths, sizes); x <= 0 skipped
  int width = 720, height = 440;
};

// Lines with labelled axes, "nice" tick values (1, 2, 5 x 10^k), grid lines and a legend. The
// right axis exists when a series asks for it; its range is that of its own series.
Image line_plot(const std::vector<Series>& series, const PlotOptions& options);
void loss_curve_png(const std::string& path, const std::vector<Series>& series,
                    const PlotOptions& options);

// Where line_plot puts its axes: the plot area in pixels and the tick labels, bottom to top.
// Exposed so tests can check the axes without reading pixels.
struct PlotLayout {
  int x0 = 0, y0 = 0, x1 = 0, y1 = 0;                         // plot area (y0 is the top)
  std::vector<std::string> y_tick_labels, right_tick_labels;  // the latter empty: no right axis
  std::string y_title, right_title;
};
PlotLayout line_plot_layout(const std::vector<Series>& series, const PlotOptions& options);

// Vertical bars (e.g. the channel weights of a squeeze-and-excitation block), one per value;
// `labels` may be empty (bars are then numbered). `marks`, empty or one per value, draws a short
// dark line across each bar at that value (e.g. the mean over many inputs, beside this input's
// bar). `y_max` > 0 fixes the top of the y axis (e.g. 1 for sigmoid gates), so charts compare.
Image bar_chart(const std::vector<double>& values, const std::vector<std::string>& labels,
                const PlotOptions& options, const std::vector<double>& marks = {},
                double y_max = 0);
void bar_chart_png(const std::string& path, const std::vector<double>& values,
                   const std::vector<std::string>& labels, const PlotOptions& options);

// ---- images ---------------------------------------------------------------------------------

// A grayscale image `gray` [height, width] in [0, 1] with a heatmap `heat` [heat_h, heat_w]
// (e.g. CBAM's spatial attention, possibly at a lower resolution) stretched bilinearly over it
// and blended with weight `alpha`. The colours span lo..hi when hi > lo (e.g. 0..1 for a sigmoid
// gate, so a nearly constant map looks constant), else the heat's own min..max. Each pixel is
// drawn as `scale` x `scale` pixels so a 28x28 image is visible.
Image overlay_heatmap_on_image(const std::vector<float>& gray, int height, int width,
                               const std::vector<float>& heat, int heat_h, int heat_w,
                               double alpha = 0.5, int scale = 8, double lo = 0, double hi = 0);

// `values` [rows, cols] as coloured cells, lo..hi mapped onto the colormap (clamped), each cell
// `cell` x `cell` pixels: a map at its own resolution, without smoothing.
Image heatmap_cells(const std::vector<float>& values, int rows, int cols, double lo, double hi,
                    int cell);

// A grayscale image [height, width] in [0, 1], each pixel `scale` x `scale`.
Image grayscale_image(const std::vector<float>& gray, int height, int width, int scale);

// ---- colour bars ----------------------------------------------------------------------------

// A vertical colour bar for values lo (bottom) .. hi (top), its coloured strip `height` pixels
// tall with its top-left corner at (x, y), labelled at both ends and the middle. The labels sit a
// clear gap to the right of the strip with no tick marks beside them, so a label never reads as
// a negative number. Returns the width it takes, labels included.
int draw_colorbar(Image& img, int x, int y, int height, double lo, double hi);
int colorbar_width(double lo, double hi);
// The labels draw_colorbar writes: bottom, middle, top.
std::vector<std::string> colorbar_labels(double lo, double hi);

// Tick positions from at or below lo to at or above hi, with a step of 1, 2 or 5 times a power of
// ten, about `target` of them. Exposed for tests.
std::vector<double> nice_ticks(double lo, double hi, int target = 6);
// "0.5", "1e-04", "2000": short tick labels.
std::string tick_label(double value);

}  // namespace qkv::train
