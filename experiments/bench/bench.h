// experiments/bench/bench.h — `asgdsim bench`: fixed workloads that measure the simulator
// against the machine's limit. For each workload it times a simulated run (the real
// Simulation, engine, worker pool and parameter store, built from a validated config)
// and the "bare limit": the same number of loss+gradient evaluations and SGD updates,
// with the same kernels (Model::loss_grad, ops::sgd_step) on the same number of
// threads, called directly with no scheduler, events or snapshots. The same number of
// threads: the simulating thread is one of the simulated side's (a pool with
// caller_computes, as runs have), so neither side has more threads than the other. Both are measured in
// the same process, interleaved and repeated; the ratio bare/sim time is what the
// targets and the CI floor are about (never an absolute time).
// Not here: run folders (nothing is written but the optional --json file).
#pragma once
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "kernels/exec.h"
#include "kernels/model.h"
#include "sim/data/dataset.h"  // kFashionMnistDir

namespace asgd {

struct BenchOptions {
  int threads = 0;                // worker threads of both sides; 0: every core
  bool quick = false;             // smaller workloads (seconds instead of a minute)
  std::vector<std::string> only;  // workload letters a..g; empty: all
  std::string json_path;          // also write the JSON lines to this file
  std::string data_dir = kFashionMnistDir;
  int repeats = 0;            // timed (sim, bare) pairs; 0: 3 (quick: 3 as well)
  int batched_gradients = 1;  // a, b, f: the runs' batched_gradients; the bare side
                              // batches as many per loss_grad_batch call
};

// `asgdsim bench` arguments (argv[0] is "bench"); throws std::invalid_argument on bad usage.
BenchOptions parse_bench_options(int argc, char** argv);

// What one gradient job asks of the backend (kernels/exec.h, LaunchCounts): a warm
// Model::loss_grad call (k = 1) or Model::loss_grad_batch call of k requests, each of
// `batch` ids from a SampleStream over the first train_size samples, on a fresh context on
// a thread of its own that runs kernels as a pool thread does; and one SGD step as the
// bare loop makes it (a model with a row table: over the first request's touched rows and
// the dense part). The counts do not depend on the data's values, only on the shapes.
struct JobLaunches {
  size_t k = 0;                    // gradients in the counted call (0: not counted)
  LaunchCounts gradients;          // the call that computes the k gradients
  LaunchCounts update;             // one SGD step
  nlohmann::json to_json() const;  // per gradient (gradients / k) and per update
};
JobLaunches count_job_launches(const Model& model, const DeviceDataset* train, size_t train_size, size_t batch,
                               size_t k);

// One workload's figures. Rates are per wall second; seconds are medians over repeats.
struct BenchResult {
  std::string workload;  // "a", "b", ...
  std::string name;      // e.g. "mlp_async"
  std::string engine;
  std::string model;
  int workers = 0;
  int threads = 0;
  int batched_gradients = 1;                         // gradients per loss_grad_batch call, on both sides (a, b, f)
  uint64_t gradients = 0;                            // per timed simulated run (bare: the same number)
  uint64_t updates = 0;                              // SGD updates per timed run (bare: the same number)
  double sim_seconds = 0, bare_seconds = 0;          // medians
  double sim_cpu_seconds = 0, bare_cpu_seconds = 0;  // medians: CPU time of all threads
  double ratio = 0;            // median over repeats of bare_seconds / sim_seconds (1 = at the limit)
  double cpu_ratio = 0;        // bare_cpu_seconds / sim_cpu_seconds: the same, in CPU time (less
                               // sensitive to other load on the machine; spinning counts)
  std::vector<double> ratios;  // each repeat's
  std::string rate_unit;       // "updates/s" or "gradients/s": what sim_rate / bare_rate count
  double sim_rate = 0, bare_rate = 0;
  // The model's floating-point operations per gradient, Model::flops_per_sample() x the
  // batch (GEMM multiply-adds counted as 2; 0 for the quadratic). The JSON adds
  // sim_gflops and bare_gflops = flops_per_gradient x gradients / seconds / 1e9: over a
  // device's peak, the fraction of it each side reaches.
  double flops_per_gradient = 0;
  // workload d: memory
  double peak_rss_mb = -1;              // peak resident set of the process that ran it
  uint64_t param_buffers = 0;           // parameter buffers allocated during the run
  uint64_t max_versions_in_flight = 0;  // the bound: workers + 1 versions at most
  // workload e: evaluation cost
  double eval_fraction = -1;                // share of a run's wall time spent evaluating
  double eval_fraction_by_difference = -1;  // 1 - ratio of the runs with and without it
  uint64_t evaluations = 0;                 // evaluations in the run
  double eval_seconds = 0;                  // one evaluation (median)
  // a, b, f, g: what a gradient (a batch of batched_gradients) and an update ask of the
  // backend, counted outside the timings
  JobLaunches launches;
  std::string note;
  nlohmann::json to_json() const;
};

// The MLP workloads (a, b): MLP 784-128-10, batch 32, Fashion-MNIST (first train_limit
// training images), `engine` with `workers` workers, exponential compute times,
// `gradients` gradients per timed run, evaluation only at the start and the end.
// batched_gradients > 1: the run gathers its jobs so (RunSettings::batched_gradients)
// and each bare thread computes as many per Model::loss_grad_batch call.
BenchResult bench_mlp(const std::string& workload, const std::string& engine, int workers, uint64_t gradients,
                      int threads, int repeats, const std::string& data_dir, size_t train_limit,
                      int batched_gradients = 1);

// f: the LeNet-5 CNN (model cnn, arch lenet5), batch 32, Fashion-MNIST (first train_limit
// training images), `engine` with `workers` workers, as the MLP workloads.
BenchResult bench_cnn(const std::string& engine, int workers, uint64_t gradients, int threads, int repeats,
                      const std::string& data_dir, size_t train_limit);

// c: the event core: async on a 1-dim quadratic with `workers` workers, `updates` updates.
BenchResult bench_event_core(int workers, uint64_t updates, int threads, int repeats);

// g: sparse_logistic (100000 features, 20 one-hot fields, Zipf 1.1, batch 32), async with
// `workers` workers, sparse messages on a 250 MB/s link, against a bare loop of the same
// sparse gradients and SGD steps.
BenchResult bench_sparse(int workers, uint64_t gradients, int threads, int repeats);

// h: a population (MLP as the MLP workloads; `clients` clients with lognormal speeds on
// `slots` slots, FedBuff k 10, 5 local steps a client job) against a bare loop of the same
// gradients and a local SGD step each.
BenchResult bench_population(int clients, int slots, uint64_t gradients, int threads, int repeats,
                             const std::string& data_dir, size_t train_limit);

// The eval schedule workload e charges (that of experiments/configs/default.json).
nlohmann::json bench_default_eval_schedule();

// Runs the selected workloads, printing JSON lines as they finish and a table at the
// end to `out`. Returns the exit code (0).
int run_bench(const BenchOptions& opts, std::ostream& out);

}  // namespace asgd
