// experiments/config/config.h — experiment configs: load (JSON syntax errors with line and
// column), --set overrides, strict validation of the whole schema with every default
// filled and each run's typed settings bound in the same pass, and expansion into runs
// (engine x sweep point x repeat). Also the staleness and learning-rate-schedule catalogs
// as `asgdsim list` reads them (the data sets': sim/data/catalog.h).
#pragma once
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "engines/engine_registry.h"
#include "sim/config/validator.h"
#include "sim/config/param.h"
#include "sim/data/catalog.h"
#include "sim/models/catalog.h"
#include "sim/run/settings.h"

namespace asgd {

// An experiment's name and a run id are folder names: at most this long (file systems
// allow 255 bytes).
inline constexpr size_t kMaxNameBytes = 200;

// One run to make: its resolved config (an "engine" object instead of "engines", the
// sweep values applied, "seed" = experiment seed + repeat).
struct RunSpec {
  std::string run_id;
  std::string engine;  // the engine's name (its "name", else its type)
  json sweep_values;   // {"train.lr": 0.1, ...} (ordered as in the sweep)
  uint64_t seed = 0;
  int repeat = 0;
  json config;                                      // the resolved config, as config.json shows it
  RunSettings settings;                             // the same run, typed: bound from config's keys while validating
  std::shared_ptr<const BoundEngine> bound_engine;  // its engine, bound to its typed config once (null: a run read
                                                    // back from its folder, which is not run)
  std::shared_ptr<const BoundModel> bound_model;    // its model, bound to its typed config once (null: as
                                                    // bound_engine)
  std::shared_ptr<const BoundData> bound_data;      // its data, bound to its typed config once (null: as
                                                    // bound_engine)
  // What would mislead about this run's result, said in its summary.json note too (a
  // round longer than the stop budget, engines compared over a free network).
  std::vector<std::string> notes;
};

struct Experiment {
  std::string source;    // the config file path ("" for the built-in default)
  std::string base_dir;  // where relative paths in the config resolve
  json resolved;         // the experiment config with every default filled
  std::vector<std::string> sweep_keys;
  std::vector<RunSpec> runs;
  // What validate and run say before the runs: notes (what cluster.compute "measured" will
  // do) and warnings (a sweep over the model or the batch whose compute draw ignores it).
  std::vector<std::string> notes, warnings;
};

// The name of an experiment whose config gives none and whose file name gives none either
// (a config passed as text, a file named ".json").
inline constexpr const char* kDefaultExperimentName = "experiment";
// Its name: the folder under --out (resolve_experiment always sets resolved.name).
inline std::string experiment_name(const Experiment& exp) { return exp.resolved.at("name").get<std::string>(); }
// A config value as text for people (messages, index.csv, --set examples): a string as it
// is, anything else as its JSON.
inline std::string value_text(const json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

// Reads and parses a JSON file; throws ConfigError naming file, line and column.
json load_json_file(const std::string& path);

// Applies KEY.PATH=VALUE overrides (VALUE parsed as JSON, else taken as a string);
// "engines[1].type" and "engines.1.type" both address a list element.
void apply_overrides(json& config, const std::vector<std::string>& sets, const std::string& source);
// How run ids name the sweep keys `keys`: each key's shortest dotted suffix that is no other
// key's suffix ("lr" for train.lr; "model.type" and "data.type" when both are swept), else
// the whole key (b.lr beside a.b.lr). The names are distinct, so run ids say which key.
std::vector<std::string> run_id_key_names(const std::vector<std::string>& keys);
// Validates and expands; throws ConfigError with every issue found.
Experiment resolve_experiment(const json& user, const std::string& source, const std::string& base_dir);
// An engines entry's "name": its label in run ids and plots (experiment.json's record of
// the engines reads it back, required there: the resolved entries all have one).
ParamInfo engine_name_key();

// What a run's compute distribution may ask of the run (BoundDistribution::resolve): its
// model (FLOPs per sample, counted when asked), batch and `per`, and dist "measured"'s
// trace name in the experiment folder (measured_trace_name of its model, data, batch and
// PyTorch sources).
ComputeRunView compute_run_view(const RunSpec& run);
// The fingerprints of a PyTorch model's files (the run's run.sources), null where there are none.
json sources_of(const RunSpec& run);
// The run's trace of dist "measured" in the experiment folder (measured_trace_name).
std::string trace_name_of(const RunSpec& run);
// Sets the run's compute to what its distribution resolved to (the draw where there is one,
// compute_model, a draw per step) and adds the resolution's note to `notes` once.
void apply_compute(RunSpec& run, const ComputeResolution& resolved, std::vector<std::string>& notes);

// Catalogs for validation and `asgdsim list`.
const std::vector<ComponentInfo>& staleness_catalog();
const std::vector<ComponentInfo>& lr_schedule_catalog();
struct SectionInfo {
  std::string name;
  std::string doc;
  std::vector<ParamInfo> params;
};
// The plain sections (top level, train, stop, eval, cluster) and their keys.
const std::vector<SectionInfo>& section_catalog();

}  // namespace asgd
