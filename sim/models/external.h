// sim/models/external.h — models and data sets whose numerics live outside this program:
// `model.type: "torch"` and `data.type: "torch"`, a PyTorch module and datasets that the
// Python package (python/asgdsim) hands in. The program sees them through one
// ExternalProvider, installed by whoever runs the experiment (the Python package, for
// the length of one asgdsim.run()); without one, a run that needs it is refused before
// anything is written (external_provider_missing). Everything else — the engines, the
// parameter store, versions, staleness, precision, compression, the clock — treats an
// external model as any other Model (kernels/model.h).
#pragma once
#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include "kernels/model.h"
#include "sim/data/dataset.h"
#include "sim/data/external_data.h"
#include "sim/models/catalog.h"

namespace asgd {

// model.type "torch": its keys, bound (sim/models/catalog.cpp declares them).
struct ExternalModelConfig {
  std::string module;     // "file.py:factory", relative to the config's folder; "": the caller gives the model
  std::string loss;       // "file.py:function"; "": the caller's, else cross-entropy
  int threads = 0;        // torch intra-op threads of each job (part of the config: it can change the bits)
  size_t bn_samples = 0;  // training samples that recompute BatchNorm statistics at each evaluation
};
// The provider: the data source (sim/data/external_data.h) that also builds models.
class ExternalProvider : public ExternalDataSource {
 public:
  // The model for one run, for data of `input`'s shape (native data: dim/shape/classes
  // as the native models see them; external data: dim 0).
  virtual std::unique_ptr<Model> build_model(const ExternalModelConfig& model, const ModelInput& input,
                                             const ExternalContext& where) = 0;
};

// The provider runs read (nullptr: none). Set by the Python package around one run; it
// is external_data_source()'s one slot, seen with its model half.
std::shared_ptr<ExternalProvider> external_provider();
void set_external_provider(std::shared_ptr<ExternalProvider> provider);

// The key ("model.type" or "data.type") of a resolved run config that names a component
// living outside the program (a model that reads External, a data set of layout External),
// or "" when the run needs no provider.
std::string external_key(const nlohmann::json& run_config);

// The Python files a resolved run config names (model.module, model.loss, data.module of
// type "torch", each "FILE.py:NAME" with FILE relative to base_dir): each must exist
// (else an issue at its key, so validation refuses it), and the result maps each key to
// a fingerprint of its file's text (sim/base/hash.h), which the run's record carries: an
// edited model file makes another config, as an edited config would. `cache` keeps the
// files read, by path, across the runs of one experiment.
nlohmann::json external_sources(const nlohmann::json& run_config, const std::string& base_dir, Validator& v,
                                std::map<std::string, std::string>& cache);

}  // namespace asgd
