// experiments/cluster/cluster.h — `asgdsim cluster`: the engines of engines/ run for real on MPI
// processes. Rank 0 runs the engine on MpiRuntime (mpi_runtime.h) and is the parameter
// server; ranks 1..N are the N workers, computing with the same kernels, models and data
// as the simulator. Time is wall-clock time. Each run's folder has the files of a
// simulated run (time in wall seconds, staleness measured) in OUT/<name>-cluster/<run_id>/,
// so analysis/ draws simulated and real runs of one config side by side.
//
// What carries over from the config, and what does not (docs/cluster.md):
//   engines     every engine, and the single-replica warm-up
//   data, model, train (lr schedules, momentum, aggregate), stop, eval: as simulated
//   cluster.compute, speeds, stragglers: replayed only with real.delay_scale > 0 — a
//               worker's step then lasts at least delay_scale x the drawn compute time
//               (it sleeps for what the computation left of it)
//   cluster.failures.events: worker `worker` really dies (SIGKILL) `at` wall seconds in;
//               down_for and failure rates are refused
//   cluster.network: the real transport is used; latency/bandwidth/shards are ignored
//               (said in summary.json's note); 16-bit precision and compression are refused
//   staleness modes other than emergent, cluster.topology, engine.comm other than ps: refused
// Sample ids come from the run's one sample stream on the server, in the order the engine
// launches steps, as in the simulator.
// Dead workers: a worker that sends nothing for real.worker_timeout seconds after it was
// given work is declared dead; the engine goes on without it as after a simulated failure.
#pragma once
#include <string>
#include "experiments/config/config.h"
#include "experiments/cluster/mpi_env.h"
#include "experiments/run/replace_policy.h"

namespace asgd {

struct ClusterOptions {
  std::string out_dir = "runs";
  bool quiet = false;
  ReplacePolicy replace;  // --rerun, --supersede, as for asgdsim run
  bool trace = false;
  std::string command_line;
};

// The experiment folder name for cluster runs of `exp`: "<name>-cluster".
std::string cluster_experiment_name(const Experiment& exp);

// Makes every run of `exp`, one after another, on all ranks of the MPI job (called on
// every rank). Returns the exit code: 0 runs ended (completed, stalled or diverged), 130
// interrupted; throws (on rank 0) when a run fails, after its folder says so.
int run_cluster(const Experiment& exp, const ClusterOptions& opts, const MpiEnv& mpi);

}  // namespace asgd
