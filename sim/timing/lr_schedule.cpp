// sim/timing/lr_schedule.cpp
#include "sim/timing/lr_schedule.h"
#include <algorithm>
#include <cmath>
#include <stdexcept>

namespace asgd {

LrSchedule::LrSchedule(LrScheduleSpec spec) : spec_(std::move(spec)) {
  if (spec_.type == "step")
    kind_ = Kind::Step;
  else if (spec_.type == "cosine")
    kind_ = Kind::Cosine;
  else if (spec_.type != "constant")
    throw std::invalid_argument("unknown lr schedule '" + spec_.type + "'");
  std::sort(spec_.milestones.begin(), spec_.milestones.end());
}

double LrSchedule::at(double epoch) const {
  const double peak = spec_.lr * spec_.scale;
  if (epoch < spec_.warmup_epochs) {
    double from = spec_.warmup_from < 0 ? spec_.lr : spec_.warmup_from;
    return from + (peak - from) * (epoch / spec_.warmup_epochs);
  }
  if (kind_ == Kind::Step) {
    double rate = peak;
    for (double m : spec_.milestones)
      if (epoch >= m) rate *= spec_.gamma;
    return rate;
  }
  if (kind_ == Kind::Cosine) {
    double span = spec_.total_epochs - spec_.warmup_epochs;
    if (span <= 0) return spec_.min_lr;
    double t = std::min(1.0, (epoch - spec_.warmup_epochs) / span);
    return spec_.min_lr + 0.5 * (peak - spec_.min_lr) * (1.0 + std::cos(M_PI * t));
  }
  return peak;
}

}  // namespace asgd
