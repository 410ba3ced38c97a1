// tests/fuzz/fuzz_config.cpp — libFuzzer target for the config loader: any bytes either
// fail to parse, fail validation with a ConfigError, or resolve into runs whose settings
// can be built (a "measured" compute model once its trace exists: tests/test_measured_compute.cpp). Any other exception
// or crash is a bug in the validator (a config it let through that a later stage cannot read) and stops the fuzzer.
#include <cstddef>
#include <cstdint>
#include <string>
#include <nlohmann/json.hpp>
#include "experiments/config/config.h"
#include "experiments/run/run_parts.h"  // build_compute_model
#include "experiments/run/runner.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j;
  try {  // as load_json_file reads a config: repeated keys and deep nesting refused
    j = asgd::parse_json_strict(std::string(reinterpret_cast<const char*>(data), size), /*allow_comments=*/true);
  } catch (const nlohmann::json::exception&) {  // load_json_file reports these as ConfigError
    return 0;
  } catch (const asgd::StrictJsonError&) {
    return 0;
  }
  try {
    asgd::Experiment exp = asgd::resolve_experiment(j, "fuzz", "/nonexistent-fuzz-dir");
    for (const auto& run : exp.runs)  // "measured" is built from the trace `asgdsim run` measures first
      if (run.settings.compute_dist->type() != "measured") asgd::build_compute_model(run.settings, exp.base_dir);
  } catch (const asgd::ConfigError&) {
  }
  return 0;
}
