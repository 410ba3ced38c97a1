// experiments/config/records.h — what asgdsim reads back of an experiment's own files, as
// records (sim/config/record.h): a run's `run` record, which resolve_experiment writes into
// each run's config.json, and the members of experiment.json (the resolved experiment) that
// `asgdsim index` reads to place each run folder in the run order. Each record declares only
// the keys its readers use; the files hold more.
#pragma once
#include <cstdint>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/config/record.h"

namespace asgd {

// config.json's "run": which run of which experiment its folder holds.
struct RunRecord {
  std::string run_id;      // the run folder's name
  std::string experiment;  // the experiment's name
  std::string engine;      // the engine's label: its name in experiment.json's engines
  json sweep;              // the run's sweep point: dotted key -> value
  uint64_t seed = 0;       // the experiment's seed + repeat
  int repeat = 0;
};
const Section<RunRecord>& run_record();

// A run's config.json as read back: its run record.
struct RunConfigRecord {
  RunRecord run;
};
const Section<RunConfigRecord>& run_config_record();

// experiment.json's members that give the run order: engines, then the sweep's values (its
// keys in order, the last fastest), then repeats.
struct EngineRecord {
  std::string name;  // the engine's label
};
struct ExperimentRecord {
  std::string name;
  std::vector<EngineRecord> engines;
  json sweep;         // dotted key -> the list of values it takes, in order
  uint64_t seed = 0;  // repeat r's seed is seed + r
  uint64_t repeats = 0;
};
const Section<ExperimentRecord>& experiment_record();

}  // namespace asgd
