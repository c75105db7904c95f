#include "train/tasks/calendar.h"

#include <array>
#include <cstdio>

#include "engine/error.h"

namespace qkv::train {

bool is_leap_year(int year) { return (year % 4 == 0 && year % 100 != 0) || year % 400 == 0; }

int days_in_month(int year, int month) {
  static constexpr std::array<int, 12> lengths = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  QKV_CHECK(month >= 1 && month <= 12, "days_in_month", "month must be 1..12, got ", month);
  return month == 2 && is_leap_year(year) ? 29 : lengths[size_t(month - 1)];
}

long days_since_year_one(const Date& d) {
  // Whole years first (365 days each plus one per leap year before `year`), then whole months.
  long y = d.year - 1;
  long days = 365 * y + y / 4 - y / 100 + y / 400;
  for (int m = 1; m < d.month; ++m) days += days_in_month(d.year, m);
  return days + d.day - 1;
}

// 0001-01-01 of the proleptic Gregorian calendar was a Monday.
int day_of_week(const Date& d) { return int(days_since_year_one(d) % 7); }

const std::string& month_name(int month) {
  static const std::array<std::string, 12> names = {
      "january", "february", "march",     "april",   "may",      "june",
      "july",    "august",   "september", "october", "november", "december"};
  QKV_CHECK(month >= 1 && month <= 12, "month_name", "month must be 1..12, got ", month);
  return names[size_t(month - 1)];
}

const std::string& weekday_name(int weekday) {
  static const std::array<std::string, 7> names = {"monday", "tuesday",  "wednesday", "thursday",
                                                   "friday", "saturday", "sunday"};
  QKV_CHECK(weekday >= 0 && weekday < 7, "weekday_name", "weekday must be 0..6, got ", weekday);
  return names[size_t(weekday)];
}

std::string iso_date(const Date& d) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "%04d-%02d-%02d", d.year, d.month, d.day);
  return buf;
}

namespace {

std::string ordinal(int n) {
  const char* suffix = "th";
  if (n % 100 < 11 || n % 100 > 13) {
    if (n % 10 == 1) suffix = "st";
    if (n % 10 == 2) suffix = "nd";
    if (n % 10 == 3) suffix = "rd";
  }
  return std::to_string(n) + suffix;
}

std::string two(int n) {
  char buf[8];
  std::snprintf(buf, sizeof buf, "%02d", n);
  return buf;
}

}  // namespace

int date_format_count() { return 14; }

std::string format_date(const Date& d, int format) {
  const std::string day = std::to_string(d.day), year = std::to_string(d.year);
  const std::string& month = month_name(d.month);
  const std::string mon = month.substr(0, 3);
  const std::string& weekday = weekday_name(day_of_week(d));
  const std::string wkd = weekday.substr(0, 3);
  switch (format) {
    case 0:
      return weekday + " " + day + " " + month + " " + year;  // sunday 29 november 2026
    case 1:
      return two(d.day) + "/" + two(d.month) + "/" + two(d.year % 100);  // 29/11/26
    case 2:
      return mon + " " + day + ", " + year;  // nov 29, 2026
    case 3:
      return two(d.day) + "." + two(d.month) + "." + year;  // 29.11.2026
    case 4:
      return year + "/" + two(d.month) + "/" + two(d.day);  // 2026/11/29
    case 5:
      return month + " " + day + " " + year;  // november 29 2026
    case 6:
      return day + " " + mon + " " + year;  // 29 nov 2026
    case 7:
      return wkd + ", " + day + " " + mon + " " + year;  // sun, 29 nov 2026
    case 8:
      return ordinal(d.day) + " " + month + " " + year;  // 29th november 2026
    case 9:
      return weekday + ", " + month + " " + day + ", " + year;  // sunday, november 29, 2026
    case 10:
      return "the " + ordinal(d.day) + " of " + month + " " + year;
    case 11:
      return day + "-" + mon + "-" + year.substr(2);  // 29-nov-26
    case 12:
      return month + " " + ordinal(d.day) + ", " + year;  // november 29th, 2026
    case 13:
      return two(d.day) + "-" + two(d.month) + "-" + year;  // 29-11-2026
  }
  throw Error("format_date: format must be 0.." + std::to_string(date_format_count() - 1) +
              ", got " + std::to_string(format));
}

}  // namespace qkv::train
