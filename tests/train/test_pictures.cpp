#include <boost/test/unit_test.hpp>
#include <cmath>
#include <set>

#include "helpers.h"
#include "train/atomic_file.h"
#include "train/canvas.h"
#include "train/colormap.h"
#include "train/font.h"
#include "train/plots.h"

using namespace qkv::train;
using qkv::train::test::ScratchDir;

namespace {

uint32_t be32(const std::string& s, size_t at) {
  return uint32_t(uint8_t(s[at])) << 24 | uint32_t(uint8_t(s[at + 1])) << 16 |
         uint32_t(uint8_t(s[at + 2])) << 8 | uint32_t(uint8_t(s[at + 3]));
}

double luminance(Color c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; }

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

BOOST_AUTO_TEST_SUITE_END()
