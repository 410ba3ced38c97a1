// experiments/config/experiment_file.cpp — configs from files and objects; the families.
#include "experiments/config/experiment_file.h"
#include <cctype>
#include <filesystem>
#include "engines/engine_registry.h"
#include "sim/net/catalog.h"
#include "sim/timing/distribution.h"

namespace asgd {

std::string name_from_path(const std::string& path) {
  std::string stem = std::filesystem::path(path).stem().string(), name;
  for (char c : stem)
    name += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == '=') ? c : '_';
  // at most what a name may be (200 bytes): the user gave no name to shorten
  if (name.size() > kMaxNameBytes) name.resize(kMaxNameBytes);
  return name.empty() || name == "." || name == ".." ? kDefaultExperimentName : name;
}

Experiment load_experiment(json cfg, const std::string& source, const std::string& base_dir,
                           const std::vector<std::string>& sets, const std::string& default_name) {
  apply_overrides(cfg, sets, source);
  if (cfg.is_object() && !cfg.contains("name")) cfg["name"] = default_name;
  Experiment exp = resolve_experiment(cfg, source, base_dir.empty() ? "." : base_dir);
  if (!sets.empty()) exp.resolved["overrides"] = sets;
  return exp;
}

Experiment load_experiment(const std::string& path, const std::vector<std::string>& sets) {
  return load_experiment(load_json_file(path), path, std::filesystem::path(path).parent_path().string(), sets,
                         name_from_path(path));
}

std::string runs_text(const Experiment& exp) {
  std::string out =
      std::to_string(exp.runs.size()) + " run(s) for experiment '" + exp.resolved.value("name", "") + "':\n";
  for (const auto& r : exp.runs) {
    out += "  " + r.run_id + "  engine=" + r.engine;
    for (const auto& [k, v] : r.sweep_values.items()) out += " " + k + "=" + v.dump();
    out += " seed=" + std::to_string(r.seed) + "\n";
  }
  for (const auto& n : exp.notes) out += n + "\n";
  return out;
}

std::vector<CatalogFamily> families() {
  return {{"engines", "engines[].type", engine_catalog()},
          {"models", "model.type", model_catalog()},
          {"datasets", "data.type", data_catalog()},
          {"topologies", "cluster.topology.type", topology_catalog()},
          {"distributions", "cluster.compute.dist", distribution_catalog()},
          {"staleness modes", "staleness.mode", staleness_catalog()},
          {"learning-rate schedules", "train.lr_schedule.type", lr_schedule_catalog()}};
}

}  // namespace asgd
