#include "train/profile_timeline.h"

#include <algorithm>
#include <map>

#include "train/canvas.h"
#include "train/plots.h"

namespace qkv::train {
namespace {

// Twelve colours that stay apart from each other; the costliest ops get the first ones.
constexpr Color kPalette[] = {{31, 119, 180},  {255, 127, 14},  {44, 160, 44},   {214, 39, 40},
                              {148, 103, 189}, {140, 86, 75},   {227, 119, 194}, {23, 190, 207},
                              {188, 189, 34},  {100, 100, 100}, {174, 199, 232}, {255, 187, 120}};
constexpr Color kOtherOps{200, 200, 200};
constexpr int kNamedOps = int(sizeof kPalette / sizeof kPalette[0]);

Color phase_color(ProfilePhase phase) {
  switch (phase) {
    case ProfilePhase::forward:
      return {120, 170, 220};
    case ProfilePhase::backward:
      return {230, 150, 110};
    case ProfilePhase::optimizer:
      return {140, 200, 140};
    case ProfilePhase::other:
      break;
  }
  return kGray;
}

}  // namespace

Image trace_timeline(const std::vector<ProfileEvent>& events, const std::string& title,
                     double max_ms) {
  int64_t end_ns = 0;
  int workers = 0;
  std::map<std::string, int64_t> ns_by_op;
  for (const ProfileEvent& e : events) {
    end_ns = std::max(end_ns, e.start_ns + e.duration_ns);
    workers = std::max(workers, e.thread);
    if (!e.scope && e.thread == 0) ns_by_op[e.name] += e.duration_ns;
  }
  if (max_ms > 0) end_ns = std::min<int64_t>(end_ns, int64_t(max_ms * 1e6));
  end_ns = std::max<int64_t>(end_ns, 1);
  std::vector<std::pair<int64_t, std::string>> by_time;
  for (const auto& [op, ns] : ns_by_op) by_time.push_back({ns, op});
  std::sort(by_time.rbegin(), by_time.rend());
  std::map<std::string, Color> color_of;
  for (int i = 0; i < int(by_time.size()) && i < kNamedOps; ++i)
    color_of[by_time[size_t(i)].second] = kPalette[i];

  const int left = 150, right = 20, top = 40, lane = 34, lane_gap = 8;
  const int lanes = 2 + workers;
  const int legend_rows = (std::min(kNamedOps, int(by_time.size())) + 3) / 4 + 1;
  const int width = 1200, plot_w = width - left - right;
  const int axis_y = top + lanes * (lane + lane_gap);
  const int height = axis_y + 40 + legend_rows * 18 + 10;
  Image img(width, height, kWhite);
  draw_text(img, left, 12, title, kBlack, 2);
  auto x_of = [&](int64_t ns) { return left + int(double(ns) / double(end_ns) * plot_w); };

  auto lane_top = [&](int i) { return top + i * (lane + lane_gap); };
  draw_text(img, 8, lane_top(0) + 12, "phases", kBlack);
  draw_text(img, 8, lane_top(1) + 12, "ops (issuing thread)", kBlack);
  for (int w = 1; w <= workers; ++w)
    draw_text(img, 8, lane_top(1 + w) + 12, "pool worker " + std::to_string(w), kBlack);
  for (int i = 0; i < lanes; ++i) fill_rect(img, left, lane_top(i), plot_w, lane, {245, 245, 245});

  for (const ProfileEvent& e : events) {
    if (e.start_ns >= end_ns) continue;
    const int x0 = x_of(e.start_ns), x1 = std::max(x0 + 1, x_of(e.start_ns + e.duration_ns));
    const int w = std::min(x1, left + plot_w) - x0;
    if (e.scope) {
      fill_rect(img, x0, lane_top(0), w, lane, phase_color(e.phase));
      draw_rect(img, x0, lane_top(0), w, lane, kWhite);
      if (w > text_width(e.name) + 6) draw_text(img, x0 + 3, lane_top(0) + 12, e.name, kBlack);
    } else if (e.thread == 0) {
      auto it = color_of.find(e.name);
      fill_rect(img, x0, lane_top(1), w, lane, it == color_of.end() ? kOtherOps : it->second);
      if (e.phase == ProfilePhase::backward)  // a rule: a dark bar under the box
        fill_rect(img, x0, lane_top(1) + lane - 4, w, 4, kBlack);
    } else {
      fill_rect(img, x0, lane_top(1 + e.thread), w, lane, {90, 90, 90});
    }
  }

  // The time axis.
  draw_line(img, left, axis_y, left + plot_w, axis_y, kBlack);
  for (double t : nice_ticks(0, double(end_ns) * 1e-6, 10)) {
    if (t < 0 || t * 1e6 > double(end_ns)) continue;
    const int x = x_of(int64_t(t * 1e6));
    draw_line(img, x, axis_y, x, axis_y + 5, kBlack);
    const std::string label = tick_label(t);
    draw_text(img, x - text_width(label) / 2, axis_y + 8, label, kBlack);
  }
  draw_text(img, left + plot_w - text_width("ms"), axis_y + 22, "ms", kBlack);

  // The legend: the costliest ops' colours, and what a dark bar and a grey box mean.
  int ly = axis_y + 40;
  for (int i = 0; i < int(by_time.size()) && i < kNamedOps; ++i) {
    const int lx = left + (i % 4) * 260, row_y = ly + (i / 4) * 18;
    fill_rect(img, lx, row_y, 12, 12, kPalette[i]);
    draw_text(img, lx + 16, row_y + 2, by_time[size_t(i)].second, kBlack);
  }
  const int note_y = ly + ((std::min(kNamedOps, int(by_time.size())) + 3) / 4) * 18;
  draw_text(img, left, note_y + 2,
            "dark bar under a box: a backward rule; light grey: other ops; dark grey: a worker "
            "running its share of a kernel",
            kBlack);
  return img;
}

void trace_timeline_png(const std::string& path, const std::vector<ProfileEvent>& events,
                        const std::string& title, double max_ms) {
  write_png(path, trace_timeline(events, title, max_ms));
}

}  // namespace qkv::train
