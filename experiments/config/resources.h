// experiments/config/resources.h — what a run will cost, judged from its resolved config before
// anything runs: how far it goes (gradients, updates, epochs, virtual seconds, from its
// stop limits and its timing) and how much memory its largest allocations take.
// resolve_experiment uses it to refuse, as invalid input naming the key responsible, a
// run that cannot advance (only stop.time, with steps of 0 ns) and a run whose estimate
// exceeds the machine's memory. An estimate, not an accounting: its terms are the
// allocations that grow with a config key (per-worker buffers, parameter versions, data
// sets, metrics rows, trace spans); fixed costs of a few MB are left out.
#pragma once
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/config/validator.h"
#include "sim/timing/distribution.h"
#include "sim/run/settings.h"

namespace asgd {

using nlohmann::json;
struct RunSpec;    // experiments/config/config.h
class BoundModel;  // sim/models/catalog.h
class BoundData;   // sim/data/catalog.h

// How far a run goes at most, from whichever stop limit binds first (+inf: unbounded).
// The functions below take a run as resolve_experiment made it: its typed settings and its
// bound model, data and engine (RunSpec::settings, bound_model, bound_data, bound_engine).
struct RunScale {
  double gradients = 0, updates = 0, epochs = 0, seconds = 0;
  double step_seconds = 0;  // mean virtual duration of one worker step (compute + transfers)
};
struct ModelSizes;
// `known`: the model's sizes when they are known only once it is built (a PyTorch module);
// else they come from the config (model_sizes).
RunScale estimate_run_scale(const RunSpec& run, const Distribution& compute, const ModelSizes* known = nullptr);

struct MemoryPart {
  std::string key;   // the config key that drives it (named in a refusal)
  std::string what;  // what it is, with the numbers behind it
  double bytes = 0;
};
struct MemoryEstimate {
  double total = 0;
  std::vector<MemoryPart> parts;  // largest first
};
MemoryEstimate estimate_run_memory(const RunSpec& run, const Distribution& compute, const ModelSizes* known = nullptr);

// Reports, into v, a run that cannot advance or that needs more memory than
// memory_limit_bytes() (sim/data/dataset.h). `compute` is the run's cluster.compute distribution.
void check_run_resources(const RunSpec& run, const Distribution& compute, Validator& v);

// "this run would need about X of memory, more than the Y this machine has; the largest
// part is ...": the words of every memory refusal (check_run_resources, the data check).
std::string memory_refusal(const MemoryEstimate& m, double budget);
// The check of check_run_resources once a data set read from files (svmlight) has told
// its real features and classes (the config's 0s mean "from the file", so the estimate
// before could not count them): throws DataError naming `source` (the file), the sizes
// and the memory, instead of letting the model's allocation die of std::bad_alloc.
void check_memory_with_data(const RunSpec& run, const std::string& base_dir, size_t features, int classes,
                            const std::string& source);
// The same once a PyTorch module (`source`) is built and its parameter count known (the
// config says nothing of its size, so the estimate before counted none): throws DataError
// naming the module, its parameters and the memory, before the run allocates its workers'
// copies (it used to die of std::bad_alloc, exit 1).
// `settings`: the run's as the caller will run it (tracing may be on).
void check_memory_with_model(const RunSpec& run, const RunSettings& settings, const std::string& base_dir,
                             size_t params, const std::string& source);
// What an allocation failure that still escapes (std::bad_alloc) is reported as.
std::string out_of_memory_text(const std::string& during);

// The model's sizes, from the model the run builds (sim/models/catalog.h): parameters, and
// floats of workspace per sample, training and evaluating (0 where it keeps none).
struct ModelSizes {
  double params = 0;
  double train_floats_per_sample = 0;
  double eval_floats_per_sample = 0;
  double flops_per_sample = 0;  // Model::flops_per_sample (0: the quadratic)
};
ModelSizes model_sizes(const BoundModel& model, const BoundData& data);

}  // namespace asgd
