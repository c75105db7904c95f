#include <boost/test/unit_test.hpp>
#include <cmath>
#include <set>

#include "helpers.h"
#include "train/atomic_file.h"
#include "train/attention_panel.h"
#include "train/canvas.h"
#include "train/colormap.h"
#include "train/font.h"
#include "train/plots.h"
#include "train/trainer/classification_pictures.h"
#include "train/trainer/classifier.h"

using namespace qkv::train;
using qkv::train::test::ScratchDir;

namespace {

uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 |
         uint32_t(uint8_t(s[at + 2])) << 8 | uint32_t(uint8_t(s[at + 3]));
}

double luminance(Color c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; }

// Whether `text`, drawn in `ink` at `scale` (written upwards when `up`), appears somewhere in
// `img` exactly: every pixel of its glyphs is `ink` and no other pixel of its box, nor of a
// one-pixel border round it, is. So a label another label runs into is not found.
bool has_text(const Image& img, const std::string& text, int scale = 1, Color ink = kBlack,
              bool up = false) {
  const int w = text_width(text, scale) + 2, h = text_height(scale) + 2;
  Image pattern = up ? Image(h, w) : Image(w, h);
  if (up)
    draw_text_up(pattern, 1, 1, text, kBlack, scale);
  else
    draw_text(pattern, 1, 1, text, kBlack, scale);
  for (int y = 0; y + pattern.height <= img.height; ++y)
    for (int x = 0; x + pattern.width <= img.width; ++x) {
      bool match = true;
      for (int j = 0; j < pattern.height && match; ++j)
        for (int i = 0; i < pattern.width && match; ++i)
          match = (pattern.at(i, j) == kBlack) == (img.at(x + i, y + j) == ink);
      if (match) return true;
    }
  return false;
}

// The pixels of `img` that are `c`, as their bounding rows [top, bottom]; {-1, -1} if none.
std::pair<int, int> rows_of(const Image& img, Color c) {
  int top = -1, bottom = -1;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x)
      if (img.at(x, y) == c) {
        if (top < 0) top = y;
        bottom = y;
      }
  return {top, bottom};
}

constexpr Color kBlue{31, 99, 180}, kOrange{230, 120, 20};  // the first two series' colours

}  // namespace

BOOST_AUTO_TEST_SUITE(pictures)

BOOST_AUTO_TEST_CASE(png_file_has_signature_and_size) {
  ScratchDir dir("png");
  Image img(37, 21, {10, 20, 30});
  write_png(dir.file("a.png"), img);
  std::string bytes = read_file(dir.file("a.png"));
  BOOST_TEST(bytes.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  BOOST_TEST(bytes.substr(12, 4) == "IHDR");  // the first chunk
  BOOST_TEST(be32(bytes, 16) == 37u);
  BOOST_TEST(be32(bytes, 20) == 21u);
  BOOST_TEST(int(uint8_t(bytes[24])) == 8);  // bit depth
  BOOST_TEST(int(uint8_t(bytes[25])) == 2);  // colour type RGB
}

BOOST_AUTO_TEST_CASE(font_has_distinct_glyphs_for_printable_ascii) {
  std::set<std::array<uint8_t, kGlyphHeight>> shapes;
  for (char c = 33; c < 127; ++c) shapes.insert(glyph(c));
  BOOST_TEST(shapes.size() == 94u);  // no two printable characters look the same
  BOOST_TEST((glyph(' ') == std::array<uint8_t, kGlyphHeight>{}));
  BOOST_TEST((glyph('\x80') != glyph('?')));  // unknown bytes get the box, not a question mark
}

BOOST_AUTO_TEST_CASE(text_and_lines_land_where_asked) {
  Image img(40, 20);
  draw_text(img, 2, 3, "I", kBlack);
  // 'I' has ink at its top row, columns 1..3.
  BOOST_TEST((img.at(3, 3) == kBlack));
  BOOST_TEST((img.at(2, 3) == kWhite));
  draw_line(img, 0, 19, 39, 19, Color{255, 0, 0});
  BOOST_TEST((img.at(20, 19) == Color{255, 0, 0}));
  BOOST_TEST(text_width("abc") == 17);
}

BOOST_AUTO_TEST_CASE(colormap_gets_lighter_monotonically) {
  double last = -1;
  for (int i = 0; i <= 100; ++i) {
    double l = luminance(colormap(i / 100.0));
    BOOST_REQUIRE(l > last);
    last = l;
  }
  BOOST_TEST((colormap(-3) == colormap(0)));
  BOOST_TEST((colormap(7) == colormap(1)));
}

BOOST_AUTO_TEST_CASE(attention_heatmap_colours_cells_by_weight) {
  std::vector<float> w = {1.0f, 0.0f, 0.0f, 0.25f, 0.5f, 0.25f};  // 2 queries x 3 keys
  Image img = attention_heatmap(w, {"x", "y"}, {"a", "b", "c"}, "layer 0");
  // Find the brightest cell: it must be the colormap's top colour (weight = max).
  bool has_top = false, has_bottom = false;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      has_top |= img.at(x, y) == colormap(1.0);
      has_bottom |= img.at(x, y) == colormap(0.0);
    }
  BOOST_TEST(has_top);
  BOOST_TEST(has_bottom);
  BOOST_CHECK_THROW(attention_heatmap(w, {"x"}, {"a", "b", "c"}, "bad"), qkv::Error);

  Image grid = attention_grid({w, w, w}, {"x", "y"}, {"a", "b", "c"}, "encoder layer 0", 2);
  BOOST_TEST(grid.width >= 2 * img.width);  // 3 heads + average in 2 columns: 2 rows
  BOOST_TEST(grid.height > 2 * img.height);
}

BOOST_AUTO_TEST_CASE(nice_ticks_cover_the_range) {
  auto t = nice_ticks(0, 10, 5);
  BOOST_TEST((t == std::vector<double>{0, 2, 4, 6, 8, 10}));
  t = nice_ticks(0.013, 0.087, 4);
  BOOST_TEST(t.size() == 6u);  // 0, 0.02, ..., 0.1: step 0.02, widened to cover both ends
  BOOST_TEST(t.front() == 0.0);
  BOOST_TEST(t.back() == 0.1, boost::test_tools::tolerance(1e-12));
  t = nice_ticks(-3, 950);
  BOOST_TEST(t.front() == -200.0);
  BOOST_TEST(t.back() == 1000.0);
  BOOST_TEST(tick_label(0.5) == "0.5");
  BOOST_TEST(tick_label(2000) == "2000");
  BOOST_TEST(tick_label(0.0001) == "1e-04");
}

BOOST_AUTO_TEST_CASE(curves_and_bars_draw_and_write) {
  ScratchDir dir("plots");
  Series train{"train loss", {}, {}}, valid{"valid loss", {0, 500, 1000}, {3.0, 1.0, NAN}};
  for (int i = 0; i <= 1000; i += 10)
    train.x.push_back(i), train.y.push_back(3.0 * std::exp(-i / 300.0));
  PlotOptions o;
  o.title = "loss";
  o.y_label = "cross-entropy";
  o.log_y = true;
  loss_curve_png(dir.file("loss.png"), {train, valid}, o);
  Image img = line_plot({train, valid}, o);
  BOOST_TEST(img.width == o.width);
  // Both series' colours appear somewhere (they are drawn, not lost off-axis).
  int blue = 0, orange = 0;
  for (int y = 0; y < img.height; ++y)
    for (int x = 0; x < img.width; ++x) {
      blue += img.at(x, y) == Color{31, 99, 180};
      orange += img.at(x, y) == Color{230, 120, 20};
    }
  BOOST_TEST(blue > 200);
  BOOST_TEST(orange > 50);
  PlotOptions bars;
  bars.title = "SE weights";
  bar_chart_png(dir.file("se.png"), {0.1, 0.9, 0.5}, {}, bars);
  BOOST_TEST(read_file(dir.file("se.png")).substr(1, 3) == "PNG");
}

// On a base-2 log x axis 512 lies halfway between 64 and 4096 (linearly it would sit near the
// left edge). The plot area runs from x = 72 to width - 20 and the axis from 2^6 to 2^12.
BOOST_AUTO_TEST_CASE(log_x_axes_place_powers_of_two_evenly) {
  Series ends{"ends", {64, 4096}, {2, 2}}, mid{"mid", {0, 512}, {1, 1}};  // x = 0 is skipped
  PlotOptions o;
  o.log_x = true;
  Image img = line_plot({ends, mid}, o);
  double sum = 0;
  int count = 0;
  for (int y = img.height / 2; y < img.height; ++y)  // below the legend: only mid's marker
    for (int x = 0; x < img.width; ++x)
      if (img.at(x, y) == Color{230, 120, 20}) sum += x, ++count;
  BOOST_TEST(count > 0);
  BOOST_TEST(std::abs(sum / std::max(count, 1) - (72 + (o.width - 20 - 72) / 2.0)) <= 2.0);
}

BOOST_AUTO_TEST_CASE(overlay_blends_heat_over_the_image) {
  std::vector<float> gray(4 * 4, 0.0f);
  std::vector<float> heat = {0, 1, 0, 0};  // 2x2, hot top-right
  Image img = overlay_heatmap_on_image(gray, 4, 4, heat, 2, 2, 1.0, 1);
  BOOST_TEST((img.at(3, 0) == colormap(1.0)));  // alpha 1: pure heat colour
  BOOST_TEST((img.at(0, 3) == colormap(0.0)));
  Image half = overlay_heatmap_on_image(gray, 4, 4, heat, 2, 2, 0.5, 2);
  BOOST_TEST(half.width == 8);
  BOOST_TEST(int(half.at(7, 0).r) == int(std::lround(0.5 * colormap(1.0).r)));
}

// The dates run's curves: a loss falling over four decades and an exact match rising from 0.645
// to 0.985. On the loss's log axis the match would cover 3% of the height; on its own axis it
// covers nearly all of it.
BOOST_AUTO_TEST_CASE(a_metric_gets_its_own_linear_axis_beside_a_log_loss) {
  Series loss{"loss", {}, {}}, match{"valid_exact_match", {}, {}, true};
  for (int i = 0; i <= 1500; i += 50)
    loss.x.push_back(i), loss.y.push_back(3.0 * std::pow(10.0, -i / 375.0));
  const double matches[] = {0.645, 0.80, 0.90, 0.95, 0.97, 0.985};
  for (int k = 0; k < 6; ++k) match.x.push_back(250.0 * (k + 1)), match.y.push_back(matches[k]);
  PlotOptions o;
  o.title = "training loss and validation exact match";
  o.y_label = "training loss";
  o.log_y = true;
  PlotLayout layout = line_plot_layout({loss, match}, o);
  BOOST_REQUIRE(!layout.right_tick_labels.empty());
  const double r_lo = std::stod(layout.right_tick_labels.front());
  const double r_hi = std::stod(layout.right_tick_labels.back());
  BOOST_TEST(r_lo <= 0.645);
  BOOST_TEST(r_lo >= 0.5);  // spans the metric, not 0..1 nor the loss's decades
  BOOST_TEST(r_hi >= 0.985);
  BOOST_TEST(r_hi <= 1.05);
  BOOST_TEST(std::stod(layout.y_tick_labels.back()) >= 3.0);  // the left axis keeps the loss
  BOOST_TEST(std::stod(layout.y_tick_labels.front()) <= 3.0e-4);
  BOOST_TEST(layout.y_title == "training loss (log scale)");
  BOOST_TEST(layout.right_title == "valid_exact_match");

  Image img = line_plot({loss, match}, o);
  // The match's first and last points (orange) lie where the right axis puts them, and so far
  // apart that the rise is plain: over 80% of the plot's height.
  auto px = [&](double x) { return layout.x0 + (x / 1500.0) * (layout.x1 - layout.x0); };
  auto pr = [&](double y) {
    return layout.y1 - (y - r_lo) / (r_hi - r_lo) * (layout.y1 - layout.y0);
  };
  auto orange_near = [&](double x, double y) {
    for (int dy = -2; dy <= 2; ++dy)
      for (int dx = -2; dx <= 2; ++dx)
        if (img.at(int(std::lround(x)) + dx, int(std::lround(y)) + dy) == kOrange) return true;
    return false;
  };
  BOOST_TEST(orange_near(px(250), pr(0.645)));
  BOOST_TEST(orange_near(px(1500), pr(0.985)));
  BOOST_TEST(pr(0.645) - pr(0.985) >= 0.8 * (layout.y1 - layout.y0));
  // The legend moved out of the way: the last segment, which ends in the top-right corner, shows.
  BOOST_TEST(orange_near(px(1400), pr(0.97 + 0.015 * 150 / 250)));
  BOOST_TEST(has_text(img, "loss"));  // the legend is there, somewhere
  BOOST_TEST(has_text(img, "valid_exact_match", 1, kBlack, true));  // the right axis's title
  BOOST_TEST(has_text(img, "training loss (log scale)", 1, kBlack, true));
  BOOST_TEST(has_text(img, "valid_exact_match (right axis)"));  // the legend says which axis
  BOOST_TEST(has_text(img, layout.right_tick_labels.back()));

  // Without a right-axis series there is no right axis, and the plot area keeps its width.
  PlotLayout single = line_plot_layout({loss}, o);
  BOOST_TEST(single.right_tick_labels.empty());
  BOOST_TEST(single.x1 == o.width - 20);
  BOOST_TEST(layout.x1 < single.x1);  // room for the right axis's labels
  o.y_label = "";
  BOOST_TEST(line_plot_layout({loss}, o).y_title == "loss (log scale)");  // named by its series
}

BOOST_AUTO_TEST_CASE(colour_bar_labels_stand_clear_of_the_strip) {
  BOOST_TEST((colorbar_labels(0, 0.968) == std::vector<std::string>{"0", "0.484", "0.968"}));
  for (double hi : {1e-4, 0.5, 0.968, 1.0, 37.0})
    for (const auto& l : colorbar_labels(0, hi)) BOOST_TEST(l.find('-') == std::string::npos);
  BOOST_TEST((colorbar_labels(-1, 1) == std::vector<std::string>{"-1", "0", "1"}));
  BOOST_TEST((colorbar_labels(0, 1e-4) == std::vector<std::string>{"0", "0.00005", "0.0001"}));
  BOOST_TEST((colorbar_labels(0, 37) == std::vector<std::string>{"0", "18.5", "37"}));

  // Right of the strip's frame, every row stays white for a few pixels before any label's ink:
  // a tick mark there would read as a minus sign.
  Image img(120, 140);
  const int x = 10, y = 20, h = 100;
  const int width = draw_colorbar(img, x, y, h, 0, 0.968);
  int frame = x;  // the strip's right-hand frame: the last non-white column of row y + h / 2
  while (!(img.at(frame + 1, y + h / 2) == kWhite)) ++frame;
  BOOST_TEST(frame >= x + 5);
  int ink_rows = 0;
  for (int row = y - 2; row < y + h + 2; ++row) {
    int first = frame + 1;
    while (first < img.width && img.at(first, row) == kWhite) ++first;
    if (first == img.width) continue;
    ++ink_rows;
    BOOST_TEST(first - frame - 1 >= 4,
               "row " << row << ": ink " << first - frame - 1 << " pixels right of the strip");
  }
  BOOST_TEST(ink_rows >= 3 * text_height() - 3);  // the three labels were drawn
  BOOST_TEST(has_text(img, "0.968"));
  BOOST_TEST(has_text(img, "0.484"));
  BOOST_TEST(x + width <= img.width);
}

BOOST_AUTO_TEST_CASE(attention_maps_have_axis_titles_and_readable_keys) {
  // Few tokens: large cells, keys written across at twice the font size.
  std::vector<std::string> keys{"Q", "7", "x", "<s>"}, queries{"a", "b"};
  std::vector<float> w(2 * 4, 0.25f);
  Image img = attention_heatmap(w, queries, keys, "layer 0");
  BOOST_TEST(has_text(img, "layer 0", 2));
  BOOST_TEST(has_text(img, "key", 2));
  BOOST_TEST(has_text(img, "query", 2, kBlack, true));
  BOOST_TEST(has_text(img, "Q", 2));
  BOOST_TEST(has_text(img, "7", 2));
  BOOST_TEST(has_text(img, "<s>", 2));
  BOOST_TEST(has_text(img, "a", 2));                   // the query labels too
  BOOST_TEST(!has_text(img, "<s>", 1, kBlack, true));  // not turned on its side

  // Six tokens of five letters: still twice the font size, in three staggered rows.
  std::vector<std::string> six{"[CLS]", "<unk>", "A", "w13", "B", "<pad>"};
  Image words = attention_heatmap(std::vector<float>(36, 1.0f / 6), six, six, "encoder.1.self");
  for (const auto& t : six) BOOST_TEST(has_text(words, t, 2), "token " << t);

  // Many tokens wider than their column: staggered rows, every label whole and untouched.
  std::vector<std::string> many, rows{"r0", "r1", "r2"};
  for (int s = 0; s < 41; ++s) many.push_back(std::string("k").append(std::to_string(s)));
  std::vector<float> w2(3 * 41, 0.0f);
  w2[5] = 1.0f;
  Image crowded = attention_heatmap(w2, rows, many, "encoder.1.self");
  BOOST_TEST(has_text(crowded, "key"));
  BOOST_TEST(has_text(crowded, "query", 1, kBlack, true));
  for (const auto& k : many) BOOST_TEST(has_text(crowded, k), "key " << k);
  for (const auto& r : rows) BOOST_TEST(has_text(crowded, r), "query " << r);
}

BOOST_AUTO_TEST_CASE(a_nearly_constant_map_is_reported_and_drawn_as_one) {
  MapRange flat = map_range({0.497f, 0.5f, 0.503f, 0.5f});
  BOOST_TEST(flat.nearly_constant);
  BOOST_TEST(flat.min == 0.497f);
  BOOST_TEST(flat.max == 0.503f);
  BOOST_TEST(map_range_text(flat) == "nearly constant: 0.497 to 0.503");
  MapRange varied = map_range({0.2f, 0.8f, 0.5f});
  BOOST_TEST(!varied.nearly_constant);
  BOOST_TEST(map_range_text(varied) == "min 0.200, max 0.800");
  BOOST_TEST(!map_range({0.5f, 0.5f + float(kNearlyConstantSpan) + 0.001f}).nearly_constant);
  BOOST_TEST(map_range({0.5f, 0.5f + float(kNearlyConstantSpan) - 0.001f}).nearly_constant);

  // On the gate's 0..1 scale a flat map's cells all have (nearly) one colour; stretched to its
  // own range they would span the whole colormap.
  std::vector<float> map = {0.497f, 0.5f, 0.503f, 0.5f};
  Image cells = heatmap_cells(map, 2, 2, 0, 1, 3);
  for (int y = 0; y < cells.height; ++y)
    for (int x = 0; x < cells.width; ++x) {
      Color c = cells.at(x, y), mid = colormap(0.5);
      BOOST_TEST(std::abs(int(c.r) - mid.r) + std::abs(int(c.g) - mid.g) +
                     std::abs(int(c.b) - mid.b) <=
                 6);
    }
  std::vector<float> black(4 * 4, 0.0f);
  Image over = overlay_heatmap_on_image(black, 4, 4, map, 2, 2, 1.0, 1, 0, 1);
  BOOST_TEST(!(over.at(0, 0) == colormap(0.0)));  // not stretched to its own min..max
  BOOST_TEST(std::abs(luminance(over.at(0, 0)) - luminance(over.at(3, 3))) < 3);
}

namespace {

PanelInput test_input() {
  PanelInput in;
  in.height = in.width = 28;
  for (int y = 0; y < 28; ++y)
    for (int x = 0; x < 28; ++x) in.gray.push_back(x > 8 && x < 20 ? 0.9f : 0.0f);
  in.caption = "test image 17";
  return in;
}

// The number of runs of `c` along row y.
int runs_along(const Image& img, int y, Color c) {
  int runs = 0;
  for (int x = 0; x < img.width; ++x)
    runs += img.at(x, y) == c && (x == 0 || !(img.at(x - 1, y) == c));
  return runs;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_block_panel_shows_image_map_overlay_and_channel_bars) {
  BlockAttention cbam;
  cbam.heading = "block 1 of 2: CBAM, 8 channels at 14x14";
  cbam.channel_weights = {0.9, 0.2, 0.6, 0.75, 0.4, 0.95, 0.3, 0.5};
  cbam.channel_means = std::vector<double>(8, 0.5);
  cbam.means_of = "256 test images";
  cbam.spatial_h = cbam.spatial_w = 14;
  for (int y = 0; y < 14; ++y)
    for (int x = 0; x < 14; ++x) cbam.spatial.push_back(x < 7 ? 0.1f : 0.9f);
  const std::string title = "predicted Trouser (p = 0.93), true Trouser";
  Image panel = attention_block_panel(title, test_input(), cbam);
  BOOST_TEST(has_text(panel, title, 2));
  BOOST_TEST(has_text(panel, cbam.heading));
  BOOST_TEST(has_text(panel, "min 0.100, max 0.900"));
  BOOST_TEST(has_text(panel, "bars: this image; black lines: mean over 256 test images"));
  BOOST_TEST(has_text(panel, "0.5"));  // the colour bar's middle
  // The map is drawn at its own resolution in the gate's colours: both halves' colours appear.
  auto [top, bottom] = rows_of(panel, colormap(0.9));
  BOOST_TEST(bottom - top + 1 >= 14 * 12 - 1);  // 14 cells of 12 pixels (the input is 168 tall)
  BOOST_TEST(rows_of(panel, colormap(0.1)).first >= 0);
  // One bar per channel: along a row just above the chart's x axis every bar is crossed once.
  int bar_row = -1;
  for (int y = panel.height - 1; y >= 0 && bar_row < 0; --y)
    if (runs_along(panel, y, kBlue) > 0) bar_row = y;
  BOOST_REQUIRE(bar_row > 0);
  BOOST_TEST(runs_along(panel, bar_row, kBlue) == 8);

  BlockAttention flat = cbam;
  std::fill(flat.spatial.begin(), flat.spatial.end(), 0.5f);
  flat.spatial[3] = 0.51f;
  Image flat_panel = attention_block_panel(title, test_input(), flat);
  BOOST_TEST(has_text(flat_panel, "nearly constant: 0.500 to 0.510", 1, Color{200, 40, 40}));
  // The overlay uses the gate's scale too: over the input's black pixels a flat map blends to
  // half of colormap(0.5); stretched to its own range it would reach half of colormap(0).
  auto half = [](Color c) {
    return Color{uint8_t(std::lround(0.5 * c.r)), uint8_t(std::lround(0.5 * c.g)),
                 uint8_t(std::lround(0.5 * c.b))};
  };
  BOOST_TEST(rows_of(flat_panel, half(colormap(0.5))).first >= 0);
  BOOST_TEST(rows_of(flat_panel, half(colormap(0.0))).first < 0);

  BlockAttention se = cbam;  // SE: channel weights, no spatial map
  se.spatial.clear(), se.spatial_h = se.spatial_w = 0;
  se.heading = "block 1 of 2: SE, 8 channels";
  Image se_panel = attention_block_panel(title, test_input(), se);
  BOOST_TEST(has_text(se_panel, title, 2));
  BOOST_TEST(has_text(se_panel, "no spatial attention: this block weights"));
  BOOST_TEST(rows_of(se_panel, colormap(0.9)).first < 0);  // no heatmap drawn
  BOOST_TEST(runs_along(se_panel, bar_row - (panel.height - se_panel.height), kBlue) == 8);
  BOOST_CHECK_THROW(attention_block_panel(title, PanelInput{}, cbam), qkv::Error);
}

// write_classifier_pictures on a CNN: one panel file per block with attention, named by kind.
BOOST_AUTO_TEST_CASE(a_cnn_gets_one_panel_per_attention_block) {
  ScratchDir dir("panels");
  ClassificationSet set;
  set.images = true;
  set.labels = {"dark", "light"};
  set.pixels.count = 6, set.pixels.height = set.pixels.width = 12;
  for (int i = 0; i < 6; ++i) {
    set.pixels.labels.push_back(i % 2);
    for (int p = 0; p < 144; ++p) set.pixels.pixels.push_back(uint8_t(i % 2 ? 200 : 30));
    set.test.push_back(Example{{i}, {}, i % 2});
  }
  Config c;
  c.task = "fashion-mnist", c.model = "cnn", c.channels = "4,8,8";
  for (std::string kind : {"cbam", "se"}) {
    c.attention = kind;
    Classifier k = make_classifier(c, set);
    auto paths = write_classifier_pictures(k, set, set.test, 1, "test image 1", dir.file(kind));
    BOOST_TEST(paths.size() == 3u);
    for (int b = 0; b < 3; ++b)
      BOOST_TEST(std::filesystem::exists(
          dir.file(kind + "/" + kind + "_block" + std::to_string(b) + ".png")));
  }
  c.attention = "none";
  BOOST_TEST(
      write_classifier_pictures(make_classifier(c, set), set, set.test, 0, "", dir.file("none"))
          .empty());
}

BOOST_AUTO_TEST_SUITE_END()
