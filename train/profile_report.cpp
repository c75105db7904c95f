#include "train/profile_report.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <tuple>

namespace qkv::train {
namespace {

struct Row {
  ProfilePhase phase;
  std::string op;
  int64_t calls = 0, ns = 0;
  double flops = 0, bytes = 0;
  std::map<std::string, int64_t> ns_by_shapes;
};

std::string format(const char* fmt, auto... args) {
  char buffer[512];
  std::snprintf(buffer, sizeof buffer, fmt, args...);
  return buffer;
}

// "  <label>xx.x% of <yardstick> <unit> (<what>, N threads)": a rate as a share of what the
// machine was measured to do.
std::string share_of(const char* label, double rate, double yardstick, const char* unit,
                     const char* what, int threads) {
  return format("  %s%5.1f%% of %.1f %s (%s, %d thread%s)", label, 100 * rate / yardstick,
                yardstick, unit, what, threads, threads == 1 ? "" : "s");
}

std::string costliest_shapes(const Row& row, int count) {
  std::vector<std::pair<int64_t, std::string>> by_time;
  for (const auto& [shapes, ns] : row.ns_by_shapes) by_time.push_back({ns, shapes});
  std::sort(by_time.rbegin(), by_time.rend());
  std::string text;
  for (int i = 0; i < count && i < int(by_time.size()); ++i) {
    if (!text.empty()) text += " | ";
    text += by_time[size_t(i)].second.empty() ? "-" : by_time[size_t(i)].second;
  }
  return text;
}

}  // namespace

std::string profile_table(const std::vector<ProfileEvent>& events, const ProfileSummary& summary) {
  const double steps = std::max(1, summary.steps);
  std::map<std::tuple<int, std::string>, Row> rows;
  std::map<int, int64_t> scope_ns;  // phase -> the time of its scopes (forward, backward, ...)
  std::map<int, int64_t> worker_ns;
  int64_t step_ns = 0;  // the issuing thread's time in ops and rules: the steps' measured time
  for (const ProfileEvent& e : events) {
    if (e.thread != 0) {
      worker_ns[e.thread] += e.duration_ns;
      continue;
    }
    if (e.scope) {
      scope_ns[int(e.phase)] += e.duration_ns;
      continue;
    }
    Row& row = rows[{int(e.phase), e.name}];
    row.phase = e.phase;
    row.op = e.name;
    row.calls += 1;
    row.ns += e.duration_ns;
    row.flops += e.flops;
    row.bytes += e.bytes;
    row.ns_by_shapes[e.shapes] += e.duration_ns;
    step_ns += e.duration_ns;
  }
  std::vector<Row> sorted;
  for (auto& [key, row] : rows) sorted.push_back(std::move(row));
  std::sort(sorted.begin(), sorted.end(), [](const Row& a, const Row& b) { return a.ns > b.ns; });

  // The op column is as wide as its longest name, so every row's numbers stand under their
  // heading (efficient_attention_packed is 26 characters).
  int op_width = 22;
  for (const Row& r : sorted) op_width = std::max(op_width, int(r.op.size()));
  std::string text = format("%-9s %-*s %7s %10s %7s %8s %7s  %s\n", "phase", op_width, "op",
                            "calls", "ms/step", "% step", "GFLOP/s", "GB/s", "costliest shapes");
  for (const Row& r : sorted) {
    const double seconds = r.ns * 1e-9;
    std::string gflops =
        r.flops > 0 && seconds > 0 ? format("%.1f", r.flops / seconds * 1e-9) : "-";
    std::string gbs = r.bytes > 0 && seconds > 0 ? format("%.1f", r.bytes / seconds * 1e-9) : "-";
    text += format("%-9s %-*s %7.0f %10.3f %6.1f%% %8s %7s  %s\n", phase_name(r.phase), op_width,
                   r.op.c_str(), r.calls / steps, r.ns * 1e-6 / steps,
                   step_ns > 0 ? 100.0 * r.ns / step_ns : 0.0, gflops.c_str(), gbs.c_str(),
                   costliest_shapes(r, summary.shapes_per_op).c_str());
  }

  // The MFU lines: each phase's arithmetic over its time, against the measured peak.
  text += "\n";
  for (ProfilePhase phase :
       {ProfilePhase::forward, ProfilePhase::backward, ProfilePhase::optimizer}) {
    int64_t ns = 0;
    double flops = 0;
    for (const Row& r : sorted)
      if (r.phase == phase) ns += r.ns, flops += r.flops;
    if (scope_ns.count(int(phase))) ns = std::max(ns, scope_ns[int(phase)]);
    if (ns == 0) continue;
    const double gflops = flops / (ns * 1e-9) * 1e-9;
    text += format("%-9s %9.3f ms/step %8.3f GFLOP/step %8.1f GFLOP/s", phase_name(phase),
                   ns * 1e-6 / steps, flops * 1e-9 / steps, gflops);
    if (summary.peak_gflops > 0)
      text += share_of("MFU ", gflops, summary.peak_gflops, "GFLOP/s", "FMA peak", summary.threads);
    if (summary.bf16_peak_gflops > 0)
      text += share_of("", gflops, summary.bf16_peak_gflops, "GFLOP/s",
                       (std::string(summary.bf16_instruction) + " peak").c_str(), summary.threads);
    text += "\n";
  }
  int64_t total_ns = 0;
  double total_flops = 0;
  for (const Row& r : sorted) total_ns += r.ns, total_flops += r.flops;
  if (total_ns > 0) {
    const double gflops = total_flops / (total_ns * 1e-9) * 1e-9;
    text += format("%-9s %9.3f ms/step %8.3f GFLOP/step %8.1f GFLOP/s", "step",
                   total_ns * 1e-6 / steps, total_flops * 1e-9 / steps, gflops);
    if (summary.peak_gflops > 0)
      text += format("  MFU %5.1f%%", 100 * gflops / summary.peak_gflops);
    if (summary.bf16_peak_gflops > 0)
      text += format("  %5.1f%% of the %s peak", 100 * gflops / summary.bf16_peak_gflops,
                     summary.bf16_instruction);
    text += "\n";
  }
  // The memory line: the ops that move data and do no arithmetic, against the bandwidth.
  int64_t moving_ns = 0;
  double moved_bytes = 0;
  for (const Row& r : sorted)
    if (r.flops == 0 && r.bytes > 0) moving_ns += r.ns, moved_bytes += r.bytes;
  if (moving_ns > 0) {
    const double gbs = moved_bytes / (moving_ns * 1e-9) * 1e-9;
    text += format("%-9s %9.3f ms/step %8.3f GB/step %11.1f GB/s", "memory",
                   moving_ns * 1e-6 / steps, moved_bytes * 1e-9 / steps, gbs);
    if (summary.memory_gbs > 0)
      text += share_of("", gbs, summary.memory_gbs, "GB/s", "memory bandwidth", summary.threads);
    text += "  (the ops with bytes and no FLOPs)\n";
  }
  for (const auto& [thread, ns] : worker_ns)
    text += format("worker %d busy %.3f ms/step (%.0f%% of the step)\n", thread, ns * 1e-6 / steps,
                   total_ns > 0 ? 100.0 * ns / total_ns : 0.0);
  return text;
}

std::string chrome_trace_json(const std::vector<ProfileEvent>& events) {
  using nlohmann::json;
  json trace = json::array();
  int max_thread = 0;
  for (const ProfileEvent& e : events) max_thread = std::max(max_thread, e.thread);
  for (int t = 0; t <= max_thread; ++t)
    trace.push_back({{"name", "thread_name"},
                     {"ph", "M"},
                     {"pid", 1},
                     {"tid", t},
                     {"args",
                      {{"name", t == 0 ? std::string("ops (issuing thread)")
                                       : "pool worker " + std::to_string(t)}}}});
  for (const ProfileEvent& e : events) {
    json args = json::object();
    if (!e.shapes.empty()) args["shapes"] = e.shapes;
    if (e.flops > 0) args["flops"] = e.flops;
    if (e.bytes > 0) args["bytes"] = e.bytes;
    if (e.scope) args["scope"] = true;  // a span enclosing ops, not an op of the table
    trace.push_back({{"name", e.name},
                     {"cat", phase_name(e.phase)},
                     {"ph", "X"},
                     {"pid", 1},
                     {"tid", e.thread},
                     {"ts", double(e.start_ns) * 1e-3},
                     {"dur", double(e.duration_ns) * 1e-3},
                     {"args", args}});
  }
  return json{{"traceEvents", trace}, {"displayTimeUnit", "ms"}}.dump();
}

}  // namespace qkv::train
