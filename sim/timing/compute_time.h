// sim/timing/compute_time.h — how long one gradient computation takes in virtual time. A step on
// a minibatch of m samples costs
//     overhead + m * draw     (per = sample, the default: compute grows with the work)
//     overhead + draw         (per = step: the draw is the whole step's time)
// where `draw` is one draw per step from the configured distribution (stream (seed,
// ComputeTime, worker, step)): per sample, the step's m samples share that draw, so an
// exponential per-sample mean of 10/32 ms gives exponential steps of mean 10 ms at batch
// 32. The whole step (overhead included) is then multiplied by the worker's slowdown
// factor and the straggler factors in force: a transient straggler (with probability p a
// step is `factor` times slower; stream (seed, Straggler, worker, step)) and named slow
// windows ("worker 3 is 4x slower from t=100 s to t=200 s", by the step's start time).
// Not here: network transfer time (sim/net/topology.h) or the server's update time.
#pragma once
#include <cstdint>
#include <memory>
#include <vector>
#include "sim/data/client_devices.h"
#include "sim/timing/distribution.h"
#include "sim/base/time.h"

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

// What one draw of the distribution stands for (cluster.compute.per, .overhead).
struct StepCost {
  bool per_sample = true;  // true: a step costs m draws' worth (one draw scaled by m)
  double overhead = 0;     // virtual seconds added to every step before the factors
};

class ComputeTimeModel {
 public:
  // slowdown[w] multiplies worker w's durations (1 = nominal; 2 = twice as slow).
  ComputeTimeModel(uint64_t seed, std::unique_ptr<Distribution> dist, std::vector<double> slowdown,
                   StragglerSpec stragglers = {}, StepCost cost = {});
  // Worker `worker`'s step `step` on `samples` samples, starting at `start`; `client`: the
  // population's client the worker trains now (its factor multiplies the worker's), or -1.
  SimTime duration(uint32_t worker, uint32_t step, size_t samples, SimTime start = 0, int64_t client = -1) const;
  // A population's slowdown factors, one per client (section clients: drawn once per client).
  void set_client_slowdown(std::vector<float> factors) { client_slowdown_ = std::move(factors); }
  const std::vector<float>& client_slowdown() const { return client_slowdown_; }
  // A population's devices (clients.devices): their bandwidths and availability, which the
  // runtime charges and obeys (null: none).
  void set_client_devices(std::shared_ptr<const ClientDevices> d) { devices_ = std::move(d); }
  const ClientDevices* client_devices() const { return devices_.get(); }
  const Distribution& distribution() const { return *dist_; }
  const StepCost& cost() const { return cost_; }

 private:
  uint64_t seed_;
  std::unique_ptr<Distribution> dist_;
  std::vector<double> slowdown_;
  std::vector<float> client_slowdown_;  // empty: no population, or every client's factor 1
  std::shared_ptr<const ClientDevices> devices_;
  StragglerSpec stragglers_;
  StepCost cost_;
};

}  // namespace asgd
