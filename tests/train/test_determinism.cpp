// Determinism: the same seed and thread count give bitwise-identical loss curves (metrics.jsonl)
// for a short translation run and a short classification run; another thread count gives the same
// curve within a tolerance. (A resumed run continuing the uninterrupted curve bitwise is tested in
// test_trainer.cpp and test_classification_trainer.cpp.)
//
// Across thread counts: random numbers are Philox counters (the same for any thread count), and
// every CPU kernel splits its work over output elements (rows, GEMM tiles, batch entries), each
// computed by one thread in a fixed order - so today the curves agree bitwise for 1 to 4 threads.
// The test asks for 1e-5 relative, not bitwise: a kernel that split a reduction across threads
// would add partial sums in another order (float addition is not associative), a legitimate
// change that should not have to rewrite this test; a real thread-count bug moves the loss more.
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "tests/train/helpers.h"
#include "tests/train/tiny_runs.h"
#include "train/trainer/classification_trainer.h"
#include "train/trainer/translation_trainer.h"

using namespace qkv;
using namespace qkv::train;
using qkv::train::test::losses;
using qkv::train::test::ScratchDir;

namespace {

Config short_run(const std::string& task, const std::string& out, int64_t threads) {
  Config c;
  c.task = task;
  c.train_size = 200, c.valid_size = 10, c.test_size = 10;
  c.min_length = 3, c.max_length = task == "order" ? 10 : 6;
  c.d_model = 32, c.heads = 2, c.layers = 1, c.ff_dim = 64;
  c.dropout = 0.1;  // dropout draws random numbers: they must repeat too
  c.batch_size = 16, c.steps = 12, c.eval_every = 12, c.log_every = 1;
  c.lr = 3e-3, c.warmup = 2;
  c.threads = threads, c.pictures = false;
  c.out = out;
  return c;
}

TrainResult run_training(const Config& c) {
  return c.task == "order" ? train_classification(c) : train_translation(c);
}

void check_bitwise_equal(const std::vector<double>& a, const std::vector<double>& b) {
  BOOST_REQUIRE_EQUAL(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i)
    BOOST_CHECK_MESSAGE(a[i] == b[i], "step " << i + 1 << ": " << a[i] << " vs " << b[i]);
}

}  // namespace

BOOST_AUTO_TEST_SUITE(determinism)

BOOST_AUTO_TEST_CASE(same_seed_and_threads_give_identical_curves) {
  for (const char* task : {"copy", "order"}) {
    BOOST_TEST_CONTEXT(task) {
      ScratchDir dir(std::string("determinism_") + task);
      run_training(short_run(task, dir.file("a"), 1));
      run_training(short_run(task, dir.file("b"), 1));
      auto a = losses(dir.file("a")), b = losses(dir.file("b"));
      BOOST_CHECK_EQUAL(a.size(), 12u);
      check_bitwise_equal(a, b);
      // and the seed matters: another one gives another curve
      Config other = short_run(task, dir.file("c"), 1);
      other.seed = 7;
      run_training(other);
      BOOST_CHECK(losses(dir.file("c")) != a);
    }
  }
}

BOOST_AUTO_TEST_CASE(another_thread_count_gives_the_same_curve_within_a_tolerance) {
  for (const char* task : {"copy", "order"}) {
    BOOST_TEST_CONTEXT(task) {
      ScratchDir dir(std::string("threads_") + task);
      run_training(short_run(task, dir.file("one"), 1));
      run_training(short_run(task, dir.file("two"), 2));
      auto a = losses(dir.file("one")), b = losses(dir.file("two"));
      BOOST_REQUIRE_EQUAL(a.size(), b.size());
      for (size_t i = 0; i < a.size(); ++i)
        BOOST_CHECK_MESSAGE(std::abs(a[i] - b[i]) <= 1e-5 * std::abs(a[i]),
                            "step " << i + 1 << ": " << a[i] << " vs " << b[i]);
    }
  }
}

BOOST_AUTO_TEST_SUITE_END()
