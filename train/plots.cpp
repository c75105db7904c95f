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

// How attention_heatmap writes its key tokens: the font scale, and in how many staggered rows
// ("tiers") so that neighbouring labels never touch.
struct KeyLabels {
  int scale = 1, tiers = 1, width = 0;  // width: the widest label, in pixels
};

KeyLabels key_label_layout(const std::vector<std::string>& labels, int cell) {
  auto layout = [&](int scale) {
    KeyLabels k{scale, 1, 0};
    for (const auto& l : labels) k.width = std::max(k.width, text_width(l, scale));
    // labels `tiers` columns apart share a row: their centres are tiers * cell apart
    k.tiers = std::max(1, (k.width + 4 + cell - 1) / cell);
    return k;
  };
  KeyLabels big = layout(2);
  // twice the font when rows of cells are tall enough for it and the keys fit in three rows
  if (cell >= text_height(2) + 2 && big.tiers <= 3) return big;
  return layout(1);
}

}  // namespace

// ---- colour bars ----------------------------------------------------------------------------

namespace {
constexpr int kBarWidth = 10, kBarGap = 6;  // the strip, and the white gap before its labels
}  // namespace

std::vector<std::string> colorbar_labels(double lo, double hi) {
  // Fixed-point with enough decimals for the span (no exponent, whose "e-05" reads as negative),
  // trailing zeros dropped: 0, 0.484, 0.968 or 0, 0.5, 1.
  const double span = std::fabs(hi - lo) > 0 ? std::fabs(hi - lo) : std::max(std::fabs(hi), 1.0);
  const int decimals = std::clamp(2 - int(std::floor(std::log10(span))), 0, 8);
  std::vector<std::string> labels;
  for (double v : {lo, (lo + hi) / 2, hi}) {
    char label[48];
    std::snprintf(label, sizeof label, "%.*f", decimals, v);
    std::string text = label;
    if (text.find('.') != std::string::npos) {
      text.erase(text.find_last_not_of('0') + 1);
      if (text.back() == '.') text.pop_back();
    }
    if (text == "-0") text = "0";
    labels.push_back(text);
  }
  return labels;
}

int colorbar_width(double lo, double hi) {
  int w = 0;
  for (const auto& l : colorbar_labels(lo, hi)) w = std::max(w, text_width(l));
  return kBarWidth + 2 + kBarGap + w;
}

int draw_colorbar(Image& img, int x, int y, int h, double lo, double hi) {
  for (int j = 0; j < h; ++j)
    fill_rect(img, x, y + j, kBarWidth, 1, colormap(1.0 - double(j) / std::max(1, h - 1)));
  draw_rect(img, x - 1, y - 1, kBarWidth + 2, h + 2, kGray);
  // bottom label's baseline at the strip's bottom, top label's top at its top, middle centred
  const std::vector<std::string> labels = colorbar_labels(lo, hi);
  const int lx = x + kBarWidth + 1 + kBarGap;
  draw_text(img, lx, y + h - text_height() + 1, labels[0], kBlack);
  draw_text(img, lx, y + (h - text_height()) / 2, labels[1], kBlack);
  draw_text(img, lx, y, labels[2], kBlack);
  return colorbar_width(lo, hi);
}

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
  std::vector<std::string> row_labels, col_labels;
  for (const auto& t : row_tokens) row_labels.push_back(shorten(display_token(t), max_label));
  for (const auto& t : col_tokens) col_labels.push_back(shorten(display_token(t), max_label));
  const KeyLabels keys = key_label_layout(col_labels, cell);
  // the query labels, the title and the axis titles at twice the font size when cells are large
  const int row_scale = cell >= text_height(2) + 2 ? 2 : 1;
  int row_label_w = 0;
  for (const auto& l : row_labels) row_label_w = std::max(row_label_w, text_width(l, row_scale));

  // Top to bottom: title, "key", the key labels' tiers (the lowest nearest the grid), the grid.
  // Left to right: "query" (written upwards), the query labels, the grid, the colour bar.
  const int tier_h = text_height(keys.scale) + 3;
  const int keys_title_y = kPad + text_height(row_scale) + 6;
  const int tiers_y = keys_title_y + text_height(row_scale) + 5;
  const int grid_y = tiers_y + keys.tiers * tier_h + (keys.tiers > 1 ? 4 : 1);
  const int query_title_x = kPad;
  const int grid_x = query_title_x + text_height(row_scale) + 6 + row_label_w + 4;
  const int bar_x = grid_x + S * cell + 12;
  if (!(vmax > 0))
    for (float w : weights) vmax = std::max(vmax, double(w));
  if (!(vmax > 0)) vmax = 1;  // all zero (or NaN): draw the scale 0..1
  const int width =
      std::max({bar_x + colorbar_width(0, vmax) + kPad, 2 * kPad + text_width(title, row_scale),
                grid_x + text_width("key", row_scale) + kPad});
  const int height = grid_y + std::max(T * cell, text_width("query", row_scale)) + kPad;
  Image img(width, height);
  draw_text(img, kPad, kPad, title, kBlack, row_scale);
  for (int t = 0; t < T; ++t)
    for (int s = 0; s < S; ++s)
      fill_rect(img, grid_x + s * cell, grid_y + t * cell, cell, cell,
                colormap(weights[size_t(t) * size_t(S) + size_t(s)] / vmax));

  draw_text(img, grid_x + std::max(0, (S * cell - text_width("key", row_scale)) / 2), keys_title_y,
            "key", kBlack, row_scale);
  draw_text_up(img, query_title_x,
               grid_y + std::max(0, (T * cell - text_width("query", row_scale)) / 2), "query",
               kBlack, row_scale);
  // Labels are centred on their row or column; rows smaller than the font still get one label
  // each, overlapping, which is better than a map with no way to read it.
  for (int t = 0; t < T; ++t) {
    const std::string& label = row_labels[size_t(t)];
    draw_text(img, grid_x - 4 - text_width(label, row_scale),
              grid_y + t * cell + (cell - text_height(row_scale)) / 2, label, kBlack, row_scale);
  }
  // Staggered keys: column s in tier s % tiers, tier 0 nearest the grid. A thin line joins each
  // label of a higher tier to its column; labels sit on white so a line never runs through one.
  auto tier_top = [&](int s) { return tiers_y + (keys.tiers - 1 - s % keys.tiers) * tier_h; };
  if (keys.tiers > 1)
    for (int s = 0; s < S; ++s) {
      const int cx = grid_x + s * cell + cell / 2, from = tier_top(s) + tier_h - 2;
      fill_rect(img, cx, from, 1, grid_y - from, kGray);
    }
  for (int s = 0; s < S; ++s) {
    const std::string& label = col_labels[size_t(s)];
    const int lw = text_width(label, keys.scale), cx = grid_x + s * cell + cell / 2;
    const int lx = cx - lw / 2, ly = tier_top(s);
    if (keys.tiers > 1) fill_rect(img, lx - 1, ly - 1, lw + 2, text_height(keys.scale) + 2, kWhite);
    draw_text(img, lx, ly, label, kBlack, keys.scale);
  }
  draw_colorbar(img, bar_x, grid_y, T * cell, 0, vmax);
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
// data to pixels; `r` is the right axis's range.
struct Axes {
  int x0, y0, x1, y1;  // plot area, pixels (y0 top)
  double xmin, xmax, ymin, ymax, rmin = 0, rmax = 1;
  int px(double x) const { return x0 + int(std::lround((x - xmin) / (xmax - xmin) * (x1 - x0))); }
  int py(double y) const { return y1 - int(std::lround((y - ymin) / (ymax - ymin) * (y1 - y0))); }
  int pr(double y) const { return y1 - int(std::lround((y - rmin) / (rmax - rmin) * (y1 - y0))); }
};

int widest(const std::vector<std::string>& labels) {
  int w = 0;
  for (const auto& l : labels) w = std::max(w, text_width(l));
  return w;
}

// Space right of the plot area for the right axis: tick marks, labels, its title.
int right_margin(const std::vector<std::string>& right_labels) {
  return right_labels.empty() ? 20 : 7 + widest(right_labels) + 10 + text_height() + kPad;
}

Axes make_axes(const PlotOptions& o, const std::vector<std::string>& right_labels, double xmin,
               double xmax, double ymin, double ymax) {
  return {72,
          kPad + text_height(2) + 12,
          o.width - right_margin(right_labels),
          o.height - 40,
          xmin,
          xmax,
          ymin,
          ymax};
}

// Draws frame, grid, ticks, tick labels, axis titles and title. y ticks are data values already
// transformed (log10 when log_y); `y_labels` are the untransformed values to write beside them.
// The right axis (when `right_ticks` is not empty) has ticks and labels but no grid lines, which
// would cross the left axis's.
void draw_axes(Image& img, const Axes& a, const std::vector<double>& xticks,
               const std::vector<double>& yticks, const std::vector<std::string>& y_labels,
               const std::vector<double>& right_ticks, const std::vector<std::string>& right_labels,
               const std::string& y_title, const std::string& right_title, const PlotOptions& o) {
  for (double t : xticks) {
    int x = a.px(t);
    if (x < a.x0 || x > a.x1) continue;
    fill_rect(img, x, a.y0, 1, a.y1 - a.y0, kLightGray);
    fill_rect(img, x, a.y1, 1, 4, kBlack);
    std::string label = tick_label(o.log_x ? std::exp2(t) : t);
    draw_text(img, x - text_width(label) / 2, a.y1 + 7, label, kBlack);
  }
  for (size_t i = 0; i < yticks.size(); ++i) {
    int y = a.py(yticks[i]);
    if (y < a.y0 || y > a.y1) continue;
    fill_rect(img, a.x0, y, a.x1 - a.x0, 1, kLightGray);
    fill_rect(img, a.x0 - 4, y, 4, 1, kBlack);
    draw_text(img, a.x0 - 7 - text_width(y_labels[i]), y - 3, y_labels[i], kBlack);
  }
  for (size_t i = 0; i < right_ticks.size(); ++i) {
    int y = a.pr(right_ticks[i]);
    if (y < a.y0 || y > a.y1) continue;
    fill_rect(img, a.x1 + 1, y, 4, 1, kBlack);
    draw_text(img, a.x1 + 8, y - 3, right_labels[i], kBlack);
  }
  draw_rect(img, a.x0, a.y0, a.x1 - a.x0 + 1, a.y1 - a.y0 + 1, kBlack);
  std::string x_label = o.x_label + (o.log_x ? " (log scale)" : "");
  draw_text(img, (a.x0 + a.x1 - text_width(x_label)) / 2, a.y1 + 22, x_label, kBlack);
  draw_text_up(img, kPad, (a.y0 + a.y1 - text_width(y_title)) / 2, y_title, kBlack);
  if (!right_ticks.empty())
    draw_text_up(img, img.width - kPad - text_height(), (a.y0 + a.y1 - text_width(right_title)) / 2,
                 right_title, kBlack);
  draw_text(img, (img.width - text_width(o.title, 2)) / 2, kPad, o.title, kBlack, 2);
}

// Widens [lo, hi] to the outermost ticks, so lines never touch the frame between ticks.
void extend_to_ticks(double& lo, double& hi, const std::vector<double>& ticks) {
  if (ticks.empty()) return;
  lo = std::min(lo, ticks.front());
  hi = std::max(hi, ticks.back());
  if (!(hi > lo)) hi = lo + 1;
}

std::string names_of(const std::vector<Series>& series, bool right) {
  std::string names;
  for (const auto& s : series)
    if (s.right_axis == right) names += (names.empty() ? "" : ", ") + s.name;
  return names;
}

// Everything line_plot decides before it draws: ranges (transformed), ticks and their labels.
struct Plan {
  Axes axes;
  std::vector<double> xticks, yticks, rticks;
  std::vector<std::string> y_labels, r_labels;
  std::string y_title, r_title;
};

Plan plan_line_plot(const std::vector<Series>& series, const PlotOptions& o) {
  QKV_CHECK(o.width >= 200 && o.height >= 150, "line_plot", "image of ", o.width, "x", o.height,
            " is too small");
  auto tx = [&](double x) { return o.log_x ? std::log2(x) : x; };
  auto ty = [&](double y) { return o.log_y ? std::log10(y) : y; };
  double xmin = INFINITY, xmax = -INFINITY, ymin = INFINITY, ymax = -INFINITY, rmin = INFINITY,
         rmax = -INFINITY;
  bool any_right = false;
  for (const auto& s : series) {
    QKV_CHECK(s.x.size() == s.y.size(), "line_plot", "series '", s.name, "' has ", s.x.size(),
              " x values and ", s.y.size(), " y values");
    any_right |= s.right_axis;
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double x = s.x[i], y = s.y[i];
      if (!std::isfinite(x) || !std::isfinite(y) || (o.log_x && x <= 0)) continue;
      if (s.right_axis) {
        rmin = std::min(rmin, y), rmax = std::max(rmax, y);
      } else {
        if (o.log_y && y <= 0) continue;
        ymin = std::min(ymin, ty(y)), ymax = std::max(ymax, ty(y));
      }
      xmin = std::min(xmin, tx(x)), xmax = std::max(xmax, tx(x));
    }
  }
  if (!(xmin <= xmax)) xmin = 0, xmax = 1;  // nothing to draw: empty axes
  if (!(ymin <= ymax)) ymin = 0, ymax = o.log_y ? 0 : 1;
  Plan p{};
  if (o.log_x) {  // every power of two, or every other one when there are many
    const double step = std::ceil(xmax) - std::floor(xmin) > 10 ? 2 : 1;
    for (double k = std::floor(xmin); k <= std::ceil(xmax); k += step) p.xticks.push_back(k);
  } else {
    p.xticks = nice_ticks(xmin, xmax);
  }
  if (o.log_y && std::floor(ymax) - std::ceil(ymin) >= 1) {
    for (double k = std::floor(ymin); k <= std::ceil(ymax); ++k) p.yticks.push_back(k);
  } else if (o.log_y) {
    for (double v : nice_ticks(std::pow(10.0, ymin), std::pow(10.0, ymax)))
      if (v > 0) p.yticks.push_back(std::log10(v));
  } else {
    p.yticks = nice_ticks(ymin, ymax);
  }
  for (double t : p.yticks) p.y_labels.push_back(tick_label(o.log_y ? std::pow(10.0, t) : t));
  if (any_right) {
    if (!(rmin <= rmax)) rmin = 0, rmax = 1;
    p.rticks = nice_ticks(rmin, rmax);
    for (double t : p.rticks) p.r_labels.push_back(tick_label(t));
    extend_to_ticks(rmin, rmax, p.rticks);
  }
  extend_to_ticks(xmin, xmax, p.xticks);
  extend_to_ticks(ymin, ymax, p.yticks);
  p.axes = make_axes(o, p.r_labels, xmin, xmax, ymin, ymax);
  p.axes.rmin = any_right ? rmin : 0, p.axes.rmax = any_right ? rmax : 1;
  p.y_title =
      (o.y_label.empty() ? names_of(series, false) : o.y_label) + (o.log_y ? " (log scale)" : "");
  if (any_right) p.r_title = o.right_y_label.empty() ? names_of(series, true) : o.right_y_label;
  return p;
}

}  // namespace

PlotLayout line_plot_layout(const std::vector<Series>& series, const PlotOptions& options) {
  Plan p = plan_line_plot(series, options);
  return {p.axes.x0, p.axes.y0, p.axes.x1, p.axes.y1, p.y_labels, p.r_labels, p.y_title, p.r_title};
}

Image line_plot(const std::vector<Series>& series, const PlotOptions& o) {
  const Plan p = plan_line_plot(series, o);
  const Axes& a = p.axes;
  Image img(o.width, o.height);
  draw_axes(img, a, p.xticks, p.yticks, p.y_labels, p.rticks, p.r_labels, p.y_title, p.r_title, o);
  for (size_t k = 0; k < series.size(); ++k) {
    const Series& s = series[k];
    Color c = kPalette[k % std::size(kPalette)];
    bool have_last = false;
    int lx = 0, ly = 0;
    for (size_t i = 0; i < s.x.size(); ++i) {
      const double x = s.x[i], y = s.y[i];
      const bool usable = std::isfinite(x) && std::isfinite(y) && (!o.log_x || x > 0) &&
                          (s.right_axis || !o.log_y || y > 0);
      if (!usable) {
        have_last = false;  // a gap, not a line through a NaN
        continue;
      }
      const int px = a.px(o.log_x ? std::log2(x) : x);
      const int py = s.right_axis ? a.pr(y) : a.py(o.log_y ? std::log10(y) : y);
      if (have_last)
        draw_line(img, lx, ly, px, py, c, 2);
      else
        fill_rect(img, px - 1, py - 1, 3, 3, c);
      lx = px, ly = py, have_last = true;
    }
  }
  // The legend goes in the corner of the plot area where it hides the fewest drawn points
  // (top right when there is a tie), so it does not cover the end of a rising curve.
  std::vector<std::string> names;
  for (const auto& s : series) names.push_back(s.name + (s.right_axis ? " (right axis)" : ""));
  if (!series.empty()) {
    const int lw = widest(names) + 28, lh = int(series.size()) * 12 + 6;
    const int left = a.x0 + 6, right = a.x1 - lw - 6, top = a.y0 + 6, bottom = a.y1 - lh - 6;
    const int corners[4][2] = {{right, top}, {left, top}, {right, bottom}, {left, bottom}};
    auto hidden = [&](int cx, int cy) {
      int n = 0;
      for (int y = cy; y < cy + lh; ++y)
        for (int x = cx; x < cx + lw; ++x)
          for (size_t k = 0; k < series.size(); ++k)
            n += img.at(x, y) == kPalette[k % std::size(kPalette)];
      return n;
    };
    int best = 0, least = hidden(corners[0][0], corners[0][1]);
    for (int c = 1; c < 4; ++c)
      if (int n = hidden(corners[c][0], corners[c][1]); n < least) best = c, least = n;
    const int lx = corners[best][0], ly = corners[best][1];
    fill_rect(img, lx, ly, lw, lh, kWhite);
    draw_rect(img, lx, ly, lw, lh, kGray);
    for (size_t k = 0; k < series.size(); ++k) {
      int y = ly + 5 + int(k) * 12;
      fill_rect(img, lx + 5, y + 3, 14, 2, kPalette[k % std::size(kPalette)]);
      draw_text(img, lx + 23, y, names[k], kBlack);
    }
  }
  return img;
}

void loss_curve_png(const std::string& path, const std::vector<Series>& series,
                    const PlotOptions& options) {
  write_png(path, line_plot(series, options));
}

Image bar_chart(const std::vector<double>& values, const std::vector<std::string>& labels,
                const PlotOptions& o, const std::vector<double>& marks, double y_max) {
  QKV_CHECK(!values.empty(), "bar_chart", "needs at least one value");
  QKV_CHECK(labels.empty() || labels.size() == values.size(), "bar_chart", values.size(),
            " values but ", labels.size(), " labels");
  QKV_CHECK(marks.empty() || marks.size() == values.size(), "bar_chart", values.size(),
            " values but ", marks.size(), " marks");
  double lo = 0, hi = y_max > 0 ? y_max : 0;
  for (const auto* list : {&values, &marks})
    for (double v : *list)
      if (std::isfinite(v)) lo = std::min(lo, v), hi = std::max(hi, v);
  std::vector<double> yticks = nice_ticks(lo, hi);
  extend_to_ticks(lo, hi, yticks);
  std::vector<std::string> y_labels;
  for (double t : yticks) y_labels.push_back(tick_label(t));
  const int n = int(values.size());
  Image img(o.width, o.height);
  Axes a = make_axes(o, {}, -0.5, n - 0.5, lo, hi);
  // bars are labelled below instead of x ticks
  draw_axes(img, a, {}, yticks, y_labels, {}, {}, o.y_label, "", o);
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
    int cx = a.px(i);
    if (std::isfinite(v)) {
      int top = a.py(std::max(v, 0.0)), bottom = a.py(std::min(v, 0.0));
      fill_rect(img, cx - bar_w / 2, top, bar_w, std::max(1, bottom - top), kPalette[0]);
    }
    if (!marks.empty() && std::isfinite(marks[size_t(i)]))  // wider than the bar: visible above it
      fill_rect(img, cx - bar_w / 2 - 1, a.py(marks[size_t(i)]) - 1, bar_w + 2, 2, kBlack);
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
                               int scale, double lo, double hi) {
  QKV_CHECK(height > 0 && width > 0 && gray.size() == size_t(height) * size_t(width),
            "overlay_heatmap_on_image", "image has ", gray.size(), " values for ", height, "x",
            width);
  QKV_CHECK(heat_h > 0 && heat_w > 0 && heat.size() == size_t(heat_h) * size_t(heat_w),
            "overlay_heatmap_on_image", "heatmap has ", heat.size(), " values for ", heat_h, "x",
            heat_w);
  QKV_CHECK(scale >= 1 && alpha >= 0 && alpha <= 1, "overlay_heatmap_on_image",
            "need scale >= 1 and alpha in [0, 1]");
  if (!(hi > lo)) {
    auto [min_it, max_it] = std::minmax_element(heat.begin(), heat.end());
    lo = *min_it, hi = *max_it > *min_it ? *max_it : *min_it + 1.0;
  }
  const double range = hi - lo;
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
      Color h = colormap((sample(y, x) - lo) / range);
      auto mix = [&](uint8_t c) { return uint8_t(std::lround((1 - alpha) * g + alpha * c)); };
      fill_rect(img, x * scale, y * scale, scale, scale, {mix(h.r), mix(h.g), mix(h.b)});
    }
  return img;
}

Image heatmap_cells(const std::vector<float>& values, int rows, int cols, double lo, double hi,
                    int cell) {
  QKV_CHECK(rows > 0 && cols > 0 && values.size() == size_t(rows) * size_t(cols), "heatmap_cells",
            "map has ", values.size(), " values for ", rows, "x", cols);
  QKV_CHECK(hi > lo && cell >= 1, "heatmap_cells", "need lo < hi and cell >= 1");
  Image img(cols * cell, rows * cell);
  for (int r = 0; r < rows; ++r)
    for (int c = 0; c < cols; ++c)
      fill_rect(img, c * cell, r * cell, cell, cell,
                colormap((values[size_t(r) * size_t(cols) + size_t(c)] - lo) / (hi - lo)));
  return img;
}

Image grayscale_image(const std::vector<float>& gray, int height, int width, int scale) {
  QKV_CHECK(height > 0 && width > 0 && gray.size() == size_t(height) * size_t(width) && scale >= 1,
            "grayscale_image", "image has ", gray.size(), " values for ", height, "x", width);
  Image img(width * scale, height * scale);
  for (int y = 0; y < height; ++y)
    for (int x = 0; x < width; ++x) {
      auto g = uint8_t(std::lround(
          255.0 * std::clamp(double(gray[size_t(y) * size_t(width) + size_t(x)]), 0.0, 1.0)));
      fill_rect(img, x * scale, y * scale, scale, scale, {g, g, g});
    }
  return img;
}

}  // namespace qkv::train
