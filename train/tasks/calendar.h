// The Gregorian calendar, enough of it for the dates task: leap years, month lengths, weekdays.
#pragma once

#include <string>

namespace qkv::train {

struct Date {
  int year, month, day;  // month 1..12, day 1..31
};

bool is_leap_year(int year);
int days_in_month(int year, int month);
// Days from 0001-01-01 (proleptic Gregorian) to the date; 0001-01-01 itself is day 0.
long days_since_year_one(const Date& date);
// 0 = Monday ... 6 = Sunday.
int day_of_week(const Date& date);

const std::string& month_name(int month);      // "january"
const std::string& weekday_name(int weekday);  // 0 -> "monday"

// "2026-11-29"
std::string iso_date(const Date& date);

// The human-readable ways the dates task writes a date ("sunday 29 november 2026", "29/11/26",
// "nov 29, 2026", ...). Day-first is the only numeric order besides year-first, so no source is
// ambiguous; two-digit years mean 1950..2049, the task's range.
int date_format_count();
std::string format_date(const Date& date, int format);

}  // namespace qkv::train
