// experiments/run/experiment_folder.cpp — OUT/<name> held by a process making runs
// (experiments/run/experiment_folder.h).
#include "experiments/run/experiment_folder.h"
#include "sim/run/atomic_file.h"

namespace asgd {

std::string ExperimentFolder::checked_path(const std::string& out_dir, const std::string& name) {
  if (out_dir.empty()) throw IoError("--out is empty: give the folder the experiment goes under");
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw IoError("experiment name '" + name + "' cannot be a folder under --out");
  const std::string path = out_dir + "/" + name;
  make_experiment_folder(path);  // not a link: nothing is written through one
  return path;
}

ExperimentFolder::ExperimentFolder(const std::string& out_dir, const std::string& name, const Holder& holder)
    : path_(checked_path(out_dir, name)),
      lock_(path_, holder.mode, holder.wait, holder.command_line, holder.quiet, holder.identity) {}

RunPlan ExperimentFolder::plan(const Experiment& exp, const std::vector<json>& configs, const ReplacePolicy& replace,
                               int shard, int shards, const std::set<size_t>& remeasured) {
  RunPlan p = plan_runs(exp, path_, configs, replace, shard, shards, remeasured);
  others_ = runs_of_other_configs(path_, exp);
  refuse_runs_of_other_configs(path_, others_, replace.supersede);
  return p;
}

void ExperimentFolder::prepare(const Experiment& exp, RunPlan& plan, int shard, int shards, bool supersede,
                               bool write_index_now) {
  prepare_experiment_folder(exp, path_, plan, others_, shard, shards, supersede, write_index_now);
}

std::string ExperimentFolder::open_run(const RunSpec& run) const {
  const std::string dir = run_dir(run);
  make_directories(dir);
  clear_run_folder(dir);  // an earlier attempt's files (and temporary files) go first
  return dir;
}

void ExperimentFolder::write_index(const Experiment& exp, const std::set<std::string>& pending) const {
  asgd::write_index(exp, path_, pending);
}

}  // namespace asgd
