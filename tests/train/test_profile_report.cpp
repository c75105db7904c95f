// The profile's table, MFU lines, Chrome trace and timeline picture, from events whose numbers are
// known.
#include <boost/test/unit_test.hpp>
#include <cstdlib>
#include <nlohmann/json.hpp>
#include <sstream>

#include "engine/caching_allocator.h"
#include "train/profile_report.h"
#include "train/profile_timeline.h"
#include "train/trainer/step_profile.h"

using namespace qkv;
using namespace qkv::train;

namespace {

ProfileEvent event(const std::string& name, ProfilePhase phase, int64_t start_ms, int64_t ms,
                   double flops = 0, double bytes = 0, int thread = 0) {
  ProfileEvent e;
  e.name = name;
  e.phase = phase;
  e.thread = thread;
  e.start_ns = start_ms * 1000000;
  e.duration_ns = ms * 1000000;
  e.flops = flops;
  e.bytes = bytes;
  e.shapes = name == "matmul" ? "[64,32] [32,16]" : "[64,16]";
  return e;
}

// Two steps: matmul 6 ms forward (12 GFLOP) + 10 ms backward (24 GFLOP), relu 2 ms (4 GB),
// an optimizer scope of 2 ms, and a worker busy 5 ms in all.
std::vector<ProfileEvent> two_steps() {
  std::vector<ProfileEvent> events;
  for (int s = 0; s < 2; ++s) {
    const int64_t t = s * 20;
    events.push_back(event("matmul", ProfilePhase::forward, t, 3, 6e9));
    events.push_back(event("relu", ProfilePhase::forward, t + 3, 1, 0, 2e9));
    events.push_back(event("matmul", ProfilePhase::backward, t + 4, 5, 12e9));
    events.push_back(event("chunk", ProfilePhase::other, t + 4, 2, 0, 0, 1));
    ProfileEvent opt = event("optimizer", ProfilePhase::optimizer, t + 9, 2);
    opt.scope = true;
    events.push_back(opt);
  }
  events.push_back(event("chunk", ProfilePhase::other, 30, 1, 0, 0, 1));
  return events;
}

std::string line_with(const std::string& text, const std::string& a, const std::string& b) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);)
    if (line.find(a) != std::string::npos && line.find(b) != std::string::npos) return line;
  return "";
}

}  // namespace

BOOST_AUTO_TEST_SUITE(profile_report)

BOOST_AUTO_TEST_CASE(the_table_averages_per_step_and_rates_each_op) {
  std::string table = profile_table(two_steps(), {.steps = 2, .peak_gflops = 4000, .threads = 2});
  // matmul backward: 5 ms a step, 24 GFLOP in 10 ms = 2400 GFLOP/s, 5 of the 9 op-ms = 55.6%
  std::string bw = line_with(table, "backward", "matmul");
  BOOST_TEST_MESSAGE(table);
  BOOST_REQUIRE(!bw.empty());
  BOOST_CHECK(bw.find(" 5.000 ") != std::string::npos);
  BOOST_CHECK(bw.find("55.6%") != std::string::npos);
  BOOST_CHECK(bw.find("2400.0") != std::string::npos);
  BOOST_CHECK(bw.find("[64,32] [32,16]") != std::string::npos);
  // relu: 4 GB in 2 ms = 2000 GB/s, no GFLOP/s
  std::string relu = line_with(table, "forward", "relu");
  BOOST_REQUIRE(!relu.empty());
  BOOST_CHECK(relu.find("2000.0") != std::string::npos);
  // costliest first: the backward matmul's row comes before the forward one's
  BOOST_CHECK_LT(table.find(bw), table.find(line_with(table, "forward", "matmul")));
  // MFU lines: forward 12 GFLOP in 8 ms = 1500 GFLOP/s = 37.5% of 4000; the step 36 GFLOP in
  // 18 ms = 2000 GFLOP/s = 50%; the optimizer's time is its scope's
  BOOST_CHECK(line_with(table, "forward ", "MFU  37.5%") != "");
  BOOST_CHECK(line_with(table, "step ", "MFU  50.0%") != "");
  BOOST_CHECK(line_with(table, "optimizer ", "2.000 ms/step") != "");
  // the worker: 5 ms over the two steps' 18 op-ms
  BOOST_CHECK(line_with(table, "worker 1", "2.500 ms/step (28% of the step)") != "");
}

BOOST_AUTO_TEST_CASE(every_rows_numbers_stand_under_their_heading_however_long_its_name) {
  std::vector<ProfileEvent> events = two_steps();
  events.push_back(event("efficient_attention_packed", ProfilePhase::backward, 12, 1, 1e9));
  std::string table = profile_table(events, {.steps = 2, .peak_gflops = 4000, .threads = 1});
  BOOST_TEST_MESSAGE(table);
  const std::string heading = line_with(table, "phase", "op");
  BOOST_REQUIRE(!heading.empty());
  // Each number is right-aligned: it ends where its heading ends.
  for (const char* column : {"calls", "ms/step", "% step", "GFLOP/s"}) {
    const size_t end = heading.find(column) + std::string(column).size();
    for (const char* op : {"matmul", "relu", "efficient_attention_packed"}) {
      const std::string row = line_with(table, op, "  [");
      BOOST_REQUIRE(!row.empty());
      BOOST_TEST_INFO(op << " under " << column);
      BOOST_CHECK(row.size() > end && row[end] == ' ' && row[end - 1] != ' ');
    }
  }
}

BOOST_AUTO_TEST_CASE(a_bfloat16_run_is_also_rated_against_its_instructions_peak) {
  std::string table = profile_table(two_steps(), {.steps = 2,
                                                  .peak_gflops = 4000,
                                                  .threads = 2,
                                                  .bf16_peak_gflops = 8000,
                                                  .bf16_instruction = "VDPBF16PS"});
  BOOST_TEST_MESSAGE(table);
  // forward 1500 GFLOP/s: 37.5% of the FMA peak, 18.75% of the VDPBF16PS one; the step 2000: 25%
  BOOST_CHECK(line_with(table, "forward ", "MFU  37.5%") != "");
  BOOST_CHECK(line_with(table, "forward ", "18.8% of 8000.0 GFLOP/s (VDPBF16PS peak, 2 threads)") !=
              "");
  BOOST_CHECK(line_with(table, "step ", "25.0% of the VDPBF16PS peak") != "");
  // a float32 run's lines name no bfloat16 peak
  std::string f32 = profile_table(two_steps(), {.steps = 2, .peak_gflops = 4000, .threads = 2});
  BOOST_CHECK(f32.find("VDPBF16PS") == std::string::npos);
}

BOOST_AUTO_TEST_CASE(the_memory_line_adds_the_ops_without_flops_against_the_bandwidth) {
  std::vector<ProfileEvent> events = two_steps();
  // a second data mover, and an op with both FLOPs and bytes, which is not one
  for (int s = 0; s < 2; ++s) {
    events.push_back(event("add", ProfilePhase::backward, s * 20 + 12, 3, 0, 1e9));
    events.push_back(event("layer_norm", ProfilePhase::forward, s * 20 + 15, 1, 1e9, 5e9));
  }
  std::string table =
      profile_table(events, {.steps = 2, .peak_gflops = 4000, .memory_gbs = 250, .threads = 1});
  BOOST_TEST_MESSAGE(table);
  // relu 2 GB in 1 ms + add 1 GB in 3 ms a step: 4 ms, 3 GB, 750 GB/s = 300% of 250
  std::string line = line_with(table, "memory ", "GB/s");
  BOOST_REQUIRE(!line.empty());
  BOOST_CHECK(line.find(" 4.000 ms/step") != std::string::npos);
  BOOST_CHECK(line.find(" 3.000 GB/step") != std::string::npos);
  BOOST_CHECK(line.find(" 750.0 GB/s") != std::string::npos);
  BOOST_CHECK(line.find("300.0% of 250.0 GB/s (memory bandwidth, 1 thread)") != std::string::npos);
  // no bandwidth measured: the rate alone
  std::string unmeasured = profile_table(events, {.steps = 2, .peak_gflops = 4000});
  BOOST_CHECK(line_with(unmeasured, "memory ", "750.0 GB/s") != "");
  BOOST_CHECK(line_with(unmeasured, "memory ", "bandwidth") == "");
}

BOOST_AUTO_TEST_CASE(the_chrome_trace_has_one_event_per_event_and_a_track_per_thread) {
  std::vector<ProfileEvent> events = two_steps();
  nlohmann::json trace = nlohmann::json::parse(chrome_trace_json(events));
  const auto& list = trace.at("traceEvents");
  int complete = 0, names = 0;
  for (const auto& e : list) {
    if (e.at("ph") == "M") {
      ++names;
      continue;
    }
    ++complete;
    BOOST_CHECK_EQUAL(e.at("ph"), "X");
  }
  BOOST_CHECK_EQUAL(complete, int(events.size()));
  BOOST_CHECK_EQUAL(names, 2);  // the issuing thread and worker 1
  // microseconds: the second step's backward matmul starts at 24 ms and lasts 5
  bool found = false;
  for (const auto& e : list)
    if (e.at("ph") == "X" && e.at("name") == "matmul" && e.at("cat") == "backward" &&
        e.at("ts") == 24000.0) {
      found = true;
      BOOST_CHECK_EQUAL(e.at("dur"), 5000.0);
      BOOST_CHECK_EQUAL(e.at("tid"), 0);
      BOOST_CHECK_EQUAL(e.at("args").at("flops"), 12e9);
    }
  BOOST_CHECK(found);
}

BOOST_AUTO_TEST_CASE(the_timeline_draws_each_lane_where_its_events_are) {
  std::vector<ProfileEvent> events = two_steps();
  Image img = trace_timeline(events, "test");
  BOOST_CHECK_EQUAL(img.width, 1200);
  // Lanes: phases, ops, worker 1, each 34 px tall from y = 40 with 8 px gaps; the plot spans
  // x = 150 .. 1180 over 0 .. 31 ms.
  auto x_at = [](double ms) { return 150 + int(ms / 31.0 * 1030); };
  const int ops_y = 40 + 42 + 10, worker_y = 40 + 2 * 42 + 10, phase_y = 40 + 10;
  const Color background{245, 245, 245};
  BOOST_CHECK(!(img.at(x_at(1.5), ops_y) == background));   // the first forward matmul
  BOOST_CHECK(img.at(x_at(15), ops_y) == background);       // between the steps: nothing
  BOOST_CHECK(!(img.at(x_at(5), worker_y) == background));  // the worker's first chunk
  BOOST_CHECK(img.at(x_at(8), worker_y) == background);     // the worker idle
  BOOST_CHECK(!(img.at(x_at(10), phase_y) == background));  // the optimizer scope
  BOOST_CHECK(img.at(x_at(5), phase_y) == background);      // no scope around the ops
  // the costliest op (matmul) gets the first colour in both of its boxes
  BOOST_CHECK(img.at(x_at(1.5), ops_y) == img.at(x_at(21.5), ops_y));
}

// The allocator line counts the requests of the profiled steps that did not come from the cache:
// a real caching allocator, one size freed and asked again (a hit), a new size (new memory).
BOOST_AUTO_TEST_CASE(the_allocator_line_counts_the_requests_that_got_new_memory) {
  CachingAllocator allocator("test", 64, {[](size_t n) { return std::malloc(n); }, std::free});
  allocator.deallocate(allocator.allocate(1000), 1000);  // the warm-up: 1000 bytes now cached
  const MemoryStats before = allocator.stats();
  void* hit = allocator.allocate(900);  // the same bucket (1024): from the cache
  void* fresh = allocator.allocate(5000);
  void* fresh_too = allocator.allocate(1000);  // the cached block is in use: new memory
  const std::string cold = allocator_line(before, allocator.stats(), 1);
  BOOST_TEST(cold.find("allocator: 2 of the profiled steps' 3 requests got new memory") == 0, cold);
  BOOST_TEST(cold.find("raise --profile-warmup (now 1)") != std::string::npos, cold);
  allocator.deallocate(hit, 900), allocator.deallocate(fresh, 5000);
  allocator.deallocate(fresh_too, 1000);
  const MemoryStats warm = allocator.stats();
  allocator.deallocate(allocator.allocate(5000), 5000);
  allocator.deallocate(allocator.allocate(1000), 1000);
  const std::string hot = allocator_line(warm, allocator.stats(), 3);
  BOOST_TEST(hot == "allocator: all 2 requests of the profiled steps served from its cache\n", hot);
}

// The line on the profiler's cost: medians of an odd and an even count, the steps they came
// from, and the difference as a signed percentage.
BOOST_AUTO_TEST_CASE(the_unprofiled_line_compares_the_medians_of_the_two_kinds_of_steps) {
  const std::string line = unprofiled_line({9.0, 4.0, 5.0}, {6.0, 5.5, 7.0, 100.0}, 31);
  BOOST_TEST(line ==
                 "wall time per step, median: 5.000 ms without the profiler (warm-up steps "
                 "31..33), 6.500 ms under it (+30.0%)\n",
             line);
  const std::string one = unprofiled_line({8.0}, {7.0}, 12);
  BOOST_TEST(one.find("(warm-up step 12), 7.000 ms under it (-12.5%)") != std::string::npos, one);
  BOOST_TEST(unprofiled_line({}, {7.0}, 12).find("none timed") != std::string::npos);
}

BOOST_AUTO_TEST_SUITE_END()
