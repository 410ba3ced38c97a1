// sim/timing/distribution.h — random durations and factors (virtual seconds or unitless):
// constant, uniform, exponential, shifted exponential, lognormal, Pareto, Weibull and a
// replayed trace (dist "flops" and "measured" resolve per run, in their own entries, into a
// constant and a trace: BoundDistribution::resolve). Each knows its closed-form mean and
// variance (tests compare samples against them). Draws take the caller's keyed Rng, so they
// are reproducible per (worker, step). A distribution object is bound once, at validation,
// to its type's typed config (bind_distribution: a BoundDistribution), and made from that.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "kernels/rng.h"
#include "sim/config/param.h"
#include "sim/config/validator.h"

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

// A named datasheet peak's FLOP/s (cluster.compute.flops of dist "flops": "h100-fp32", ...);
// 0 for another name.
double device_flops(const std::string& device);

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

// What dist "measured" times before the runs (its keys, its typed config): `warmup` untimed
// steps, then up to `steps` timed steps or `seconds` of them, but at least `min_steps` (at
// most `steps`).
struct CalibrationBudget {
  double seconds = 0;
  int steps = 0;
  int warmup = 0;
  int min_steps = 1;
};

struct MeasuredTrace;  // sim/timing/measured_trace.h
class BoundDistribution;

// What a compute distribution that follows the model (dist "flops", "measured") asks of its
// run, typed: the bound model's count and the run's batch. experiments/config builds it
// once per run at validation (compute_run_view), and `asgdsim run` again with what it
// learns before the runs (a PyTorch module's FLOPs once built, the measured trace once made).
struct ComputeRunView {
  std::string model;       // the model's type (what notes and errors name)
  size_t batch_size = 0;   // per worker
  bool per_sample = true;  // cluster.compute.per is "sample"
  // Asked only by the dist that needs it (each may build the model or hash its config):
  // the model's FLOPs per sample (0: it counts none; none: counted when `asgdsim run`
  // builds it, a PyTorch module), and dist "measured"'s trace in the experiment folder.
  std::function<std::optional<double>()> flops_per_sample;
  std::function<std::string()> trace_name;
  std::string flops_counter;             // how the FLOPs were counted ("": the native models' rule)
  std::string trace_path;                // "measured": the trace's path once made or found
  const MeasuredTrace* trace = nullptr;  // ... and what it holds (null: not yet)
};

// What a run's compute draws, resolved from the distribution its config asks for.
struct ComputeResolution {
  std::shared_ptr<const BoundDistribution> draw;  // null: resolved when `asgdsim run` starts
  nlohmann::json model;                           // what the clock charges, as summary.json's compute_model says
  bool per_step = false;                          // a draw is the whole step (per "step", whatever the config says)
  std::string note;                               // what `asgdsim run` does for it before the runs ("": nothing)
  std::string error;  // why this run cannot draw it, said at cluster.compute.dist ("": it can)
};

// A distribution object bound once (at validation) to its type's typed config: what the
// run's components ask of it, each hook reading the typed config.
class BoundDistribution {
 public:
  virtual ~BoundDistribution() = default;
  virtual const std::string& type() const = 0;
  // Its keys, read back from the typed config (Field::get).
  virtual nlohmann::json keys() const = 0;
  // {"dist": type} and its keys: the object as it is bound (what tells two apart).
  nlohmann::json spec() const;
  // The distribution, made from the typed config (the one place one is made). A trace
  // "file" is read here (base_dir resolves a relative path): a missing file or a bad line
  // throws std::invalid_argument naming the file and line; so does a dist that is resolved
  // per run ("flops", "measured") and was not.
  virtual std::unique_ptr<Distribution> make(const std::string& base_dir = "") const = 0;
  // As cluster.compute: what the run draws (every dist draws itself, but "flops" and
  // "measured", which follow the model).
  virtual ComputeResolution resolve(const ComputeRunView& run) const = 0;
};

// Binds a validated distribution object {"dist": name, its keys (defaults filled; a key it
// lacks takes its default, as in an object built in code), any other keys ignored} to its
// type's typed config; throws std::invalid_argument on an unknown dist or a required key
// left out.
std::shared_ptr<const BoundDistribution> bind_distribution(const nlohmann::json& spec);
// Validates the distribution object `user` at `path` ({"dist": name, its keys, and the
// `common` keys of its section, which its section binds}) and returns it with defaults
// filled; when nothing in it was reported, binds it into `out` (bind_distribution).
nlohmann::json bind_distribution(const nlohmann::json& user, const std::string& path, Validator& v,
                                 std::shared_ptr<const BoundDistribution>& out,
                                 const std::vector<ParamInfo>& common = {});
// Dist "measured"'s typed config; std::invalid_argument for another dist.
const CalibrationBudget& calibration_budget(const BoundDistribution& measured);

// For objects built in code (tests, bench): bind_distribution(spec)->make(base_dir).
std::unique_ptr<Distribution> make_distribution(const nlohmann::json& spec, const std::string& base_dir = "");

}  // namespace asgd
