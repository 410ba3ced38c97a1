// sim/time.h — virtual time: an integer count of nanoseconds (SimTime). Configs and output
// files speak seconds; conversion happens only at those edges.
#pragma once
#include <cmath>
#include <cstdint>
#include <limits>

namespace asgd {

using SimTime = int64_t;  // virtual nanoseconds
inline constexpr SimTime kNever = std::numeric_limits<SimTime>::max();

inline SimTime seconds_to_sim(double s) { return static_cast<SimTime>(std::llround(s * 1e9)); }
inline double sim_to_seconds(SimTime t) { return static_cast<double>(t) * 1e-9; }

}  // namespace asgd
