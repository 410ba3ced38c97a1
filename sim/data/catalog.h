// sim/data/catalog.h — the data-set family keyed by data.type. Everything the program knows
// about one data set is its DataType here: its keys (declared once, with defaults, ranges
// and docs), the keys it derives from others (synthetic: features from image), which models
// can read it, its sizes before it is loaded (samples, features, classes, bytes: what the
// memory estimate counts), whether its files exist (what validation checks before any run),
// what makes two runs share one loaded copy, and how it is loaded. A data object is bound to
// its typed config once, at validation (resolve_data, bind_data: a BoundData), and the run
// carries that. Adding a data set is one entry in data_family() plus its reader.
// What it is not: the readers and generators themselves (sim/data/dataset.h,
// sparse_synthetic.h, svmlight_reader.h), the split over workers (sim/data/partition.h),
// or the checks that join a model and its data (sim/models/catalog.h).
#pragma once
#include <functional>
#include <memory>
#include <stdexcept>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "kernels/shape.h"
#include "sim/config/field.h"
#include "sim/config/type_family.h"
#include "sim/data/dataset.h"
#include "sim/data/partition.h"  // PartitionSpec

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

// The keys a labelled set adds (data.partition, partition_alpha, partition_shards), bound
// to the run's PartitionSpec.
const std::vector<Field<PartitionSpec>>& partition_fields();

class BoundData;

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
  // their own copy (BoundData::share_key).
  bool seeded = false;
  // Checks its keys' values beyond their types (check_values) and fills the keys derived
  // from others from its typed config (DataHooks::derive); `user` is the data object as the
  // config gave it, `data` the object validated against its keys. Set by the set's
  // declaration (data_type).
  std::function<void(const nlohmann::json& user, nlohmann::json& data, Validator& v)> resolve;
  // Binds a validated data object (defaults filled, resolved; a key it lacks takes its
  // default, as in an object built in code) to the set's typed config (bind_data).
  // `self`: this type (TypeFamily::bind).
  std::function<std::shared_ptr<BoundData>(const DataType& self, const nlohmann::json& data)> bind;
};

// A data object bound once (at validation) to its type's typed config: what the run's
// components ask of the data, each hook reading the typed config (DataHooks). The run
// carries it (RunSpec::bound_data); config.json's data object is what keys() reads back.
class BoundData {
 public:
  virtual ~BoundData() = default;
  const DataType& type() const { return *type_; }
  // Its keys, read back from the typed config (Field::get); a labelled set's partition
  // keys among them.
  virtual nlohmann::json keys() const = 0;
  // The object as config.json shows it: {"type": ..., its keys}.
  nlohmann::json object() const;
  // How its training set is split over the workers (a set without labels: iid).
  const PartitionSpec& partition() const { return partition_; }
  // Its samples as images (height x width x channels), if they are (Fashion-MNIST,
  // synthetic data with an `image`); nullopt for flat or sparse samples.
  virtual std::optional<Shape> image() const = 0;
  // Its sizes before it is loaded.
  virtual DataShape shape() const = 0;
  // Reports the files it needs that cannot be read (relative paths from base_dir).
  virtual void check_files(const std::string& base_dir, Validator& v) const = 0;
  // Reads or generates the train and test sets (the one place a data set is loaded);
  // throws std::logic_error for a set without samples (layout None) and DataError when its
  // files are unusable.
  virtual DataSplit load(const DataLoadContext& ctx) const = 0;
  // Runs whose keys are equal share one loaded copy: object(), with the seed when the set
  // is drawn from it.
  nlohmann::json share_key(uint64_t seed) const;
  // Its typed config when it is a C, else nullptr: what the checks across model and data
  // read of one set's own keys (sparse_synthetic's nnz, svmlight's classes).
  template <class C>
  const C* config_as() const;

 protected:
  BoundData(const DataType& type, PartitionSpec partition) : type_(&type), partition_(std::move(partition)) {}

 private:
  const DataType* type_;
  PartitionSpec partition_;
};

// A data set's typed hooks over its config struct: `shape` its sizes; `load` (empty
// exactly when the layout is None: no samples), `image`, `check_files` and `derive` optional.
template <class Config>
struct DataHooks {
  std::function<DataShape(const Config&)> shape;
  std::function<DataSplit(const Config&, const DataLoadContext&)> load;
  std::function<std::optional<Shape>(const Config&)> image;
  std::function<void(const Config&, const std::string& base_dir, Validator& v)> check_files;
  // Fills keys derived from others (synthetic: features from image) in `data`, the resolved
  // object (config.json shows them), and checks them. It reads the typed config of the keys
  // that are valid: a key reported in `v` (reported_at) holds Config's own value, and the
  // others' checks still run beside its issue. `user` is the object as the config gave it
  // (what it left out). Optional.
  std::function<void(const Config&, const nlohmann::json& user, nlohmann::json& data, Validator& v)> derive;
};

template <class Config>
class BoundDataOf final : public BoundData {
 public:
  struct Declared {
    std::vector<Field<Config>> fields;
    DataHooks<Config> hooks;
  };
  BoundDataOf(const DataType& type, PartitionSpec partition, std::shared_ptr<const Declared> d, Config c)
      : BoundData(type, std::move(partition)), d_(std::move(d)), c_(std::move(c)) {}
  const Config& config() const { return c_; }
  nlohmann::json keys() const override {
    nlohmann::json k = get_fields(d_->fields, c_);
    if (type().labelled) k.update(get_fields(partition_fields(), partition()));
    return k;
  }
  std::optional<Shape> image() const override { return d_->hooks.image ? d_->hooks.image(c_) : std::nullopt; }
  DataShape shape() const override { return d_->hooks.shape(c_); }
  void check_files(const std::string& base_dir, Validator& v) const override {
    if (d_->hooks.check_files) d_->hooks.check_files(c_, base_dir, v);
  }
  DataSplit load(const DataLoadContext& ctx) const override {
    // validation knows every type; a set without samples is never loaded (its caller asks the layout)
    if (!d_->hooks.load) throw std::logic_error("load_data: data type '" + type().name + "' has no samples to load");
    return d_->hooks.load(c_, ctx);
  }

 private:
  std::shared_ptr<const Declared> d_;
  Config c_;
};

template <class C>
const C* BoundData::config_as() const {
  const auto* of = dynamic_cast<const BoundDataOf<C>*>(this);
  return of ? &of->config() : nullptr;
}

// Every data set, in the order `asgdsim list` shows them.
const TypeFamily<DataType>& data_family();
// data_family()'s types, find (nullptr for an unknown name) and catalog.
const std::vector<DataType>& data_types();
const DataType* find_data_type(const std::string& name);
const std::vector<ComponentInfo>& data_catalog();
// "a or b": the names of the data sets of one layout, in catalog order (for messages).
std::string data_type_names(DataType::Layout layout);

// Validates the data object at "data" (`default_type` when it gives no type), fills its
// defaults and derived keys, and returns it; when nothing in it was reported, binds it into
// `out` (bind_data).
nlohmann::json resolve_data(const nlohmann::json& user, const std::string& default_type, Validator& v,
                            std::shared_ptr<const BoundData>& out);
// Binds a validated data object {"type": ..., its keys resolved, defaults filled (a key it
// lacks takes its default)} to its type's typed config; throws std::invalid_argument on an
// unknown type. For the run's data use RunSpec::bound_data; this is for objects built in
// code (tests) and the resource estimates, which read a run's JSON.
std::shared_ptr<const BoundData> bind_data(const nlohmann::json& data);
// Whether the data are regression targets (synthetic with task "regression"): what a
// classifier and a label partition cannot read.
bool regression_data(const BoundData& data);
// A config's path: a relative one is from base_dir; "" stays "".
std::string data_path(const std::string& path, const std::string& base_dir);

}  // namespace asgd
