// sim/data/external_data.h — data sets whose samples live outside this program:
// `data.type: "torch"`, PyTorch datasets that the Python package hands in through one
// ExternalDataSource (the data half of sim/models/external.h's ExternalProvider, which
// also builds `model.type: "torch"` modules). On the data floor, so the data family
// loads them without including the models above it.
#pragma once
#include <cstddef>
#include <memory>
#include <string>
#include "sim/data/dataset.h"

namespace asgd {

// data.type "torch": its keys, bound. Classes (given, or the largest target + 1) are at
// most kMaxTorchClasses: a stray target of 10^9 must not size the runs' label counts.
inline constexpr int kMaxTorchClasses = 1000000;
struct ExternalDataConfig {
  std::string module;      // "file.py:factory"; "": the caller gives the data
  size_t train_limit = 0;  // > 0: only the first so many training samples
  size_t test_limit = 0;
  int classes = 0;  // 0: from the labels (integer targets), or regression
};

// Where the config's relative module paths resolve: the config's folder.
struct ExternalContext {
  std::string base_dir;
};

class ExternalDataSource {
 public:
  virtual ~ExternalDataSource() = default;
  // The training and test sets: n, classes and the labels (y, for the label partitions
  // and accuracy), no features (x empty, dim 0); HostDataset::external is 0 for the
  // training set and 1 for the test set, which the model's jobs read by it.
  virtual DataSplit load_data(const ExternalDataConfig& data, const ExternalContext& where) = 0;
};

// The one slot (nullptr: none), thread-safe; set_external_provider (sim/models/external.h)
// fills it.
std::shared_ptr<ExternalDataSource> external_data_source();
void set_external_data_source(std::shared_ptr<ExternalDataSource> source);

// Why a config that names model/data type "torch" cannot run here (no provider): the text
// of the UsageError, naming the command that can run it.
std::string external_provider_missing(const std::string& key);

}  // namespace asgd
