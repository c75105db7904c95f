#include <boost/test/unit_test.hpp>
#include <set>

#include "engine/error.h"
#include "train/config.h"
#include "train/dataset.h"
#include "train/tasks/calendar.h"
#include "train/tasks/numbers.h"
#include "train/tasks/task.h"
#include "train/tasks/task_table.h"

using namespace qkv::train;

BOOST_AUTO_TEST_SUITE(tasks)

BOOST_AUTO_TEST_CASE(weekdays_match_known_anchors) {
  // Anchors from outside the code: the Unix epoch was a Thursday, 1 January 2000 a Saturday,
  // D-Day (6 June 1944) a Tuesday, 29 February 2000 a Tuesday, and 29 November 2026 a Sunday.
  BOOST_TEST(weekday_name(day_of_week({1970, 1, 1})) == "thursday");
  BOOST_TEST(weekday_name(day_of_week({2000, 1, 1})) == "saturday");
  BOOST_TEST(weekday_name(day_of_week({1944, 6, 6})) == "tuesday");
  BOOST_TEST(weekday_name(day_of_week({2000, 2, 29})) == "tuesday");
  BOOST_TEST(weekday_name(day_of_week({2026, 11, 29})) == "sunday");
  BOOST_TEST(days_since_year_one({1970, 1, 1}) == 719162);  // Python's date(1970,1,1).toordinal()-1
}

BOOST_AUTO_TEST_CASE(weekdays_advance_by_one_every_day_over_the_task_range) {
  int expected = day_of_week({1950, 1, 1});
  for (int y = 1950; y <= 2049; ++y)
    for (int m = 1; m <= 12; ++m)
      for (int d = 1; d <= days_in_month(y, m); ++d) {
        BOOST_REQUIRE_EQUAL(day_of_week({y, m, d}), expected);
        expected = (expected + 1) % 7;
      }
}

BOOST_AUTO_TEST_CASE(leap_years) {
  BOOST_TEST(is_leap_year(2000));
  BOOST_TEST(!is_leap_year(1900));
  BOOST_TEST(is_leap_year(2024));
  BOOST_TEST(!is_leap_year(2026));
  BOOST_TEST(days_in_month(2024, 2) == 29);
  BOOST_TEST(days_in_month(2026, 2) == 28);
  BOOST_TEST(days_in_month(2026, 11) == 30);
}

BOOST_AUTO_TEST_CASE(date_formats) {
  Date d{2026, 11, 29};
  BOOST_TEST(iso_date(d) == "2026-11-29");
  BOOST_TEST(format_date(d, 0) == "sunday 29 november 2026");
  BOOST_TEST(format_date(d, 1) == "29/11/26");
  BOOST_TEST(format_date(d, 2) == "nov 29, 2026");
  BOOST_TEST(format_date(d, 3) == "29.11.2026");
  BOOST_TEST(format_date(d, 4) == "2026/11/29");
  BOOST_TEST(format_date(d, 5) == "november 29 2026");
  BOOST_TEST(format_date({1951, 3, 2}, 8) == "2nd march 1951");
  BOOST_TEST(format_date({1951, 3, 13}, 10) == "the 13th of march 1951");
  BOOST_CHECK_THROW(format_date(d, date_format_count()), qkv::Error);
}

BOOST_AUTO_TEST_CASE(generated_dates_have_the_right_weekday_and_target) {
  // A source naming a weekday must name the weekday of its ISO target.
  int with_weekday = 0;
  for (const Pair& p : generate_task("dates", 2000, 7)) {
    int y = std::stoi(p.target.substr(0, 4)), m = std::stoi(p.target.substr(5, 2)),
        d = std::stoi(p.target.substr(8, 2));
    BOOST_REQUIRE(y >= 1950 && y <= 2049);
    BOOST_REQUIRE(d >= 1 && d <= days_in_month(y, m));
    for (int w = 0; w < 7; ++w)
      if (p.source.find(weekday_name(w).substr(0, 3)) != std::string::npos) {
        BOOST_REQUIRE_MESSAGE(w == day_of_week({y, m, d}), p.source << " -> " << p.target);
        ++with_weekday;
      }
  }
  BOOST_TEST(with_weekday > 200);
}

BOOST_AUTO_TEST_CASE(numbers_in_words) {
  BOOST_TEST(number_to_words(0) == "zero");
  BOOST_TEST(number_to_words(7) == "seven");
  BOOST_TEST(number_to_words(13) == "thirteen");
  BOOST_TEST(number_to_words(40) == "forty");
  BOOST_TEST(number_to_words(105) == "one hundred five");
  BOOST_TEST(number_to_words(1047) == "one thousand forty seven");
  BOOST_TEST(number_to_words(700000) == "seven hundred thousand");
  BOOST_TEST(number_to_words(999999) ==
             "nine hundred ninety nine thousand nine hundred ninety nine");
  BOOST_TEST(number_to_words(12010) == "twelve thousand ten");
  BOOST_CHECK_THROW(number_to_words(1000000), qkv::Error);
}

BOOST_AUTO_TEST_CASE(symbol_tasks) {
  for (const Pair& p : generate_task("reverse", 50, 3))
    BOOST_TEST(p.target == std::string(p.source.rbegin(), p.source.rend()));
  for (const Pair& p : generate_task("sort", 50, 3)) {
    BOOST_TEST(std::is_sorted(p.target.begin(), p.target.end()));
    BOOST_TEST(std::multiset<char>(p.source.begin(), p.source.end()) ==
               std::multiset<char>(p.target.begin(), p.target.end()));
  }
  SymbolTaskOptions o{.min_length = 5, .max_length = 6, .symbols = 3};
  for (const Pair& p : generate_task("copy", 50, 3, o)) {
    BOOST_TEST(p.source == p.target);
    BOOST_TEST((p.source.size() == 5 || p.source.size() == 6));
    BOOST_TEST(p.source.find_first_not_of("abc") == std::string::npos);
  }
}

BOOST_AUTO_TEST_CASE(same_seed_same_data_other_seed_other_data) {
  BOOST_TEST((generate_task("numbers", 20, 5) == generate_task("numbers", 20, 5)));
  BOOST_TEST((generate_task("numbers", 20, 5) != generate_task("numbers", 20, 6)));
}

BOOST_AUTO_TEST_CASE(the_task_table_is_the_only_list) {
  // Every consumer of task names reads the table: the config's choices, the three `qkv train`
  // subcommands' lists (which split it by kind) and the generated tasks.
  const std::vector<std::string> names = all_task_names();
  BOOST_TEST(names.size() == task_table().size());
  const ConfigField& task_field =
      *std::find_if(config_fields().begin(), config_fields().end(),
                    [](const ConfigField& f) { return f.key == "task"; });
  BOOST_TEST(task_field.choices == names, boost::test_tools::per_element());
  std::vector<std::string> listed = translation_task_names();
  for (const auto& n : classification_task_names()) listed.push_back(n);
  for (const auto& n : language_model_task_names()) listed.push_back(n);
  std::sort(listed.begin(), listed.end());
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  BOOST_TEST(listed == sorted, boost::test_tools::per_element());
  // A name without a row is unknown everywhere, with the closest row suggested.
  BOOST_CHECK_EXCEPTION(task_definition("revrse"), qkv::Error, [](const qkv::Error& e) {
    return std::string(e.what()) ==
           "--task: unknown task 'revrse' (did you mean 'reverse'?; valid: copy, reverse, sort, "
           "dates, numbers, pairs, order, classify, fashion-mnist, lm)";
  });
  BOOST_CHECK_THROW(task_kind("transliterate"), qkv::Error);
  BOOST_CHECK_THROW(generate_task("transliterate", 1, 1), qkv::Error);
  Config c;
  BOOST_CHECK_THROW(set_config_value(c, "task", "transliterate"), qkv::Error);
}

BOOST_AUTO_TEST_CASE(rows_agree_with_the_generators_and_tokenizers) {
  for (const TaskDefinition& t : task_table()) {
    // a row with a generator is a translation task made from the seed, and generate_task uses it
    if (t.generate) {
      BOOST_TEST((t.kind == TaskKind::translation), t.name);
      BOOST_TEST((t.data == TaskData::generated), t.name);
      Rng rng(3);
      BOOST_TEST((generate_task(t.name, 1, 3).front() == t.generate(rng, SymbolTaskOptions{})),
                 t.name);
    }
    BOOST_TEST((task_kind(t.name) == t.kind), t.name);
  }
  // "numbers" reads digits and writes English words; the symbol tasks are characters both ways.
  BOOST_TEST((natural_tokenizers("numbers").target == TokenizerKind::whitespace));
  BOOST_TEST((natural_tokenizers("numbers").source == TokenizerKind::character));
  BOOST_TEST((natural_tokenizers("reverse").target == TokenizerKind::character));
  BOOST_TEST((natural_tokenizers("pairs").source == TokenizerKind::whitespace));
  BOOST_TEST(task_names().size() == 5u);  // copy, reverse, sort, dates, numbers
}

BOOST_AUTO_TEST_CASE(splits_are_disjoint_and_full) {
  for (const std::string& name : task_names()) {
    TaskSplits s = make_splits(name, 500, 100, 100, 11);
    BOOST_TEST(s.train.size() == 500u);
    BOOST_TEST(s.valid.size() == 100u);
    BOOST_TEST(s.test.size() == 100u);
    std::set<std::string> sources;
    for (const auto* split : {&s.train, &s.valid, &s.test})
      for (const Pair& p : *split) sources.insert(p.source);
    BOOST_TEST(sources.size() == 700u, name);
  }
}

BOOST_AUTO_TEST_CASE(too_many_distinct_sources_is_an_error) {
  // Length 1 over 2 symbols has only two distinct sources.
  SymbolTaskOptions tiny{.min_length = 1, .max_length = 1, .symbols = 2};
  BOOST_CHECK_EXCEPTION(make_splits("copy", 3, 0, 0, 1, tiny), qkv::Error, [](const qkv::Error& e) {
    return std::string(e.what()).find("only 2 distinct") != std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(unknown_task_lists_valid_ones) {
  BOOST_CHECK_EXCEPTION(generate_task("dats", 1, 1), qkv::Error, [](const qkv::Error& e) {
    std::string m = e.what();
    return m.find("'dats'") != std::string::npos &&
           m.find("(did you mean 'dates'?; valid: copy, reverse, sort, dates, numbers, pairs") !=
               std::string::npos;
  });
}

BOOST_AUTO_TEST_CASE(the_language_model_is_a_task_of_its_own_kind) {
  const TaskDefinition& lm = task_definition("lm");
  BOOST_TEST((lm.kind == TaskKind::language_model));
  BOOST_TEST((lm.data == TaskData::text_file));
  BOOST_TEST(language_model_task_names() == std::vector<std::string>{"lm"},
             boost::test_tools::per_element());
  // Neither of the other trainers' data takes it, and it is not made from a seed.
  Config c;
  c.task = "lm";
  for (auto prepare : {+[](const Config& c) { prepare_translation_data(c); },
                       +[](const Config& c) { prepare_classification_data(c); }})
    BOOST_CHECK_EXCEPTION(prepare(c), qkv::Error, [](const qkv::Error& e) {
      return std::string(e.what()) == "--task: 'lm' is a language model: use `qkv train lm`";
    });
  BOOST_CHECK_THROW(generate_task("lm", 1, 1), qkv::Error);
}

BOOST_AUTO_TEST_SUITE_END()
