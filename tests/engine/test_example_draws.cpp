// Dropout drawn by example (engine/example_draws.h): an example's mask depends on its id and the
// element's coordinates, not on its row, its batch's other examples or the padded sizes.
#include <boost/test/unit_test.hpp>

#include "engine/cpu/bernoulli_range.h"
#include "engine/example_draws.h"
#include "engine/ops.h"
#include "engine/parallel.h"

using namespace qkv;

namespace {
// Element e of a row-major tensor of layout l, row b holding example ids[b]: drawn or not, by
// philox::example_bernoulli on its coordinates.
template <typename Id>
bool drawn_at(uint64_t key, const std::vector<Id>& ids, const philox::ExampleLayout& l, uint64_t e,
              uint64_t threshold) {
  const uint64_t c4 = e % l.d[3], c3 = e / l.d[3] % l.d[2], c2 = e / (l.d[3] * l.d[2]) % l.d[1],
                 c1 = e / (l.d[3] * l.d[2] * l.d[1]) % l.d[0], b = e / l.row();
  return philox::example_bernoulli(key, uint64_t(ids[b]), c1, c2, c3, c4, threshold);
}
}  // namespace

BOOST_AUTO_TEST_SUITE(example_draws)

namespace {

// dropout(ones) of `shape` with one counter taken at `offset`, rows drawn for `ids`.
std::vector<double> mask(const Shape& shape, std::vector<uint64_t> ids, uint64_t offset,
                         double p = 0.25) {
  Generator gen(91);
  gen.set_offset(offset);
  const ExampleDraws draws(gen, std::move(ids));
  const std::vector<double> m = dropout(ones(shape), p, true, &gen).to_vector<double>();
  BOOST_TEST(gen.offset() == offset + 1);  // one counter per call
  return m;
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_example_gets_its_mask_at_any_row_and_any_padded_length) {
  // [batch, T, D]: examples 7 and 3 in one batch of length 5; example 3 alone at row 0 of a batch
  // padded to 9, between examples 11 and 7 in another padded to 6.
  const std::vector<double> a = mask({2, 5, 6}, {7, 3}, 40);
  const std::vector<double> b = mask({1, 9, 6}, {3}, 40);
  const std::vector<double> c = mask({3, 6, 6}, {11, 3, 7}, 40);
  int64_t differ = 0, dropped = 0;
  for (int t = 0; t < 5; ++t)
    for (int d = 0; d < 6; ++d) {
      const double three = a[size_t(30 + t * 6 + d)];
      differ += three != b[size_t(t * 6 + d)];
      differ += three != c[size_t(36 + t * 6 + d)];
      differ += a[size_t(t * 6 + d)] != c[size_t(72 + t * 6 + d)];  // example 7
      dropped += three == 0;
    }
  BOOST_TEST(differ == 0);
  BOOST_TEST(dropped > 0);  // p = 0.25 over 30 elements: a mask that keeps all would pass above
  // another call (the next counter) or another example draws another mask
  BOOST_TEST((mask({1, 5, 6}, {3}, 41) != std::vector<double>(a.begin() + 30, a.end())));
  BOOST_TEST((mask({1, 5, 6}, {4}, 40) != std::vector<double>(a.begin() + 30, a.end())));
}

BOOST_AUTO_TEST_CASE(attention_weights_keep_their_mask_when_both_lengths_are_padded) {
  // [batch, heads, T, S], as the composed attention's dropout draws them
  const std::vector<double> a = mask({1, 2, 3, 5}, {9}, 0);
  const std::vector<double> b = mask({2, 2, 7, 8}, {1, 9}, 0);
  int64_t differ = 0;
  for (int h = 0; h < 2; ++h)
    for (int t = 0; t < 3; ++t)
      for (int s = 0; s < 5; ++s)
        differ += a[size_t((h * 3 + t) * 5 + s)] != b[size_t(112 + (h * 7 + t) * 8 + s)];
  BOOST_TEST(differ == 0);
}

BOOST_AUTO_TEST_CASE(the_fill_is_example_bernoulli_element_by_element_on_any_thread_count) {
  const int saved = num_threads();
  const uint64_t key = philox::call_key(91, 12), threshold = philox::bernoulli_threshold(0.7);
  // every trailing slot used, rows not a multiple of 4; and lines long enough for the float32
  // fill's sixteen-block AVX-512 groups (133: two groups, a block, one more), an id above 2^32
  // in the counters' high word
  const std::vector<uint64_t> ids{5, (uint64_t(1) << 40) + 2, 0};
  for (const Shape& shape : {Shape{3, 2, 4, 7, 9}, Shape{3, 5, 133}})
    for (int threads : {1, 2})
      for (DType dtype : {DType::f32, DType::f64}) {
        set_num_threads(threads);
        Generator gen(91);
        gen.set_offset(12);
        const ExampleDraws draws(gen, ids);
        const std::vector<double> got =
            dropout(ones(shape, {dtype}), 0.3, true, &gen).to_vector<double>();
        const double kept = dtype == DType::f32 ? double(float(1 / 0.7)) : 1 / 0.7;
        const philox::ExampleLayout l = example_layout(shape, ids.size(), "test");
        int64_t wrong = 0, ones_drawn = 0;
        for (uint64_t i = 0; i < got.size(); ++i) {
          const bool draw = drawn_at(key, ids, l, i, threshold);
          wrong += got[i] != (draw ? kept : 0.0);
          ones_drawn += draw;
        }
        BOOST_TEST(wrong == 0, shape_str(shape)
                                   << ", " << threads << " threads, " << dtype_name(dtype));
        BOOST_TEST(double(ones_drawn) / double(got.size()) == 0.7,
                   boost::test_tools::tolerance(0.05));
      }
  set_num_threads(saved);
}

// Several short lines at a time (the fused attention's rows of weights): the blocks of lines 1 to
// 70 elements wide gathered sixteen to a vector, partial last blocks, more blocks than one
// gathering holds (256), lines starting mid-tensor; keep probabilities 0.7 and 1 (every word
// below the threshold); element by element against philox::example_bernoulli.
BOOST_AUTO_TEST_CASE(short_lines_drawn_together_are_example_bernoulli_element_by_element) {
  const uint64_t key = philox::call_key(7, 3);
  const std::vector<int64_t> ids{9, (int64_t(1) << 40) + 3, 4};
  for (double keep : {0.7, 1.0})
    for (int64_t width : {1, 3, 4, 5, 20, 33, 63, 64, 70}) {
      const uint64_t threshold = philox::bernoulli_threshold(keep);
      const Shape shape{3, 4, 37, width};  // 148 lines a row
      const philox::ExampleLayout l = example_layout(shape, ids.size(), "test");
      const uint64_t first_line = 5;
      const int64_t lines = 3 * 4 * 37 - 5 - 2;
      std::vector<float> got(size_t(lines * width), -1.0f);
      cpu::fill_bernoulli_example_lines(got.data(), key, ids.data(), l, first_line, lines,
                                        threshold, 2.5f);
      int64_t wrong = 0;
      for (int64_t i = 0; i < lines * width; ++i) {
        const bool draw =
            drawn_at(key, ids, l, first_line * uint64_t(width) + uint64_t(i), threshold);
        wrong += got[size_t(i)] != (draw ? 2.5f : 0.0f);
      }
      BOOST_TEST(wrong == 0, "width " << width << ", keep " << keep);
    }
}

// The same short lines drawn as bits (the fused attention's kept words): widths 1 to 64 with
// partial last blocks, lines whose blocks are not a whole number of vectors, more lines than one
// batch of blocks holds (256), starting mid-row and running to the tensor's last line; bit by bit
// against philox::example_bernoulli, and nothing set at or past a line's width.
BOOST_AUTO_TEST_CASE(short_lines_drawn_as_bits_are_example_bernoulli_bit_by_bit) {
  const uint64_t key = philox::call_key(11, 5);
  const std::vector<int64_t> ids{9, (int64_t(1) << 40) + 3, 4};
  for (double keep : {0.7, 1.0})
    for (int64_t width : {1, 3, 4, 5, 20, 33, 61, 63, 64}) {
      const uint64_t threshold = philox::bernoulli_threshold(keep);
      const Shape shape{3, 2, 5, 37, width};  // 370 lines a row
      const philox::ExampleLayout l = example_layout(shape, ids.size(), "test");
      const uint64_t first_line = 7;
      const int64_t lines = 3 * 2 * 5 * 37 - 7;
      std::vector<uint64_t> got(size_t(lines), ~uint64_t(0));
      cpu::bernoulli_example_line_words(got.data(), key, ids.data(), l, first_line, lines,
                                        threshold);
      int64_t wrong = 0, kept = 0;
      for (int64_t i = 0; i < lines; ++i)
        for (int64_t c = 0; c < 64; ++c) {
          const bool bit = (got[size_t(i)] >> c) & 1;
          const bool draw =
              c < width &&
              drawn_at(key, ids, l, (first_line + uint64_t(i)) * uint64_t(width) + uint64_t(c),
                       threshold);
          wrong += bit != draw;
          kept += bit;
        }
      BOOST_TEST(wrong == 0, "width " << width << ", keep " << keep);
      BOOST_TEST(double(kept) / double(lines * width) == keep, boost::test_tools::tolerance(0.05));
    }
}

BOOST_AUTO_TEST_CASE(a_tensor_that_does_not_fit_the_counters_is_refused_by_name) {
  Generator gen(1);
  const ExampleDraws draws(gen, {1, 2});
  auto refused = [&](const Shape& shape, const std::string& says) {
    try {
      dropout(ones(shape), 0.5, true, &gen);
    } catch (const Error& e) {
      const std::string what = e.what();
      BOOST_TEST_INFO(what);
      BOOST_TEST(
          (what.find("dropout") != std::string::npos && what.find(says) != std::string::npos));
      return;
    }
    BOOST_ERROR("dropout of " << shape_str(shape) << " was not refused");
  };
  refused({3, 4}, "batch of 2 examples, but the tensor of shape [3,4]");
  refused({2, 1, 1, 1, 1, 1}, "at most 4 dims after the batch");
  refused({2, 70000}, "dims below 65536");
}

BOOST_AUTO_TEST_CASE(draws_are_sequential_again_once_the_scope_ends) {
  Generator a(5), b(5);
  { const ExampleDraws draws(a, {0, 1}); }
  BOOST_TEST(a.example_ids().empty());
  BOOST_TEST((dropout(ones({2, 8}), 0.5, true, &a).to_vector<double>() ==
              dropout(ones({2, 8}), 0.5, true, &b).to_vector<double>()));
}

BOOST_AUTO_TEST_SUITE_END()
