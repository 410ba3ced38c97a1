// experiments/run/experiment_folder.h — OUT/<name> as a process that makes an experiment's
// runs holds it: `asgdsim run` (or one --shard of it) and `asgdsim cluster`'s server alike.
#pragma once
#include <set>
#include <string>
#include <vector>
#include "experiments/config/config.h"
#include "experiments/run/replace_policy.h"
#include "experiments/run/run_parts.h"

namespace asgd {

// The steps, in order, each refusing before anything is written where it can:
//   ExperimentFolder f(out, name, holder);  // name checked, OUT/<name> made (not a link), locked
//   RunPlan plan = f.plan(exp, ...);        // runs done, to make, to move aside; other configs' refused
//   f.prepare(exp, plan, ...);              // moved aside, experiment.json, index.csv ("pending")
//   f.open_run(run) ... config.json ...     // each run's folder made and its old results cleared
//   f.write_index(exp);                     // index.csv from the summaries
// The lock is held for the object's life (ExperimentLock).
class ExperimentFolder {
 public:
  // Who holds the lock, and how (ExperimentLock): exclusive, or shared by the shards of one
  // config (`identity`: experiment_identity); `wait` polls for it, interruptibly.
  struct Holder {
    ExperimentLock::Mode mode = ExperimentLock::Mode::Exclusive;
    bool wait = false;
    std::string command_line;
    bool quiet = false;
    std::string identity;
  };
  // IoError when `out_dir` is empty or `name` cannot be a folder under it ("", ".", "..",
  // with a '/'), or when OUT/<name> or its lock files are links.
  ExperimentFolder(const std::string& out_dir, const std::string& name, const Holder& holder);
  bool held() const { return lock_.held(); }  // false: interrupted while waiting for the lock
  const std::string& path() const { return path_; }
  std::string run_dir(const RunSpec& run) const { return path_ + "/" + run.run_id; }

  // plan_runs over this folder (`configs`: each run's config.json as written, empty: the
  // runs' own), then the run folders of other configs found here are refused (IoError
  // naming --supersede) unless `replace.supersede`. Writes nothing.
  RunPlan plan(const Experiment& exp, const std::vector<json>& configs, const ReplacePolicy& replace, int shard,
               int shards, const std::set<size_t>& remeasured = {});
  // prepare_experiment_folder with what plan() found.
  void prepare(const Experiment& exp, RunPlan& plan, int shard, int shards, bool supersede, bool write_index_now);
  // Run `run`'s folder made, its earlier results and temporary files removed
  // (clear_run_folder); returns it.
  std::string open_run(const RunSpec& run) const;
  // index.csv from the summaries found (write_index).
  void write_index(const Experiment& exp, const std::set<std::string>& pending = {}) const;

 private:
  static std::string checked_path(const std::string& out_dir, const std::string& name);
  std::string path_;
  ExperimentLock lock_;
  std::vector<std::string> others_;  // run folders of other configs (plan)
};

}  // namespace asgd
