// experiments/config/records.cpp — the declarations of experiments/config/records.h.
#include "experiments/config/records.h"
#include "experiments/config/config.h"  // engine_name_key
#include "sim/base/limits.h"
#include "sim/run/settings.h"  // the top-level keys experiment.json holds resolved

namespace asgd {

const Section<RunRecord>& run_record() {
  using keys::integer;
  using keys::str;
  static const Section<RunRecord> s = record<RunRecord>(
      "run", "which run of which experiment a run folder holds (its config.json's \"run\")",
      {field(&RunRecord::run_id, str("run_id", nullptr, "the run's id: its folder's name")),
       field(&RunRecord::experiment, str("experiment", nullptr, "the experiment's name")),
       field(&RunRecord::engine, str("engine", nullptr, "the engine's label in the experiment's engines")),
       // (a top-level seed, at most kMaxCount, plus a repeat below kMaxRuns)
       field(&RunRecord::seed,
             integer("seed", nullptr, "the run's seed: the experiment's seed + repeat", 0, kMaxCount + kMaxRuns)),
       field(&RunRecord::repeat, integer("repeat", nullptr, "which repeat of its engine and sweep point the run is"))},
      {object_key(&RunRecord::sweep, keys::any("sweep", nullptr, "the run's sweep point: dotted key -> value"))});
  return s;
}

const Section<RunConfigRecord>& run_config_record() {
  static const Section<RunConfigRecord> s = record<RunConfigRecord>(
      "", "a run's config.json as read back", {},
      {record_key(&RunConfigRecord::run, keys::any("run", nullptr, run_record().doc), run_record())});
  return s;
}

const Section<ExperimentRecord>& experiment_record() {
  static const Section<ExperimentRecord> s = [] {
    const Section<RunSettings>& top = settings_section("top");
    return record<ExperimentRecord>(
        "", "experiment.json's members that give the run order",
        {field(&ExperimentRecord::name, required_key(declared_key(top, "name"))),
         field(&ExperimentRecord::seed, declared_key(top, "seed")),
         field(&ExperimentRecord::repeats, declared_key(top, "repeats"))},
        {record_list_key(&ExperimentRecord::engines, keys::any("engines", nullptr, "the engines as resolved, in order"),
                         record<EngineRecord>("engines[]", "an engine as resolved",
                                              {field(&EngineRecord::name, required_key(engine_name_key()))})),
         object_key(&ExperimentRecord::sweep, keys::any("sweep", nullptr, "dotted key -> the values it takes"),
                    [](const json& values, const std::string& path, Validator& v) { check_list(values, path, v); })});
  }();
  return s;
}

}  // namespace asgd
