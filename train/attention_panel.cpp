#include "train/attention_panel.h"

#include <algorithm>
#include <cstdio>

#include "engine/error.h"
#include "train/canvas.h"
#include "train/plots.h"

namespace qkv::train {

namespace {

constexpr int kPad = 8, kSide = 168, kGap = 24;  // kSide: how wide the input is drawn
constexpr Color kWarning{200, 40, 40};

// Draws `text` (scale 1) under/over pictures; returns the y below it.
int caption(Image& img, int x, int y, const std::string& text, Color c = kBlack) {
  draw_text(img, x, y, text, c);
  return y + text_height() + 4;
}

}  // namespace

MapRange map_range(const std::vector<float>& map) {
  QKV_CHECK(!map.empty(), "map_range", "the map is empty");
  auto [lo, hi] = std::minmax_element(map.begin(), map.end());
  return {*lo, *hi, *hi - *lo < kNearlyConstantSpan};
}

std::string map_range_text(const MapRange& r) {
  char text[96];
  if (r.nearly_constant)
    std::snprintf(text, sizeof text, "nearly constant: %.3f to %.3f", r.min, r.max);
  else
    std::snprintf(text, sizeof text, "min %.3f, max %.3f", r.min, r.max);
  return text;
}

Image attention_block_panel(const std::string& title, const PanelInput& in,
                            const BlockAttention& b) {
  QKV_CHECK(in.height > 0 && in.width > 0 && in.gray.size() == size_t(in.height) * size_t(in.width),
            "attention_block_panel", "input has ", in.gray.size(), " values for ", in.height, "x",
            in.width);
  const bool spatial = !b.spatial.empty();
  QKV_CHECK(!spatial || b.spatial.size() == size_t(b.spatial_h) * size_t(b.spatial_w),
            "attention_block_panel", "spatial map has ", b.spatial.size(), " values for ",
            b.spatial_h, "x", b.spatial_w);
  QKV_CHECK(b.channel_means.empty() || b.channel_means.size() == b.channel_weights.size(),
            "attention_block_panel", b.channel_weights.size(), " channel weights but ",
            b.channel_means.size(), " means");
  const int scale = std::max(1, kSide / std::max(in.height, in.width));
  const Image input = grayscale_image(in.gray, in.height, in.width, scale);

  // Left to right: the input; the map and its colour bar; the overlay.
  const int map_x = kPad + input.width + kGap;
  int cell = 1, bar_x = 0, overlay_x = 0, right = kPad + input.width;
  if (spatial) {
    cell = std::max(1, input.width / std::max(b.spatial_h, b.spatial_w));
    bar_x = map_x + b.spatial_w * cell + 10;
    overlay_x = bar_x + colorbar_width(0, 1) + kGap;
    right = overlay_x + input.width;
  }
  const int width = std::max(
      {760, right + kPad, 2 * kPad + text_width(title, 2), 2 * kPad + text_width(b.heading)});
  const int images_y = kPad + text_height(2) + 6 + text_height() + 10 + text_height() + 4;
  const int below_images = images_y + std::max(input.height, b.spatial_h * cell) + 6;
  const int bars_y = below_images + 2 * (text_height() + 4) + 6;
  const int bars_h = b.channel_weights.empty() ? 0 : 260;
  Image img(width, bars_y + bars_h + kPad);

  draw_text(img, kPad, kPad, title, kBlack, 2);
  caption(img, kPad, kPad + text_height(2) + 6, b.heading);
  const int captions_y = images_y - text_height() - 4;
  caption(img, kPad, captions_y, "input");
  blit(img, input, kPad, images_y);
  draw_rect(img, kPad - 1, images_y - 1, input.width + 2, input.height + 2, kGray);
  caption(img, kPad, below_images, in.caption);
  if (spatial) {
    const MapRange range = map_range(b.spatial);
    caption(
        img, map_x, captions_y,
        "spatial attention, " + std::to_string(b.spatial_h) + "x" + std::to_string(b.spatial_w));
    blit(img, heatmap_cells(b.spatial, b.spatial_h, b.spatial_w, 0, 1, cell), map_x, images_y);
    draw_colorbar(img, bar_x, images_y, b.spatial_h * cell, 0, 1);
    int y = caption(img, map_x, below_images, map_range_text(range),
                    range.nearly_constant ? kWarning : kBlack);
    if (range.nearly_constant) caption(img, map_x, y, "(every position gated alike)", kWarning);
    caption(img, overlay_x, captions_y, "map over the input");
    blit(img,
         overlay_heatmap_on_image(in.gray, in.height, in.width, b.spatial, b.spatial_h, b.spatial_w,
                                  0.5, scale, 0, 1),
         overlay_x, images_y);
    caption(img, overlay_x, below_images, "same colour scale as the map");
  } else {
    caption(img, map_x, images_y, "no spatial attention: this block weights");
    caption(img, map_x, images_y + text_height() + 4, "whole channels (below)");
  }

  if (!b.channel_weights.empty()) {
    PlotOptions o;
    o.title = "channel weights";
    o.x_label = "channel";
    o.y_label = "weight";
    o.width = width, o.height = bars_h;
    Image bars = bar_chart(b.channel_weights, {}, o, b.channel_means, 1.0);
    const std::string note = b.channel_means.empty()
                                 ? "bars: this image"
                                 : "bars: this image; black lines: mean over " + b.means_of;
    draw_text(bars, (bars.width - text_width(note)) / 2, kPad + text_height(2) + 2, note, kBlack);
    blit(img, bars, 0, bars_y);
  }
  return img;
}

}  // namespace qkv::train
