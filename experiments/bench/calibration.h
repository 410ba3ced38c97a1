// experiments/bench/calibration.h — the model's real gradient, timed on this machine. Two
// users, one loop: `asgdsim bench`'s bare side (experiments/bench/bench.cpp) computes
// gradients with GradientLoop, and cluster.compute "measured" times GradientLoop's steps
// one by one (time_gradient_steps) into the experiment's trace file
// (sim/timing/measured_trace.h), which every run then replays as dist "trace". Not here:
// how a draw becomes a step's virtual time (sim/timing/compute_time.h).
#pragma once
#include <cstdint>
#include <functional>
#include <set>
#include <string>
#include <vector>
#include "experiments/config/config.h"
#include "kernels/buffer.h"
#include "kernels/exec.h"
#include "kernels/model.h"

namespace asgd {

// One thread's gradients as a run's worker job computes them: its own ExecContext,
// parameters (w, uploaded from `init`) and gradient (g, num_params floats), and
// `batches` minibatches of `batch` ids cut from one SampleStream over train_size samples,
// used cyclically. Construct and use it on the thread that computes (after
// kernels_use_one_thread_here(), as the worker pool's threads call it).
struct GradientLoop {
  GradientLoop(const Model& model, const DeviceDataset* train, const std::vector<float>& init, size_t train_size,
               size_t batch, uint64_t stream_seed, size_t batches);
  // loss_grad of minibatch k (k mod batches) at w into g, with noise key `noise`.
  double gradient(uint64_t k, const NoiseKey& noise);
  const int32_t* batch_ids(uint64_t k) const { return ids.data() + (k % batches) * batch; }

  const Model& model;
  const DeviceDataset* train;  // null: the model reads no data
  size_t batch, batches;
  ExecContext ctx;
  DeviceArray<float> w, g;
  std::vector<int32_t> ids;  // batches x batch sample ids
};

// The calibration of one (model, batch) (CalibrationBudget: sim/timing/distribution.h,
// bound from dist "measured"'s keys): `warmup` untimed steps, then steps timed one by one
// (gradient and synchronize, as a job ends) until `steps` are timed or their time reaches
// `seconds`, whichever comes first (at least one is timed).

// The calibration's clock, in seconds, read on the timing thread, for a model whose jobs
// compute on `job_threads` threads (Model::job_threads): on the CPU backends, for a job of
// one thread, that thread's CPU time (the job's cost, without the time other processes
// take from the core meanwhile: docs/benchmarks.md, "Measured compute"); wall time on CUDA (the
// GPU's work is not the thread's CPU time) and for a job of several threads (a PyTorch
// module with model.threads > 1: its other threads' work is not the timing thread's).
// calibration_clock_name says which.
double calibration_clock_seconds(int job_threads = 1);
const char* calibration_clock_name(int job_threads = 1);

// Times `model`'s steps on a thread of its own (one kernel thread, as a run's job), with
// `now` as the clock (seconds; empty: calibration_clock_seconds; a test injects one).
// Returns each timed step's seconds.
std::vector<double> time_gradient_steps(const Model& model, const DeviceDataset* train, size_t train_size, size_t batch,
                                        const CalibrationBudget& budget,
                                        const std::function<double()>& now = {});

struct CalibrationOptions {
  bool recalibrate = false;  // measure again even where the trace exists
  bool quiet = false;        // no progress lines on stderr
  std::function<double()> now;  // the clock of the timing (empty: calibration_clock_seconds)
};

// For resolve_experiment. measured_compute_plan: a run of dist "measured" draws whole
// steps (per = step) and its compute_model names the trace it will replay; `notes` gains
// (once per trace) what `asgdsim run` will do for it. warn_of_fixed_compute_in_sweeps: a
// sweep over model.* or the batch size while cluster.compute is a fixed draw (neither
// "flops" nor "measured") adds a warning to exp.warnings: compute then ignores the model.
void measured_compute_plan(RunSpec& run, std::vector<std::string>& notes);
void warn_of_fixed_compute_in_sweeps(const std::vector<std::pair<std::string, json>>& sweep, Experiment& exp);

// The experiment with every run of cluster.compute "measured" bound to its trace:
// exp_dir/calibration/<name>.trace (measured_trace_name) is made first where it is missing
// (or with recalibrate), atomically, under a lock of its own (shards share the folder);
// an existing one is read as it is. Each such run's settings then replay it (compute_dist
// dist "trace" with the file; compute_model says which trace, machine, median) and its
// cost is checked as validation checks any run's. A malformed trace throws DataError
// naming the file; a run the trace makes too costly, ConfigError.
Experiment with_measured_compute(const Experiment& exp, const std::string& exp_dir, const CalibrationOptions& opts);

// The indexes of the runs with_measured_compute will measure a trace for (missing, or
// every measured run's with recalibrate): their earlier results replayed another trace.
std::set<size_t> runs_measured_anew(const Experiment& exp, const std::string& exp_dir, bool recalibrate);

}  // namespace asgd
