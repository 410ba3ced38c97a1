// experiments/config/experiment_file.h — an experiment from a config file or object, as
// `asgdsim run`/`validate` and the Python package read it (one path for both: overrides,
// the name from the file, relative paths from the file's folder), and the families of
// components as `asgdsim list` and asgdsim.list() show them.
#pragma once
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "experiments/config/config.h"

namespace asgd {

// The file's name as an experiment name: characters the label rule does not allow
// become _, and it is cut to kMaxNameBytes (a name given in the config is checked
// instead, and refused if it breaks the rule or is longer).
std::string name_from_path(const std::string& path);

// Reads `path`, applies `sets` (--set KEY.PATH=VALUE), names the experiment after the file
// when the config does not, and validates; relative paths resolve from the file's folder.
Experiment load_experiment(const std::string& path, const std::vector<std::string>& sets);
// The same for a config already parsed: `source` names it in errors, `base_dir` is where
// its relative paths resolve, `default_name` names it when it has no name.
Experiment load_experiment(json config, const std::string& source, const std::string& base_dir,
                           const std::vector<std::string>& sets, const std::string& default_name);

// What `validate` prints on stdout: the runs (id, engine, sweep values, seed), then the
// experiment's notes (exp.warnings go to stderr, each as "asgdsim: warning: ...").
std::string runs_text(const Experiment& exp);

// The families of components chosen by a "type"-like key, in the order `list` shows them.
struct CatalogFamily {
  const char* title;
  const char* key;  // the choosing key's path
  const std::vector<ComponentInfo>& catalog;
};
std::vector<CatalogFamily> families();

}  // namespace asgd
