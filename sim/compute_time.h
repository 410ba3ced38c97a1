// sim/compute_time.h — how long one gradient computation takes in virtual time: a draw
// from the configured distribution (stream (seed, ComputeTime, worker, step)) times the
// worker's slowdown factor, times the straggler factors in force: a transient straggler
// (with probability p a step is `factor` times slower; stream (seed, Straggler, worker,
// step)) and named slow windows ("worker 3 is 4x slower from t=100 s to t=200 s", by the
// step's start time). Not here: network transfer time (sim/network.h).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>
#include "sim/distribution.h"
#include "sim/time.h"

namespace asgd {

struct SlowWindow {
  int worker = 0;
  double factor = 1;
  SimTime from = 0, to = kNever;
};

struct StragglerSpec {
  double probability = 0;  // transient: chance that a step is slowed
  double factor = 1;       // transient: how much slower
  std::vector<SlowWindow> windows;
};

class ComputeTimeModel {
 public:
  // slowdown[w] multiplies worker w's durations (1 = nominal; 2 = twice as slow).
  ComputeTimeModel(uint64_t seed, std::unique_ptr<Distribution> dist, std::vector<double> slowdown,
                   StragglerSpec stragglers = {});
  SimTime duration(uint32_t worker, uint32_t step, SimTime start = 0) const;
  const Distribution& distribution() const { return *dist_; }

 private:
  uint64_t seed_;
  std::unique_ptr<Distribution> dist_;
  std::vector<double> slowdown_;
  StragglerSpec stragglers_;
};

}  // namespace asgd
