// `qkv bench peak`'s handoff measurements (train/bench/core_handoff.h): the two ends of the
// ping-pong run on two threads, every exchange completes, each thread runs the timed kernel, and a
// pool of one thread is refused instead of waiting forever on itself.
#include <boost/test/unit_test.hpp>
#include <cmath>

#include "engine/parallel.h"
#include "train/bench/core_handoff.h"

using namespace qkv;

namespace {

// A measured time or rate: a number, and above zero.
void check_measured(double value) {
  BOOST_TEST(std::isfinite(value));
  BOOST_TEST(value > 0);
}

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
  check_measured(trip->ns);
}

BOOST_AUTO_TEST_CASE(the_reads_time_both_writers) {
  Threads two(2);
  const auto read = bench::measured_handoff_read(64 << 10, 3);
  BOOST_REQUIRE(read.has_value());
  check_measured(read->own_gbs);
  check_measured(read->other_gbs);
}

BOOST_AUTO_TEST_CASE(each_thread_runs_the_kernel_alone_every_round) {
  Threads two(2);
  const auto speeds = bench::measured_thread_speeds(4096, 7);
  BOOST_REQUIRE(speeds.has_value());
  BOOST_TEST(speeds->issuing_runs == 7);
  BOOST_TEST(speeds->worker_runs == 7);
  check_measured(speeds->issuing_us);
  check_measured(speeds->worker_us);
}

BOOST_AUTO_TEST_CASE(one_thread_measures_nothing_rather_than_waiting_on_itself) {
  Threads one(1);
  BOOST_TEST(!bench::measured_round_trip(10).has_value());
  BOOST_TEST(!bench::measured_handoff_read(4096, 1).has_value());
  BOOST_TEST(!bench::measured_thread_speeds(4096, 1).has_value());
}

BOOST_AUTO_TEST_SUITE_END()
