// sim/base/time.h — virtual time: an integer count of nanoseconds (SimTime). Configs and output
// files speak seconds; conversion happens only at those edges. The clock's range is
// [0, kNever): about 292 years. Every conversion and every sum of times that could leave
// it (a heavy-tailed draw, a huge config value) is checked and throws TimeOverflow
// instead of wrapping around.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <cstdio>
#include <string>
#include "sim/base/errors.h"  // TimeOverflow

namespace asgd {

using SimTime = int64_t;  // virtual nanoseconds
inline constexpr SimTime kNever = std::numeric_limits<SimTime>::max();
// The largest duration or instant a config may give, in seconds (~31.7 years): a ninth of
// the clock's range, so that a run's time keys added together cannot pass its end.
inline constexpr double kMaxConfigSeconds = 1e9;

// Seconds as a message shows them: "3e+12", "0.25", not to_string's "3000000000000.000000".
inline std::string seconds_text(double seconds) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.6g", seconds);
  return buf;
}

inline std::string time_overflow_text(double seconds) {
  return seconds_text(seconds) + " s is outside the virtual clock's range (int64 nanoseconds: 0 to ~9.2e9 s)";
}

// Rounds to the nearest nanosecond; throws TimeOverflow for a value the clock cannot hold.
inline SimTime seconds_to_sim(double s) {
  const double ns = s * 1e9;
  if (!(std::fabs(ns) < 9.2e18)) throw TimeOverflow(time_overflow_text(s));
  return static_cast<SimTime>(std::llround(ns));
}
inline double sim_to_seconds(SimTime t) { return static_cast<double>(t) * 1e-9; }

// a + b for a time and a duration; throws TimeOverflow where the sum reaches kNever
// (which means "never") or overflows.
inline SimTime add_time(SimTime a, SimTime b) {
  SimTime sum;
  if (__builtin_add_overflow(a, b, &sum) || sum == kNever)
    throw TimeOverflow(time_overflow_text(sim_to_seconds(a) + sim_to_seconds(b)));
  return sum;
}

}  // namespace asgd
