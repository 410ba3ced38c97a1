// sim/compute_time.h — how long one gradient computation takes in virtual time:
// a draw from the configured distribution (stream keyed by (seed, worker, step)) times
// the worker's speed factor. Not here: network transfer time (not modelled yet).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>
#include "sim/distribution.h"
#include "sim/time.h"

namespace asgd {

class ComputeTimeModel {
 public:
  // slowdown[w] multiplies worker w's durations (1 = nominal; 2 = twice as slow).
  ComputeTimeModel(uint64_t seed, std::unique_ptr<Distribution> dist, std::vector<double> slowdown);
  SimTime duration(uint32_t worker, uint32_t step) const;
  const Distribution& distribution() const { return *dist_; }

 private:
  uint64_t seed_;
  std::unique_ptr<Distribution> dist_;
  std::vector<double> slowdown_;
};

}  // namespace asgd
