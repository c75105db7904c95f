// dates: a date written by a human -> the same date in ISO 8601.
#include "train/tasks/calendar.h"
#include "train/tasks/task.h"

namespace qkv::train {

Pair make_date_pair(Rng& rng) {
  // Uniform over days (not over year, then month, then day), so that 29 February is as rare as
  // it is in the calendar, and every weekday equally common.
  static const long first = days_since_year_one({1950, 1, 1});
  static const long last = days_since_year_one({2049, 12, 31});
  long target = uniform_int(rng, first, last);
  Date d{1950, 1, 1};
  long days = target - first;
  while (days >= (is_leap_year(d.year) ? 366 : 365)) days -= is_leap_year(d.year++) ? 366 : 365;
  while (days >= days_in_month(d.year, d.month)) days -= days_in_month(d.year, d.month++);
  d.day = int(days) + 1;
  int format = int(uniform_int(rng, 0, date_format_count() - 1));
  return {format_date(d, format), iso_date(d)};
}

}  // namespace qkv::train
