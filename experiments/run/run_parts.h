// experiments/run/run_parts.h — the pieces `asgdsim run` (experiments/run/runner.cpp) and
// `asgdsim cluster` (experiments/cluster/cluster.cpp) share: data, model and compute-time model
// built from a run's resolved config, and the experiment's index.csv.
#pragma once
#include "sim/models/catalog.h"
#include <memory>
#include <set>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "experiments/config/config.h"
#include "experiments/run/replace_policy.h"
#include "kernels/model.h"
#include "sim/timing/compute_time.h"
#include "sim/data/dataset.h"
#include "sim/run/recorder.h"
#include "sim/run/settings.h"
#include "sim/core/simulation.h"
#include "sim/run/file_lock.h"

namespace asgd {

using nlohmann::json;

// A run's data, on the host and in backend memory. Of a sparse set the host copy keeps
// only its sizes once uploaded (the backend's copy has its own host index).
struct LoadedData {
  json key;
  DataSplit host;
  DeviceDataset train, test;
};

std::string iso_now();  // UTC, ISO 8601, to the second
json finite_or_null(double v);
// Parses the JSON file at `path` into out; false if it is missing or not JSON.
bool read_json(const std::string& path, json& out);

// Runs with equal keys share one loaded data set (BoundData::share_key: the data object, and
// the seed for sets drawn from it). load_data: the run's bound data (RunSpec::bound_data,
// sim/data/catalog.h) loads itself; a set without samples (layout None) loads nothing.
json data_key(const RunSpec& run);
std::shared_ptr<LoadedData> load_data(const RunSpec& run, const std::string& base_dir);
// The run's model (its bound model, RunSpec::bound_model: sim/models/catalog.h) for the
// loaded data.
std::unique_ptr<Model> build_model(const BoundModel& model, const LoadedData& data, const std::string& base_dir = "");
// The run's compute-time model: cluster.compute's distribution, per and overhead, the
// workers' speeds (a distribution is drawn once per worker) and the stragglers.
ComputeTimeModel build_compute_model(const RunSettings& s, const std::string& base_dir);

// A run's parts, built from its spec the one way: its settings (the caller's copy: the runner
// may turn tracing on), data, model (a PyTorch module's memory is checked once it is built:
// its size is known only then), compute-time model and engine. simulation() makes the
// Simulation over them; the parts must outlive it.
struct RunParts {
  RunSettings settings;
  std::shared_ptr<LoadedData> data;
  std::unique_ptr<Model> model;
  std::unique_ptr<ComputeTimeModel> compute;
  std::unique_ptr<Engine> engine;
  std::unique_ptr<Simulation> simulation(WorkerPool& pool, Recorder& recorder) const;
};
// `data`: the run's loaded data (a cache's), or null to load it here.
RunParts make_run_parts(const RunSpec& run, RunSettings settings, std::shared_ptr<LoadedData> data,
                        const std::string& base_dir);

std::string host_name();
// meta.json's common part: version, git commit and state, backend, build type, the
// command line, the host, and the start time (UTC).
json run_meta(const std::string& command_line);
// Writes a finished run's files into dir: metrics.csv, staleness.csv, workers.csv,
// trace.json (when the recorder traced), meta.json with its "end", and summary.json last,
// so that the folder looks complete only once everything is there.
void write_run_results(const std::string& dir, const Recorder& recorder, const RunOutcome& outcome, int workers,
                       json& meta, const json& summary);

// A run's summary.json: status, note, what it is, final metrics (`last` is its last
// metrics row), counts, staleness, iteration time (sync family) and wall seconds.
// The workers' compute time over the run's, averaged over the workers (summary.json
// compute_utilisation): 1 when no worker ever waits or communicates outside its compute.
double compute_utilisation(const RunOutcome& outcome);
// Bytes sent to and from the workers (every message and collective piece), per worker and
// second of the run (summary.json messages.mean_bandwidth).
double mean_bandwidth(const RunOutcome& outcome);
// partition.csv holds one row per data owner up to this many (a population's clients);
// beyond it summary.json's clients.partition alone summarises the parts.
inline constexpr size_t kPartitionRows = 10000;
// A population's summary.json member "clients": its size, draws, distinct clients, and the
// spread of its parts (samples and classes per client: min, median, max).
json clients_json(const RunOutcome& outcome);
json summary_json(const RunSpec& run, const RunOutcome& outcome, const MetricsRow& last, const json& engine_config,
                  const std::string& note, double wall_seconds);

// The summary.json of a run that ended without results: status "failed" (an exception
// ended it; "error" says what) or "interrupted" (before its simulation started), so that
// the folder is marked (index.csv says so) and a resume re-runs it.
json ended_summary_json(const RunSpec& run, const std::string& status, const std::string& why);

// The files a run folder's results consist of, summary.json first (removed first, so
// that the folder never looks complete while they are replaced).
const std::vector<std::string>& run_result_files();
// Links inside the output tree are never followed (docs/reliability.md): OUT/<name>/, a
// run folder and the lock files must not be symbolic links (--out itself may be one).
// refuse_link throws IoError naming `path` when it is a link; make_experiment_folder
// makes OUT/<name>/ (and OUT) unless it is one.
void refuse_link(const std::string& path);
void make_experiment_folder(const std::string& exp_dir);
// Before a run (re-)starts in `dir`: removes its old result files and the temporary
// files an earlier process left there (killed between writing and renaming). Refuses a
// `dir` that is a link (IoError) before removing anything.
void clear_run_folder(const std::string& dir);
// What a folder's config.json (or experiment.json) holds against what this config makes:
// "train.lr: 0.1 there, 0.05 now; model.hidden[0]: ... (and 3 more)", at most `limit`
// keys, for the message that refuses to overwrite it.
std::string config_differences(const json& there, const json& now, size_t limit = 5);

// Why the results in `dir` are not those of a finished run of `config` whose summary.json
// is `summary` (a file missing, metrics.csv not ending at the summary's update count, a
// run id that differs, a record of either file that does not read back, naming its key,
// ...), or "" when they are complete.
std::string incomplete_results(const std::string& dir, const json& config, const json& summary);
// A status a run ends with when it has results (completed, stalled, diverged): its folder
// is then checked with incomplete_results, by `asgdsim run` (skip it?) and by index.csv
// ("incomplete" when the check fails) alike.
bool ended_with_results(const std::string& status);

// How progress lines name run k of `exp`: "[k+1/N] <run_id>".
std::string run_tag(const Experiment& exp, size_t k);

// What an earlier process left in a run's folder `dir`, checked before anything is
// written. A folder holding a run of another config throws IoError (naming --supersede)
// unless `policy.supersede`; then `superseded` is set and the caller moves it aside.
// `done`: a run of `config` ended (completed, stalled or diverged) with all its result
// files, so the run is skipped (never with `policy.rerun`); `line`: what to tell the user,
// prefixed with `tag` ("skipped", "re-running it" and why, "moved aside"), or "" when
// there was no finished run there.
struct EarlierRun {
  bool done = false;
  bool superseded = false;
  std::string line;
};
EarlierRun earlier_run(const std::string& dir, const json& config, const ReplacePolicy& policy, const std::string& tag);

// Sub-folders of exp_dir that hold a run (a config.json) whose id `exp` does not make: the
// runs of an earlier sweep, engine list or repeat count under the same name. The analysis
// reads every run folder in exp_dir, so they must not stay beside this experiment's.
std::vector<std::string> runs_of_other_configs(const std::string& exp_dir, const Experiment& exp);
// Throws IoError naming them (and what --supersede does) unless `supersede`; changes nothing.
void refuse_runs_of_other_configs(const std::string& exp_dir, const std::vector<std::string>& others, bool supersede);
// Moves the run folders `names` of exp_dir into a new exp_dir/superseded-<UTC time>[-k]/
// (made by this call alone, so processes sharing exp_dir never mix their moves), never
// deleting, and says where on stderr. `made_them` is the experiment.json of the config
// that made them, read before this process wrote anything; it is written beside them (so
// plot.py reads that folder as an experiment) unless it is null.
void move_runs_aside(const std::string& exp_dir, const std::vector<std::string>& names, const json& made_them);

// What one process (`asgdsim run`, a --shard of it, or `asgdsim cluster`'s server) does of
// an experiment's runs, checked before anything is written, in run order: the runs it makes
// (`todo`), what earlier_run said of each of its runs (`lines`, by run index; "" for none and
// for another shard's runs), and the run folders it moves aside (--supersede).
struct RunPlan {
  std::vector<size_t> todo;
  std::vector<std::string> lines;
  std::vector<std::string> aside;
};
// `configs`: each run's config.json as this process writes it (empty: each run's config);
// runs in `remeasured` (their compute trace measured anew) are made again.
RunPlan plan_runs(const Experiment& exp, const std::string& exp_dir, const std::vector<json>& configs,
                  const ReplacePolicy& replace, int shard, int shards, const std::set<size_t>& remeasured = {});
// The folder made ready for the plan's runs: the run folders of another config (`others`,
// already refused unless --supersede) are moved aside by shard 0 with the plan's, beside
// the experiment.json of the config that made them; experiment.json is written (`exp`'s);
// and with `write_index` index.csv lists the runs about to be (re-)made as pending until it
// is rewritten at the end (a kill -9 leaves them so). A sharded run never replaces another
// config's experiment.json (IoError) unless `supersede`.
void prepare_experiment_folder(const Experiment& exp, const std::string& exp_dir, RunPlan& plan,
                               const std::vector<std::string>& others, int shard, int shards, bool supersede,
                               bool write_index);

// "pid P on HOST since TIME (WHAT)": what a holder writes into a lock file, so that a
// process that finds the lock taken can name it.
std::string lock_holder_line(const std::string& what);
// Who holds a lock, from its file's text (the first line of what the holder wrote).
std::string lock_holder(const std::string& lock_file_text);
// Which config a process that holds an experiment folder runs: a hash of the resolved
// config (experiment.json's content) and the number of shards it is split into.
std::string experiment_identity(const json& resolved, int shards);

// An flock on OUT/<name>/.lock (sim/run/file_lock.h), held for a whole `asgdsim run`:
// exclusive, or shared by the processes that split one experiment's runs (--shard, mpirun
// ranks). Sharers must run the same config in as many shards: the first writes its
// `identity` (experiment_identity) into the lock file, and a process with another one is
// refused while any sharer lives (it would move or overwrite their runs); an empty
// identity (`asgdsim index`) shares with any. The kernel releases the lock when the
// process ends in any way (kill -9 included), so it is never stale.
class ExperimentLock {
 public:
  enum class Mode { Exclusive, Shared };
  // Takes the lock. If it cannot be had: throws IoError naming the holder (its pid, host,
  // start and command line, which each holder writes into the lock file, and its config
  // when that is what differs), or with `wait` waits for it, polling for interruption
  // (held() is false if interrupted).
  ExperimentLock(const std::string& exp_dir, Mode mode, bool wait, const std::string& command_line, bool quiet,
                 const std::string& identity = "");
  ~ExperimentLock();
  ExperimentLock(const ExperimentLock&) = delete;
  ExperimentLock& operator=(const ExperimentLock&) = delete;
  bool held() const { return held_; }

 private:
  std::unique_ptr<FileLock> file_;
  bool held_ = false;
};

// index.csv's text: one row per run of `exp`, from the summary.json files in exp_dir
// ("pending" for runs without one, and for the runs in `pending`: those about to be made;
// "incomplete" for a run that ended with results whose result files are not all there,
// which `asgdsim run` re-runs). Each run's `config` is its config.json.
std::string index_csv(const Experiment& exp, const std::string& exp_dir, const std::set<std::string>& pending = {});
// The status index.csv lists for `run` (its folder in exp_dir): pending, incomplete, or
// what its summary.json says ("unknown" when it says nothing readable); `summary` gets
// the summary.json read (null when there is none).
std::string listed_status(const std::string& exp_dir, const RunSpec& run, json& summary);
// Writes exp_dir/index.csv atomically, holding an exclusive lock on exp_dir/.index.lock
// while it reads the summaries and writes: processes that share the folder (--shard,
// mpirun) each write it when done, and the last one's index lists every finished run.
// Also written before the first run starts, with the runs to be made in `pending`, so
// that a process killed with -9 leaves an index that says they are not finished (their
// old summary.json may still be there until each run starts).
void write_index(const Experiment& exp, const std::string& exp_dir, const std::set<std::string>& pending = {});

}  // namespace asgd
