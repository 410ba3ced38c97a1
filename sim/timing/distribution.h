// sim/timing/distribution.h — random durations and factors (virtual seconds or unitless):
// constant, uniform, exponential, shifted exponential, lognormal, Pareto, Weibull and a
// replayed trace (dist "flops" and "measured" are resolved per run into a constant and a
// trace: experiments/config/config.cpp, experiments/bench/calibration.h). Each knows its closed-form mean and variance (tests compare samples against
// them). Draws take the caller's keyed Rng, so they are reproducible per (worker, step).
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "kernels/rng.h"
#include "sim/config/param.h"

namespace asgd {

class Distribution {
 public:
  virtual ~Distribution() = default;
  // One draw from rng (the stream of (seed, purpose, worker, step)). worker and step matter
  // only to a per-worker trace, which replays worker's sequence at step.
  virtual double sample(Rng& rng, uint32_t worker, uint32_t step) const = 0;
  virtual double mean() const = 0;
  virtual double variance() const = 0;  // +inf where it does not exist (Pareto alpha <= 2)
  // A per-worker trace's number of workers' sequences (it replays one per worker); 0 for
  // every other distribution.
  virtual size_t worker_sequences() const { return 0; }
};

// The distributions and their parameters (the "dist" key selects one).
const std::vector<ComponentInfo>& distribution_catalog();

// cluster.compute.flops of dist "flops": a device's FLOP/s, a number or a named datasheet
// peak ("h100-fp32", ...); 0 for anything else.
double device_flops(const nlohmann::json& flops);

// A trace file's durations ('#' lines and blank lines skipped), in one of three forms:
//   0.0312                   one duration per line: one sequence (after an optional
//                            one-name header)
//   worker,step,seconds      a header, then a row per step: worker (0-based), its step
//   0,0,0.0312               (consecutive per worker, from any first step), seconds
//   w0,w1,w2                 a header naming one column per worker, then a row per step
//   0.0312,0.0298,0.0401     (a column ends at its first empty cell)
// The last two are per-worker traces (per_worker; sequences[w] is worker w's), and every
// worker 0..W-1 must have durations. Throws std::invalid_argument naming the file and the
// line (not a number, negative, too large, too long, a step out of order, a row that does
// not match the header) or saying that it cannot be opened, holds none, or lacks a worker.
struct TraceFile {
  std::vector<std::vector<double>> sequences;  // one, or one per worker
  bool per_worker = false;
};
TraceFile read_trace_file(const std::string& path);

// What dist "measured" times before the runs (its keys, bound from a validated spec; a key
// it lacks takes its declared default): `warmup` untimed steps, then up to `steps` timed
// steps or `seconds` of them, but at least `min_steps` (at most `steps`).
struct CalibrationBudget {
  double seconds = 0;
  int steps = 0;
  int warmup = 0;
  int min_steps = 1;
};
CalibrationBudget calibration_budget(const nlohmann::json& spec);

// Builds a distribution from a validated spec {"dist": name, params...}. A trace "file"
// is read here; a missing file or a non-numeric line throws std::invalid_argument naming
// the file and line. base_dir resolves relative file paths.
std::unique_ptr<Distribution> make_distribution(const nlohmann::json& spec,
                                                const std::string& base_dir = "");

}  // namespace asgd
