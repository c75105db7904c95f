#include "train/plots.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "engine/error.h"
#include "train/canvas.h"
#include "train/colormap.h"

namespace qkv::train {

namespace {

constexpr int kPad = 8;

std::string display_token(const std::string& token) { return token == " " ? "_" : token; }

// A vertical colour bar of height `h` at (x, y) for values 0..vmax, labelled at both ends and the
// middle.
void draw_colorbar(Image& img, int x, int y, int h, double vmax) {
  const int w = 10;
  for (int j = 0; j < h; ++j)
    fill_rect(img, x, y + j, w, 1, colormap(1.0 - double(j) / std::max(1, h - 1)));
  draw_rect(img, x - 1, y - 1, w + 2, h + 2, kGray);
  const double marks[] = {1.0, 0.5, 0.0};
  for (double m : marks) {
    int ty = y + int(std::lround((1 - m) * (h - 1)));
    fill_rect(img, x + w + 1, ty, 3, 1, kBlack);
    char label[32];
    std::snprintf(label, sizeof label, "%.3g", m * vmax);
    draw_text(img, x + w + 6, std::clamp(ty - 3, y - 3, y + h - 5), label, kBlack);
  }
}

}  // namespace

// ---- attention ------------------------------------------------------------------------------

Image attention_heatmap(const std::vector<float>& weights,
                        const std::vector<std::string>& row_tokens,
                        const std::vector<std::string>& col_tokens, const std::string& title,
                        double vmax) {
  const int T = int(row_tokens.size()), S = int(col_tokens.size());
  QKV_CHECK(T > 0 && S > 0, "attention_heatmap", "needs at least one row and one column token");
  QKV_CHECK(weights.size() == size_t(T) * size_t(S), "attention_heatmap", "weights has ",
            weights.size(), " values but the tokens make a ", T, "x", S, " map");
  const int cell = std::clamp(480 / std::max(T, S), 6, 24);
  const size_t max_label = 12;
  int row_label_w = 0, col_label_h = 0;
  for (const auto& t : row_tokens)
    row_label_w = std::max(row_label_w, text_width(shorten(display_token(t), max_label)));
  for (const auto& t : col_tokens)
    col_label_h = std::max(col_label_h, text_width(shorten(display_token(t), max_label)));

  const int grid_x = kPad + row_label_w + 4;
  const int grid_y = kPad + text_height() + 6 + col_label_h + 4;
  const int bar_x = grid_x + S * cell + 12;
  const int width =
      std::max(bar_x + 10 + 6 + text_width("0.000") + kPad, 2 * kPad + text_width(title));
  const int height = grid_y + T * cell + kPad;
  Image img(width, height);
  draw_text(img, kPad, kPad, title, kBlack);

  if (!(vmax > 0))
    for (float w : weights) vmax = std::max(vmax, double(w));
  if (!(vmax > 0)) vmax = 1;  // all zero (or NaN): draw the scale 0..1
  for (int t = 0; t < T; ++t)
    for (int s = 0; s < S; ++s)
      fill_rect(img, grid_x + s * cell, grid_y + t * cell, cell, cell,
                colormap(weights[size_t(t) * size_t(S) + size_t(s)] / vmax));

  // Labels are centred on their row or column; a cell smaller than the font still gets one label
  // each, overlapping, which is better than a map with no way to read it.
  for (int t = 0; t < T; ++t) {
    std::string label = shorten(display_token(row_tokens[size_t(t)]), max_label);
    draw_text(img, grid_x - 4 - text_width(label), grid_y + t * cell + (cell - 7) / 2, label,
              kBlack);
  }
  for (int s = 0; s < S; ++s) {
    std::string label = shorten(display_token(col_tokens[size_t(s)]), max_label);
    draw_text_up(img, grid_x + s * cell + (cell - 7) / 2, grid_y - 4 - text_width(label), label,
                 kBlack);
  }
  draw_colorbar(img, bar_x, grid_y, T * cell, vmax);
  return img;
}

Image attention_grid(const std::vector<std::vector<float>>& heads,
                     const std::vector<std::string>& row_tokens,
                     const std::vector<std::string>& col_tokens, const std::string& title,
                     int columns) {
  QKV_CHECK(!heads.empty(), "attention_grid", "needs at least one head");
  QKV_CHECK(columns > 0, "attention_grid", "columns must be positive");
  std::vector<float> average(heads[0].size(), 0.0f);
  double vmax = 0;  // one colour scale for all heads, so their colours compare
  for (size_t h = 0; h < heads.size(); ++h) {
    QKV_CHECK(heads[h].size() == average.size(), "attention_grid", "head ", h, " has ",
              heads[h].size(), " weights, head 0 has ", average.size());
    for (size_t i = 0; i < average.size(); ++i) {
      average[i] += heads[h][i] / float(heads.size());
      vmax = std::max(vmax, double(heads[h][i]));
    }
  }
  std::vector<Image> maps;
  for (size_t h = 0; h < heads.size(); ++h)
    maps.push_back(
        attention_heatmap(heads[h], row_tokens, col_tokens, "head " + std::to_string(h), vmax));
  maps.push_back(attention_heatmap(average, row_tokens, col_tokens, "average of heads", vmax));

  const int n = int(maps.size()), cols = std::min(columns, n), rows = (n + cols - 1) / cols;
  const int mw = maps[0].width, mh = maps[0].height;  // same tokens, so all maps are equal size
  const int top = kPad + text_height(2) + kPad;
  Image img(std::max(cols * mw, 2 * kPad + text_width(title, 2)), top + rows * mh);
  draw_text(img, kPad, kPad, title, kBlack, 2);
  for (int k = 0; k < n; ++k) blit(img, maps[size_t(k)], (k % cols) * mw, top + (k / cols) * mh);
  return img;
}

// ---- axes -----------------------------------------------------------------------------------

std::vector<double> nice_ticks(double lo, double hi, int target) {
  if (!(hi > lo)) {  // one value: a small range around it
    double d = lo == 0 ? 1 : std::fabs(lo) * 0.1;
    lo -= d, hi += d;
  }
  double raw = (hi - lo) / std::max(1, target);
  double power = std::pow(10.0, std::floor(std::log10(raw)));
  double step = power;
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * power >= raw) {
      step = m * power;
      break;
    }
  // From the last tick at or below lo to the first at or above hi, so the axis has headroom and
  // no line touches the frame between ticks.
  std::vector<double> ticks;
  const long first = long(std::floor(lo / step + 1e-9)), last = long(std::ceil(hi / step - 1e-9));
  for (long k = first; k <= last; ++k) ticks.push_back(double(k) * step);  // k * step: no drift
  return ticks;
}

std::string tick_label(double value) {
  char buf[32];
  double a = std::fabs(value);
  if (value == 0)
    return "0";
  else if (a >= 1e5 || a < 1e-3)
    std::snprintf(buf, sizeof buf, "%.0e", value);
  else
    std::snprintf(buf, sizeof buf, "%.4g", value);
  return buf;
}

namespace {

const Color kPalette[] = {{31, 99, 180},  {230, 120, 20}, {40, 160, 60},   {200, 40, 40},
                          {140, 90, 190}, {120, 80, 60},  {220, 100, 180}, {100, 100, 100}};

// The plot area inside an image with margins for ticks, labels and title, and the mapping from
// data to pixels.
struct Axes {
  int x0, y0, x1, y1;  // plot area, pixels (y0 top)
  double xmin, xmax, ymin, ymax;
  int px(double x) const { return x0 + int(std::lround((x - xmin) / (xmax - xmin) * (x1 - x0))); }
  int py(double y) const { return y1 - int(std::lround((y - ymin) / (ymax - ymin) * (y1 - y0))); }
};

// Draws frame, grid, ticks, tick labels, axis labels and title. y ticks are data values already
// transformed (log10 when log_y); their labels show the untransformed value.
void draw_axes(Image& img, const Axes& a, const std::vector<double>& xticks,
               const std::vector<double>& yticks, const PlotOptions& o) {
  for (double t : xticks) {
    int x = a.px(t);
    if (x < a.x0 || x > a.x1) continue;
    fill_rect(img, x, a.y0, 1, a.y1 - a.y0, kLightGray);
    fill_rect(img, x, a.y1, 1, 4, kBlack);
    std::string label = tick_label(o.log_x ? std::exp2(t) : t);
    draw_text(img, x - text_width(label) / 2, a.y1 + 7, label, kBlack);
  }
  for (double t : yticks) {
    int y = a.py(t);
    if (y < a.y0 || y > a.y1) continue;
    fill_rect(img, a.x0, y, a.x1 - a.x0, 1, kLightGray);
    fill_rect(img, a.x0 - 4, y, 4, 1, kBlack);
    std::string label = tick_label(o.log_y ? std::pow(10.0, t) : t);
    draw_text(img, a.x0 - 7 - text_width(label), y - 3, label, kBlack);
  }
  draw_rect(img, a.x0, a.y0, a.x1 - a.x0 + 1, a.y1 - a.y0 + 1, kBlack);
  std::string x_label = o.x_label + (o.log_x ? " (log scale)" : "");
  draw_text(img, (a.x0 + a.x1 - text_width(x_label)) / 2, a.y1 + 22, x_label, kBlack);
  std::string y_label = o.y_label + (o.log_y ? " (log scale)" : "");
  draw_text_up(img, kPad, (a.y0 + a.y1 - text_width(y_label)) / 2, y_label, kBlack);
  draw_text(img, (img.width - text_width(o.title, 2)) / 2, kPad, o.title, kBlack, 2);
}

Axes make_axes(const PlotOptions& o, double xmin, double xmax, double ymin, double ymax) {
  return {72, kPad + text_height(2) + 12, o.width - 20, o.height - 40, xmin, xmax, ymin, ymax};
}

// Widens [lo, hi] to the outermost ticks, so lines never touch the frame between ticks.
void extend_to_ticks(double& lo, double& hi, const std::vector<double>& ticks) {
  if (ticks.empty()) return;
  lo = std::min(lo, ticks.front());
  hi = std::max(hi, ticks.back());
  if (!(hi > lo)) hi = lo + 1;
}

}  // namespace

Image line_plot(const std::vector<Series>& series, const PlotOptions& o) {
  QKV_CHECK(o.width >= 200 && o.height >= 150, "line_plot", "image of ", o.width, "x", o.height,
            " is too small");
  auto usable = [&](double x, double y) {
    return std::isfinite(x) && std::isfinite(y) && (!o.log_y || y > 0) && (!o.log_x || x > 0);
  };
  auto ty = [&](double y) { return o.log_y ? std::log10(y) : y; };
  auto tx = [&](double x) { return o.log_x ? std::log2(x) : x; };
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY;
  for (const auto& s : series) {
    QKV_CHECK(s.x.size() == s.y.size(), "line_plot", "series '", s.name, "' has ", s.x.size(),
              " x values and ", s.y.size(), " y values");
    for (size_t i = 0; i < s.x.size(); ++i)
      if (usable(s.x[i], s.y[i])) {
        xmin = std::min(xmin, tx(s.x[i])), xmax = std::max(xmax, tx(s.x[i]));
        ymin = std::min(ymin, ty(s.y[i])), ymax = std::max(ymax, ty(s.y[i]));
      }
  }
  if (!(xmin <= xmax)) xmin = 0, xmax = 1, ymin = 0, ymax = 1;  // nothing to draw: empty axes
  std::vector<double> xticks, yticks;
  if (o.log_x) {  // every power of two, or every other one when there are many
    const double step = std::ceil(xmax) - std::floor(xmin) > 10 ? 2 : 1;
    for (double k = std::floor(xmin); k <= std::ceil(xmax); k += step) xticks.push_back(k);
  } else {
    xticks = nice_ticks(xmin, xmax);
  }
  if (o.log_y && std::floor(ymax) - std::ceil(ymin) >= 1) {
    for (double k = std::floor(ymin); k <= std::ceil(ymax); ++k) yticks.push_back(k);
  } else if (o.log_y) {
    for (double v : nice_ticks(std::pow(10.0, ymin), std::pow(10.0, ymax)))
      if (v > 0) yticks.push_back(std::log10(v));
  } else {
    yticks = nice_ticks(ymin, ymax);
  }
  extend_to_ticks(xmin, xmax, xticks);
  extend_to_ticks(ymin, ymax, yticks);

  Image img(o.width, o.height);
  Axes a = make_axes(o, xmin, xmax, ymin, ymax);
  draw_axes(img, a, xticks, yticks, o);
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    Color c = kPalette[k % std::size(kPalette)];
    bool have_last = false;
    int lx = 0, ly = 0;
    for (size_t i = 0; i < s.x.size(); ++i) {
      if (!usable(s.x[i], s.y[i])) {
        have_last = false;  // a gap, not a line through a NaN
        continue;
      }
      int x = a.px(tx(s.x[i])), y = a.py(ty(s.y[i]));
      if (have_last)
        draw_line(img, lx, ly, x, y, c, 2);
      else
        fill_rect(img, x - 1, y - 1, 3, 3, c);
      lx = x, ly = y, have_last = true;
    }
  }
  // Legend in the top-right corner of the plot area.
  int legend_w = 0;
  for (const auto& s : series) legend_w = std::max(legend_w, text_width(s.name));
  if (!series.empty()) {
    int lx = a.x1 - legend_w - 34, ly = a.y0 + 6, lh = int(series.size()) * 12 + 6;
    fill_rect(img, lx, ly, legend_w + 28, lh, kWhite);
    draw_rect(img, lx, ly, legend_w + 28, lh, kGray);
    for (size_t k = 0; k < series.size(); ++k) {
      int y = ly + 5 + int(k) * 12;
      fill_rect(img, lx + 5, y + 3, 14, 2, kPalette[k % std::size(kPalette)]);
      draw_text(img, lx + 23, y, series[k].name, kBlack);
    }
  }
  return img;
}

void loss_curve_png(const std::string& path, const std::vector<Series>& series,
                    const PlotOptions& options) {
  write_png(path, line_plot(series, options));
}

Image bar_chart(const std::vector<double>& values, const std::vector<std::string>& labels,
                const PlotOptions& o) {
  QKV_CHECK(!values.empty(), "bar_chart", "needs at least one value");
  QKV_CHECK(labels.empty() || labels.size() == values.size(), "bar_chart", values.size(),
            " values but ", labels.size(), " labels");
  double lo = 0, hi = 0;
  for (double v : values)
    if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  std::vector<double> yticks = nice_ticks(lo, hi);
  extend_to_ticks(lo, hi, yticks);
  const int n = int(values.size());
  Image img(o.width, o.height);
  Axes a = make_axes(o, -0.5, n - 0.5, lo, hi);
  draw_axes(img, a, {}, yticks, o);  // bars are labelled below instead of x ticks
  const double slot = double(a.x1 - a.x0) / n;
  const int bar_w = std::max(1, int(slot * 0.8));
  // Label every k-th bar so labels never overlap.
  int max_label_w = 0;
  for (int i = 0; i < n; ++i)
    max_label_w =
        std::max(max_label_w, text_width(labels.empty() ? std::to_string(i) : labels[size_t(i)]));
  const int every = std::max(1, int(std::ceil((max_label_w + 4) / slot)));
  for (int i = 0; i < n; ++i) {
    double v = values[size_t(i)];
    if (!std::isfinite(v)) continue;
    int cx = a.px(i), top = a.py(std::max(v, 0.0)), bottom = a.py(std::min(v, 0.0));
    fill_rect(img, cx - bar_w / 2, top, bar_w, std::max(1, bottom - top), kPalette[0]);
    if (i % every == 0) {
      std::string label = labels.empty() ? std::to_string(i) : labels[size_t(i)];
      draw_text(img, cx - text_width(label) / 2, a.y1 + 7, label, kBlack);
    }
  }
  if (lo < 0) fill_rect(img, a.x0, a.py(0), a.x1 - a.x0, 1, kBlack);
  return img;
}

void bar_chart_png(const std::string& path, const std::vector<double>& values,
                   const std::vector<std::string>& labels, const PlotOptions& options) {
  write_png(path, bar_chart(values, labels, options));
}

// ---- images ---------------------------------------------------------------------------------

Image overlay_heatmap_on_image(const std::vector<float>& gray, int height, int width,
                               const std::vector<float>& heat, int heat_h, int heat_w, double alpha,
                               int scale) {
  QKV_CHECK(height > 0 && width > 0 && gray.size() == size_t(height) * size_t(width),
            "overlay_heatmap_on_image", "image has ", gray.size(), " values for ", height, "x",
            width);
  QKV_CHECK(heat_h > 0 && heat_w > 0 && heat.size() == size_t(heat_h) * size_t(heat_w),
            "overlay_heatmap_on_image", "heatmap has ", heat.size(), " values for ", heat_h, "x",
            heat_w);
  QKV_CHECK(scale >= 1 && alpha >= 0 && alpha <= 1, "overlay_heatmap_on_image",
            "need scale >= 1 and alpha in [0, 1]");
  auto [hmin_it, hmax_it] = std::minmax_element(heat.begin(), heat.end());
  const double hmin = *hmin_it, range = *hmax_it - *hmin_it > 0 ? *hmax_it - *hmin_it : 1.0;
  // Bilinear sampling of the heatmap at a pixel centre, so a 7x7 map over 28x28 looks smooth.
  auto sample = [&](int y, int x) {
    double fy = std::clamp((y + 0.5) * heat_h / height - 0.5, 0.0, double(heat_h - 1));
    double fx = std::clamp((x + 0.5) * heat_w / width - 0.5, 0.0, double(heat_w - 1));
    int y0 = int(fy), x0 = int(fx), y1 = std::min(y0 + 1, heat_h - 1),
        x1 = std::min(x0 + 1, heat_w - 1);
    double wy = fy - y0, wx = fx - x0;
    auto h = [&](int yy, int xx) { return double(heat[size_t(yy) * size_t(heat_w) + size_t(xx)]); };
    return (1 - wy) * ((1 - wx) * h(y0, x0) + wx * h(y0, x1)) +
           wy * ((1 - wx) * h(y1, x0) + wx * h(y1, x1));
  };
  Image img(width * scale, height * scale);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      double g = 255.0 * std::clamp(double(gray[size_t(y) * size_t(width) + size_t(x)]), 0.0, 1.0);
      Color h = colormap((sample(y, x) - hmin) / range);
      auto mix = [&](uint8_t c) { return uint8_t(std::lround((1 - alpha) * g + alpha * c)); };
      fill_rect(img, x * scale, y * scale, scale, scale, {mix(h.r), mix(h.g), mix(h.b)});
    }
  return img;
}

}  // namespace qkv::train
