// `qkv bench peak`'s handoff measurements (train/bench/core_handoff.h): the two ends of the
// ping-pong run on two threads, every exchange completes, each thread runs the timed kernel, and a
// pool of one thread is refused instead of waiting forever on itself.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/parallel.h"
#include "train/bench/core_handoff.h"

using namespace qkv;

namespace {

// Sets the pool's size for one test and restores it.
struct Threads {
  explicit Threads(int n) : saved(num_threads()) { set_num_threads(n); }
  ~Threads() { set_num_threads(saved); }
  int saved;
};

}  // namespace

BOOST_AUTO_TEST_SUITE(core_handoff)

BOOST_AUTO_TEST_CASE(the_round_trip_runs_between_two_threads) {
  Threads two(2);
  const auto trip = bench::measured_round_trip(500);
  BOOST_REQUIRE(trip.has_value());
  BOOST_TEST(trip->crossed);
  BOOST_TEST(trip->exchanges == 5 * 500);
  BOOST_TEST(std::isfinite(trip->ns));
  BOOST_TEST(trip->ns > 0);
}

BOOST_AUTO_TEST_CASE(the_reads_time_both_writers) {
  Threads two(2);
  const auto read = bench::measured_handoff_read(64 << 10, 3);
  BOOST_REQUIRE(read.has_value());
  BOOST_TEST(std::isfinite(read->own_gbs));
  BOOST_TEST(std::isfinite(read->other_gbs));
  BOOST_TEST(read->own_gbs > 0);
  BOOST_TEST(read->other_gbs > 0);
}

BOOST_AUTO_TEST_CASE(each_thread_runs_the_kernel_alone_every_round) {
  Threads two(2);
  const auto speeds = bench::measured_thread_speeds(4096, 7);
  BOOST_REQUIRE(speeds.has_value());
  BOOST_TEST(speeds->issuing_runs == 7);
  BOOST_TEST(speeds->worker_runs == 7);
  BOOST_TEST(std::isfinite(speeds->issuing_us));
  BOOST_TEST(std::isfinite(speeds->worker_us));
  BOOST_TEST(speeds->issuing_us > 0);
  BOOST_TEST(speeds->worker_us > 0);
}

BOOST_AUTO_TEST_CASE(one_thread_measures_nothing_rather_than_waiting_on_itself) {
  Threads one(1);
  BOOST_TEST(!bench::measured_round_trip(10).has_value());
  BOOST_TEST(!bench::measured_handoff_read(4096, 1).has_value());
  BOOST_TEST(!bench::measured_thread_speeds(4096, 1).has_value());
}

BOOST_AUTO_TEST_SUITE_END()
