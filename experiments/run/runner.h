// experiments/run/runner.h — runs an experiment's runs and writes the run folders:
// OUT/<name>/<run_id>/{config.json, meta.json, metrics.csv, staleness.csv, workers.csv,
// trace.json, summary.json (last)} and OUT/<name>/index.csv, holding OUT/<name>/.lock
// (ExperimentLock) throughout. Resumes: a run whose summary.json says completed,
// stalled or diverged (for the same config), with its result files complete, is skipped unless
// --rerun; run folders of another config are refused unless --supersede moves them aside.
// A run that fails gets a summary.json with status "failed". With
// jobs > 1, that many runs go side by side, each on its own worker pool; the files
// are the same bytes as with jobs = 1 (wall-clock fields aside). With shards > 1, several
// processes (machines, MPI ranks) share one experiment folder, each making its share of
// the runs; the files are again the same bytes.
#pragma once
#include <cstdint>
#include <exception>
#include <functional>
#include <string>
#include "experiments/config/config.h"
#include "experiments/run/replace_policy.h"
#include "sim/run/settings.h"

namespace asgd {

// A run's progress as it happens, for a caller that follows the runs (the Python package's
// progress=): one event per metrics row as the row is recorded, then one when the run has
// ended (`status` set, the last row's values). Host side only: it observes, it charges no
// virtual time and changes no file.
struct RunProgress {
  std::string run_id;
  size_t run = 0, runs = 0;  // run index and the experiment's run count
  double fraction = 0;       // of the run's stop budget (as the terminal's progress line)
  double time = 0, epoch = 0, train_loss = 0, test_loss = 0, test_accuracy = 0;  // the row's
  uint64_t updates = 0;
  std::string status;  // empty while the run goes on
};

// How often (wall seconds) a run's state is checkpointed by default (--checkpoint-every).
inline constexpr double kDefaultCheckpointSeconds = 600;

struct RunnerOptions {
  std::string out_dir = "runs";
  int threads = 0;  // 0: hardware concurrency
  int jobs = 1;     // runs side by side; each gets threads / jobs threads (at least 1)
  bool quiet = false;
  bool trace = false;        // force trace.json for every run
  ReplacePolicy replace;     // --rerun, --supersede
  bool recalibrate = false;  // cluster.compute "measured": measure the traces again (and re-make their runs)
  bool wait = false;         // wait for the experiment folder's lock instead of refusing
  // This process makes only the runs k with k % shards == shard (--shard I/K, or one MPI
  // rank of K); the others are left to other processes sharing the experiment folder.
  int shard = 0;
  int shards = 1;
  bool write_index = true;  // false: the caller writes index.csv once every shard is done
  // Checkpoints (docs/reliability.md, "Checkpoints"): a run's whole state goes to
  // RUN/checkpoint.bin every this many wall seconds and when it is interrupted, and a
  // run found with one resumes from it; 0: none written or read.
  double checkpoint_every = kDefaultCheckpointSeconds;
  // Testing checkpoints: each run stops as on SIGINT when it reaches this many updates
  // (from its start, so a run resumed past it goes on); 0: never.
  uint64_t interrupt_after_updates = 0;
  std::string command_line;
  // Called for every RunProgress, from the thread making the run (runs side by side call
  // it from their own threads); an exception it throws fails that run.
  std::function<void(const RunProgress&)> on_progress;
};

// --threads and --jobs above this are refused: far past any machine's cores, and each
// thread reserves a stack.
inline constexpr int kMaxThreads = 1024;
// A count option's text ("12" for `option` "--threads") as an int in [lo, hi]; a UsageError
// naming the option, its value (shortened) and the range otherwise.
int parse_count(const std::string& option, const std::string& text, int lo, int hi, const std::string& note = "");
// Sets ro.threads (0..kMaxThreads, 0 = the cores) and ro.jobs (1..kMaxThreads) from their
// texts, as `asgdsim run` reads --threads and --jobs; the Python package's run() and
// `python3 -m asgdsim run` read theirs here too, naming them `threads_name`, `jobs_name`.
void set_run_counts(RunnerOptions& ro, const std::string& threads, const std::string& jobs,
                    const std::string& threads_name = "--threads", const std::string& jobs_name = "--jobs");

// Returns the process exit code: 0 all runs ended (completed, stalled or diverged), 130
// interrupted (runs under way end as interrupted, none new starts). Checks every run
// folder before writing anything; a folder holding another config, or an experiment
// folder another process holds, throws IoError with nothing written. A run that fails
// stops new runs from starting; its error is rethrown (same type) with its run id in
// front, after the runs under way end and index.csv is written.
int run_experiment(const Experiment& exp, const RunnerOptions& opts);

// Rethrows a run's error with its run id in front, keeping the type main() maps to an
// exit code (invalid data and I/O problems: 2; anything else: 1). Bad data keeps the
// original nested (std::nested_exception): the Python package tells a broken model
// contract (its own DataError subclass) from other bad data by it. (asgdsim run and
// asgdsim cluster.)
[[noreturn]] void rethrow_naming_run(const std::exception_ptr& error, const std::string& run_id);

// The experiment's progress line on a terminal: "runs 3/12 done  31%  ETA 2m05s". `work`
// is the runs done plus the running runs' fractions (0..total); the ETA assumes the rest
// goes at the rate so far, and is left out until 1 % of the work is done.
std::string experiment_progress(size_t done, size_t total, double work, double elapsed_seconds);

// `asgdsim index OUT/NAME`: rebuilds exp_dir/index.csv from the run folders present (after
// the folders that shards made on machines' own disks are copied together; docs/slurm.md),
// with the runner's rows (index_csv) and the runner's write (write_index: atomic, under
// .index.lock), taking exp_dir/.lock shared, as a shard does (a running `asgdsim run`
// without --shard holds it: refused, or with `wait` waited for). The experiment is exp_dir/experiment.json; its run
// folders are the sub-folders with a config.json, listed in the order the runner lists
// its runs (engine, sweep point, repeat). A run without a folder here has no row (the
// runner's own index lists it as pending). Throws IoError, having written nothing, for a
// folder that is no experiment folder (no readable experiment.json, or no run folder) or
// that holds run folders experiment.json does not make (moved aside by run --supersede).
// Returns the runs listed (0: interrupted while waiting, nothing written); prints what it
// wrote (unless quiet).
size_t rebuild_index(const std::string& exp_dir, const std::string& command_line, bool quiet, bool wait);

}  // namespace asgd
