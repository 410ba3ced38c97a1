// sim/data/catalog.h — the data-set family keyed by data.type. Everything the program knows
// about one data set is its DataType here: its keys (declared once, with defaults, ranges
// and docs), the keys it derives from others (synthetic: features from image), which models
// can read it, its sizes before it is loaded (samples, features, classes, bytes: what the
// memory estimate counts), whether its files exist (what validation checks before any run),
// what makes two runs share one loaded copy, and how it is loaded. Adding a data set is one
// entry in data_types() plus its reader.
// What it is not: the readers and generators themselves (sim/data/dataset.h,
// sparse_synthetic.h, svmlight_reader.h), the split over workers (sim/data/partition.h),
// or the checks that join a model and its data (sim/models/catalog.h).
#pragma once
#include <functional>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "kernels/shape.h"
#include "sim/config/field.h"
#include "sim/data/dataset.h"
#include "sim/run/settings.h"  // PartitionSpec

namespace asgd {

// A data set's sizes, known from its validated object before anything is read (a set
// whose sizes come from its files says 0 where the config leaves them to the files).
struct DataShape {
  double train = 0, test = 0;  // samples
  double in = 0;               // input dimension (features)
  int classes = 0;             // what a model is built for (0: regression)
  Shape image{1, 1, 1};        // one sample as an image (flat: 1 x 1 x in)
  double stored_values = 0;    // floats' worth of bytes the data set occupies (both sets)
  double raw_bytes = 0;        // bytes read before conversion (IDX pixels)
  bool sparse = false;
  double features_per_sample = 1;  // sparse: features a sample holds (0 in the config: unknown, 1)
  // The key that sets how many training samples there are, named in a memory refusal.
  std::string samples_key = "data";
};

// What a loader is given besides its validated object.
struct DataLoadContext {
  uint64_t seed = 0;     // the run's seed (generated sets draw from it)
  std::string base_dir;  // relative paths are from here (the config's folder)
  // Called by a loader whose sizes come from its files rather than its keys, once they are
  // known: throws DataError when the run cannot hold a model of that size (the memory
  // estimate, experiments/config/resources). `source` names the files and what they told.
  std::function<void(size_t features, int classes, const std::string& source)> check_sizes;
};

struct DataType {
  // What a model reads: no samples (the quadratic), dense rows, sparse rows (CSR), or
  // samples that live outside the program (a PyTorch dataset: only an external model,
  // sim/models/external.h, reads them).
  enum class Layout { None, Dense, Sparse, External };
  std::string name;
  std::string doc;
  std::vector<ParamInfo> params;
  Layout layout = Layout::Dense;
  // Whether its samples carry class labels a partition can split (the partition keys,
  // partition_fields(), are then among its params).
  bool labelled = true;
  // Whether its samples are drawn from the run's seed: runs with other seeds then load
  // their own copy (data_share_key).
  bool seeded = false;
  // Fills keys derived from others (synthetic: features from image) and checks them;
  // `user` is the data object as the config gave it. Optional.
  std::function<void(const nlohmann::json& user, nlohmann::json& data, Validator& v)> resolve;
  // The samples as images (height x width x channels), if they are; reads a resolved
  // object whose values may already be reported as invalid (then nullopt). Optional.
  std::function<std::optional<Shape>(const nlohmann::json& data)> image;
  // Its sizes, from its validated object.
  std::function<DataShape(const nlohmann::json& data)> shape;
  // Reports files it needs that cannot be read (reads a resolved object whose values may
  // already be reported as invalid). Optional: a set that reads no files.
  std::function<void(const nlohmann::json& data, const std::string& base_dir, Validator& v)> check_files;
  // Reads or generates the train and test sets from its validated object. Empty exactly
  // when the layout is None (no samples: nothing to load).
  std::function<DataSplit(const nlohmann::json& data, const DataLoadContext& ctx)> load;
};

// Every data set, in the order `asgdsim list` shows them.
const std::vector<DataType>& data_types();
// nullptr for an unknown name.
const DataType* find_data_type(const std::string& name);
// The data sets and their keys, as the validator and `asgdsim list` read them.
const std::vector<ComponentInfo>& data_catalog();
// "a or b": the names of the data sets of one layout, in catalog order (for messages).
std::string data_type_names(DataType::Layout layout);

// The keys a labelled set adds (data.partition, partition_alpha, partition_shards), bound
// to the run's PartitionSpec.
const std::vector<Field<PartitionSpec>>& partition_fields();

// Validates the data object at "data" (`default_type` when it gives no type), fills its
// defaults and derived keys, and returns it.
nlohmann::json resolve_data(const nlohmann::json& user, const std::string& default_type, Validator& v);
// The data's samples as images, when the data config says (Fashion-MNIST, or synthetic
// data with an `image`): height x width x channels; nullopt for flat or sparse samples.
std::optional<Shape> data_image(const nlohmann::json& data);
// The sizes of a validated data object (DataShape{} for an unknown type).
DataShape data_shape(const nlohmann::json& data);
// Reports the files of `data` that cannot be read (relative paths from base_dir).
void check_data_files(const nlohmann::json& data, const std::string& base_dir, Validator& v);
// Runs whose keys are equal share one loaded copy: the data object, with the seed when
// the set is drawn from it.
nlohmann::json data_share_key(const nlohmann::json& data, const nlohmann::json& seed);
// Loads the validated `data`; throws std::logic_error for a type without a loader (never
// falls back to another) and DataError when its files are unusable.
DataSplit load_data_split(const nlohmann::json& data, const DataLoadContext& ctx);
// A config's path: a relative one is from base_dir; "" stays "".
std::string data_path(const std::string& path, const std::string& base_dir);

}  // namespace asgd
