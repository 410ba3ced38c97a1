// sim/timing/compute_time.cpp — a step's compute time (see compute_time.h).
#include "sim/timing/compute_time.h"
#include <stdexcept>
#include <string>

namespace asgd {

ComputeTimeModel::ComputeTimeModel(uint64_t seed, std::unique_ptr<Distribution> dist, std::vector<double> slowdown,
                                   StragglerSpec stragglers, StepCost cost)
    : seed_(seed),
      dist_(std::move(dist)),
      slowdown_(std::move(slowdown)),
      stragglers_(std::move(stragglers)),
      cost_(cost) {
  for (double s : slowdown_)
    if (!(s > 0)) throw std::invalid_argument("worker slowdown factors must be > 0");
  if (!(cost_.overhead >= 0)) throw std::invalid_argument("compute overhead must be >= 0");
}

SimTime ComputeTimeModel::duration(uint32_t worker, uint32_t step, size_t samples, SimTime start,
                                   int64_t client) const {
  Rng rng(seed_, RngPurpose::ComputeTime, worker, step);
  double draw = dist_->sample(rng, worker, step);
  double d = cost_.overhead + (cost_.per_sample ? double(samples) * draw : draw);
  if (worker < slowdown_.size()) d *= slowdown_[worker];
  if (client >= 0 && size_t(client) < client_slowdown_.size()) d *= double(client_slowdown_[size_t(client)]);
  if (stragglers_.probability > 0) {
    Rng straggle(seed_, RngPurpose::Straggler, worker, step);
    if (straggle.uniform() <= stragglers_.probability) d *= stragglers_.factor;
  }
  for (const auto& w : stragglers_.windows)
    if (w.worker == int(worker) && start >= w.from && start < w.to) d *= w.factor;
  if (!(d * 1e9 < 9.2e18))  // a heavy tail's draw, times slowdown and straggler factors
    throw TimeOverflow(
        "worker " + std::to_string(worker) + " drew a compute time of " + seconds_text(d) + " s at step " +
        std::to_string(step) +
        ": beyond the virtual clock's range (~9.2e9 s); "
        "use a lighter tail in cluster.compute (e.g. pareto alpha > 1), smaller slowdown factors or a shorter run");
  return seconds_to_sim(d);
}

}  // namespace asgd
