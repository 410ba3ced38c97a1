// experiments/cluster/cluster.cpp — `asgdsim cluster` (see cluster.h for what carries over from
// the config): which runs it can make, the run folders and index.csv on rank 0, and the
// order of runs and exit codes across the ranks. Each run is one engine of engines/ on
// MpiRuntime (mpi_runtime.h: the server rank drives it, the worker ranks compute); no
// update rule lives here.
#include "experiments/cluster/cluster.h"
#include <algorithm>
#include <set>
#include <cmath>
#include <iostream>
#include "engines/engine_registry.h"
#include "experiments/cluster/mpi_runtime.h"
#include "experiments/run/experiment_folder.h"
#include "experiments/run/run_parts.h"
#include "experiments/config/resources.h"
#include "experiments/run/runner.h"
#include "sim/run/atomic_file.h"
#include "sim/base/interrupt.h"
#include "sim/run/recorder.h"
#include "sim/core/simulation.h"  // RunOutcome
#include "sim/net/catalog.h"

namespace asgd {

std::string cluster_experiment_name(const Experiment& exp) { return experiment_name(exp) + "-cluster"; }

namespace {

// What `asgdsim cluster` cannot do with a run's config, each with its JSON path; checked
// on every rank before anything is sent, so all ranks refuse alike.
void check_supported(const RunSpec& run, int workers_available) {
  const RunSettings& s = run.settings;
  Validator v;
  const int workers = s.workers;
  if (workers != workers_available)
    v.error("cluster.workers", std::to_string(workers) + ", but the MPI job has " + std::to_string(workers_available) +
                                   " worker rank(s): start it with mpirun -np " + std::to_string(workers + 1) +
                                   " (rank 0 is the server)");
  if (s.staleness != StalenessMode::Emergent)
    v.error("staleness.mode", json(word_of(staleness_mode_words(), s.staleness)).dump() +
                                  ": forced staleness is a simulator feature; a real run measures the staleness it "
                                  "gets (use emergent)");
  if (s.precision != Precision::Fp32)
    v.error("cluster.network.precision", json(word_of(precision_words(), s.precision)).dump() +
                                             ": real transfers are fp32 (16-bit transfers are simulated only)");
  if (s.compression.type != CompressionSpec::Type::None)
    v.error("cluster.network.compression.type",
            json(compression_type_name(s.compression.type)).dump() +
                ": real transfers are uncompressed (compression is simulated only)");
  if (!find_topology_type(s.topology.type)->real)  // the real machines' links are what they are
    v.error("cluster.topology.type", json(s.topology.type).dump() +
                                         ": its links are simulated only: a real run uses "
                                         "the machines mpirun starts (remove cluster.topology)");
  run.bound_engine->check_real(v);
  if (s.clients.count > 0)
    v.error("clients.count", std::to_string(s.clients.count) +
                                 ": a population of clients is simulated only (a real "
                                 "worker rank would change its data, speed and links per "
                                 "client job); use 0");
  if (s.failure_rate > 0)
    v.error("cluster.failures.rate", "failures at a rate are simulated only (real failures: failures.events)");
  if (s.compute_model.value("dist", "") == "measured")  // no calibration runs here: the first step would fail
    v.error("cluster.compute.dist",
            "\"measured\" replays a trace that `asgdsim run` measures before its runs; "
            "asgdsim cluster does not calibrate (use another dist, or dist \"trace\" with "
            "the file an asgdsim run made: OUT/<name>/calibration/*.trace)");
  for (size_t i = 0; i < s.failures.size(); ++i)
    if (s.failures[i].down_for != kNever)
      v.error("cluster.failures.events[" + std::to_string(i) + "].down_for",
              "a real worker that died stays dead (set down_for to 0)");
  if (!v.ok()) throw ConfigError(run.run_id + " (asgdsim cluster)", v.issues());
}

}  // namespace

#if !ASGD_WITH_MPI

int run_cluster(const Experiment& exp, const ClusterOptions&, const MpiEnv&) {
  (void)check_supported;
  throw std::runtime_error(
      "asgdsim cluster needs MPI: this build has none. Install Open MPI (Debian: libopenmpi-dev openmpi-bin), "
      "configure with -DASGD_MPI=ON (scripts/test.sh does both), and start it with mpirun -np N+1");
}

#else  // ASGD_WITH_MPI

namespace {

using namespace wire;

// The exit code main() gives `error` (0: none), for the workers to leave with.
int exit_code_of(std::exception_ptr error, bool interrupted) {
  if (!error) return interrupted ? 130 : 0;
  return asgd::exit_code_of(error);
}

int serve(const Experiment& exp, const ClusterOptions& opts, const MpiEnv& mpi, std::vector<bool>& dead);

}  // namespace

int run_cluster(const Experiment& exp, const ClusterOptions& opts, const MpiEnv& mpi) {
  if (!mpi.active() || mpi.size() < 2)
    throw std::runtime_error("asgdsim cluster runs under MPI with one server and N workers: mpirun -np N+1 " +
                             std::string("asgdsim cluster CONFIG (") +
                             (mpi.active() ? "this job has 1 rank" : "this process was not started by mpirun") + ")");
  const int workers = mpi.size() - 1;
  for (const auto& run : exp.runs) check_supported(run, workers);  // every rank refuses alike
  kernels_use_one_thread_here();  // one process per worker: parallelism comes from the ranks

  std::shared_ptr<LoadedData> cache;
  const size_t total = exp.runs.size();

  if (mpi.rank() != 0) {
    ServerWatch watch;
    watch.mpi = &mpi;
    g_watch = &watch;
    Message done;  // the server's verdict: the exit code of the whole job
    for (size_t k = 0; k < total && Kind(done.h.kind) != Kind::Done; ++k) {
      const RunSpec& run = exp.runs[k];
      watch.timeout = run.settings.real_worker_timeout;
      RunParts parts;
      try {
        parts = rank_parts(run, run.settings, exp.base_dir, cache);
      } catch (const std::exception& e) {
        worker_cannot_run(std::string(e.what()) + " (on host " + host_name() + ")", done);
        continue;
      }
      WorkerProcess(run, parts, mpi.rank() - 1).run(done);
    }
    std::vector<char> buf;
    while (Kind(done.h.kind) != Kind::Done) receive(0, kTagToWorker, done, buf, -1);
    g_watch = nullptr;
    if (g_peer_lost || done.h.steps) mpi.note_peer_lost();
    return int(done.h.tag);
  }

  // ---- rank 0: the server, and the run folders. Whatever happens, every live worker
  // gets Done with the exit code: none is left waiting for a server that has gone.
  std::vector<bool> dead(size_t(workers) + 1, false);  // by rank: died in an earlier run
  const double timeout = (exp.runs.empty() ? default_settings() : exp.runs[0].settings).real_worker_timeout;
  try {
    int code = serve(exp, opts, mpi, dead);
    tell_workers(workers, dead, timeout, Kind::Done, code);
    if (std::count(dead.begin(), dead.end(), true) > 0) mpi.note_peer_lost();
    return code;
  } catch (...) {
    tell_workers(workers, dead, timeout, Kind::Done, exit_code_of(std::current_exception(), false));
    if (std::count(dead.begin(), dead.end(), true) > 0) mpi.note_peer_lost();
    throw;
  }
}

namespace {
// The run's status note, with what asgdsim cluster ignored of its config.
std::string cluster_note(const RunSpec& run, const RunOutcome& outcome, const MpiRuntime& server) {
  std::string note = outcome.note;
  for (const auto& n : server.notes())
    if (note.find(n) == std::string::npos) note += "; " + n;
  const NetworkSpec& net = run.settings.network;
  if (net.latency > 0 || net.bandwidth > 0 || net.shards > 1 || net.worker_bandwidth > 0)
    note += "; cluster.network ignored: the transfers were real";
  if (net.message_bytes > 0)  // (the counted messages' sizes: docs/cluster.md, "Messages")
    note += "; cluster.network.message_bytes only sized the counted messages";
  if (run.settings.server_update_seconds > 0 || run.settings.server_send_seconds > 0)
    note += "; cluster.server ignored: the server's updates and sends took their real time";
  return note;
}

// What serve() carries from one run to the next.
struct ServeState {
  std::vector<bool>& dead;            // worker ranks that died (by rank)
  std::shared_ptr<LoadedData> cache;  // data sets read once for the runs that share them
  std::exception_ptr first_error;
  std::string first_error_run;
};

// One run of serve(): its folder, the server's run on the workers, its files. Returns its
// status ("failed" when it could not be made: state.first_error says why).
std::string serve_run(const Experiment& exp, const RunSpec& run, const ExperimentFolder& folder, const std::string& tag,
                      const json& cfg, const ClusterOptions& opts, const MpiEnv& mpi, ServeState& state) {
  const int workers = mpi.size() - 1;
  RunSettings s = run.settings;
  s.trace = s.trace || opts.trace;
  RunParts parts;
  std::string dir;
  try {
    parts = rank_parts(run, s, exp.base_dir, state.cache);
    dir = folder.open_run(run);
    write_file_atomic(dir + "/config.json", cfg.dump(2) + "\n");
  } catch (...) {
    tell_workers(workers, state.dead, run.settings.real_worker_timeout, Kind::Stop);
    state.first_error = std::current_exception();
    state.first_error_run = run.run_id;
    return "failed";
  }
  json meta = run_meta(opts.command_line);
  meta["mode"] = "cluster";
  meta["ranks"] = mpi.size();
  write_file_atomic(dir + "/meta.json", meta.dump(2) + "\n");

  Recorder recorder(s.trace);
  MpiRuntime server(run, parts, recorder);
  Engine* engine = parts.engine.get();
  RunOutcome outcome;
  try {
    outcome = server.run(*engine);
  } catch (...) {
    server.abandon();
    for (int r : server.dead_ranks()) state.dead[size_t(r)] = true;
    state.first_error = std::current_exception();
    state.first_error_run = run.run_id;
    return "failed";
  }
  for (int r : server.dead_ranks()) state.dead[size_t(r)] = true;
  const std::string note = cluster_note(run, outcome, server);

  const MetricsRow& last = recorder.rows().back();
  json summary = summary_json(run, outcome, last, engine->describe(), note, sim_to_seconds(outcome.time));
  summary["mode"] = "cluster";
  write_run_results(dir, recorder, outcome, s.workers, meta, summary);
  if (!opts.quiet) {
    std::string text = tag + ": " + outcome.status + " (" + note + "), train_loss " + format_number(last.train_loss);
    if (!std::isnan(last.test_accuracy)) text += ", test_accuracy " + format_number(last.test_accuracy);
    text += ", " + format_number(std::round(sim_to_seconds(outcome.time) * 100) / 100) + " s wall, " +
            std::to_string(outcome.updates) + " updates, mean staleness " + format_number(outcome.staleness_mean);
    std::cout << text << "\n" << std::flush;
  }
  if (outcome.status == "failed" && !state.first_error) {
    state.first_error =
        server.mismatch()
            ? std::make_exception_ptr(RankMismatch("the ranks compute different problems: " + server.failure()))
            : std::make_exception_ptr(std::runtime_error(server.failure()));
    state.first_error_run = run.run_id;
  }
  return outcome.status;
}

// Rank 0's part of run_cluster: the runs one after another, their folders and index.csv.
int serve(const Experiment& exp, const ClusterOptions& opts, const MpiEnv& mpi, std::vector<bool>& dead) {
  const int workers = mpi.size() - 1;
  const std::string name = cluster_experiment_name(exp);
  const size_t total = exp.runs.size();
  bool interrupted = false;
  // The folder is this process's until it returns, as for `asgdsim run`: no other asgdsim
  // writes into it meanwhile.
  ExperimentFolder folder(opts.out_dir, name,
                          {ExperimentLock::Mode::Exclusive, false, opts.command_line, opts.quiet, ""});
  const std::string& exp_dir = folder.path();
  Experiment named = exp;
  named.resolved["name"] = name;
  // Each run's config.json: its config, marked as this cluster experiment's.
  std::vector<json> configs;
  for (const RunSpec& run : exp.runs) {
    configs.push_back(run.config);
    configs.back()["run"]["experiment"] = name;
    configs.back()["run"]["mode"] = "cluster";
  }
  // Everything is checked before anything is written, as `asgdsim run` checks it: a refusal
  // leaves every file as it was, experiment.json included.
  RunPlan plan = folder.plan(exp, configs, opts.replace, 0, 1);
  folder.prepare(named, plan, 0, 1, opts.replace.supersede, true);
  std::vector<bool> to_make(total, false);  // by run: not done earlier
  for (size_t k : plan.todo) to_make[k] = true;
  ServeState state{dead, nullptr, nullptr, ""};
  for (size_t k = 0; k < total; ++k) {
    const RunSpec& run = exp.runs[k];
    const std::string tag = run_tag(exp, k);
    const json& cfg = configs[k];
    bool skip = state.first_error || interrupted || interrupt_requested();
    if (!skip && !plan.lines[k].empty() && !opts.quiet) std::cout << plan.lines[k] << "\n" << std::flush;
    skip = skip || !to_make[k];
    if (!skip && std::count(dead.begin(), dead.end(), true) > 0) {
      std::string ranks;
      for (int r = 1; r <= workers; ++r)
        if (dead[size_t(r)]) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      state.first_error = std::make_exception_ptr(std::runtime_error(
          "worker rank(s) " + ranks + " died in an earlier run; cluster.workers needs all " + std::to_string(workers)));
      state.first_error_run = run.run_id;
      skip = true;
    }
    if (skip) {
      tell_workers(workers, dead, run.settings.real_worker_timeout, Kind::Stop);
      continue;
    }

    const std::string status = serve_run(exp, run, folder, tag, cfg, opts, mpi, state);
    if (status == "interrupted") interrupted = true;
  }
  if (std::count(dead.begin(), dead.end(), true) > 0) mpi.note_peer_lost();
  folder.write_index(named);
  if (state.first_error) rethrow_naming_run(state.first_error, state.first_error_run);
  std::cout << "results: " << exp_dir << "\n";
  return interrupted ? 130 : 0;
}
}  // namespace

#endif  // ASGD_WITH_MPI

}  // namespace asgd
