// experiments/run/calibration.h — the model's real gradient, timed on this machine. Two
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
// `seconds`, whichever comes first, but never fewer than `min_steps` (at most `steps`;
// at least one).

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
                                        const CalibrationBudget& budget, const std::function<double()>& now = {});

// The calibration cache: traces measured by any experiment on this machine, so that
// another experiment (another output folder) replays the same measurement instead of
// timing again. $ASGDSIM_CACHE_DIR, else $XDG_CACHE_HOME/asgdsim, else ~/.cache/asgdsim;
// "" (none) when ASGDSIM_CACHE_DIR is "off" or empty, or no home is known. Traces lie in its calibration/
// folder; deleting it (or a file in it) clears the cache.
std::string calibration_cache_dir();

struct CalibrationOptions {
  bool recalibrate = false;     // measure again even where the trace exists (in the folder or the cache)
  bool quiet = false;           // no progress lines on stderr
  std::function<double()> now;  // the clock of the timing (empty: calibration_clock_seconds)
};

// The experiment with every run of cluster.compute "flops" whose model is a PyTorch module
// resolved with the module's count, and every run of "measured" resolved to (both in their
// distribution's entry, BoundDistribution::resolve, with the count or trace in the view)
// its trace: exp_dir/calibration/<name>.trace (measured_trace_name) is made first where it
// is missing (or with recalibrate), atomically, under a lock of its own (shards share the
// folder): copied from the calibration cache where the cache holds a trace of the same
// key (the model's config and code_identity, data, batch, the budget, the clock, the
// machine and the build: backend, GEMM core, commit), else measured and then stored in
// the cache too; an existing one is read as it is. Each such run's settings then replay it
// (compute_dist: dist "trace" with the file; compute_model says which trace, machine, median) and its
// cost is checked as validation checks any run's. A malformed trace throws DataError
// naming the file; a run the trace makes too costly, ConfigError.
Experiment with_measured_compute(const Experiment& exp, const std::string& exp_dir, const CalibrationOptions& opts);

// The indexes of the runs with_measured_compute will measure a trace for (missing, or
// every measured run's with recalibrate): their earlier results replayed another trace.
std::set<size_t> runs_measured_anew(const Experiment& exp, const std::string& exp_dir, bool recalibrate);

}  // namespace asgd
