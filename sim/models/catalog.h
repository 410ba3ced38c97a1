// sim/models/catalog.h — the model family keyed by model.type. Everything the program
// knows about one model is its ModelType here: its keys (declared once, with defaults,
// ranges and docs, filling its own typed Config), the data it reads (the default data type
// and the checks across model and data), how it is built from the data's shape
// (kernels/model.h), and so its sizes: the memory estimate asks the built model for its
// parameters and its workspace per sample (Model::num_params, Model::floats_per_sample),
// instead of keeping its own sums. A model object is bound to its typed config once, at
// validation (resolve_model, bind_model: a BoundModel), and the run carries that.
// What it is not: the models' numerics (kernels/models/) or the data sets (sim/data/catalog.h).
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "kernels/model.h"
#include "kernels/shape.h"
#include "sim/config/field.h"
#include "sim/config/type_family.h"

namespace asgd {

// What a model is built for: features per sample, classes (0: regression), one sample's
// shape, and the data's description for errors.
struct ModelInput {
  size_t dim = 0;
  int classes = 0;
  Shape shape;
  std::string description;
  std::string base_dir;  // the config's folder (where an external model's module path resolves)
  // The training set, for a model that reads it outside its jobs (a PyTorch model's
  // BatchNorm statistics, sim/models/external.h); may be null.
  const DeviceDataset* train = nullptr;
};

class BoundData;  // sim/data/catalog.h

// What a model's own checks against its data (ModelHooks::check) read of the run, typed:
// the run's bound data (sim/data/catalog.h), valid (the checks run only when both the
// model's object and the data's are).
struct ModelRunView {
  const BoundData& data;
};

struct ModelType;

// A model object bound once (at validation) to its type's typed config: what the run's
// components ask of the model, each hook reading the typed config (ModelHooks).
class BoundModel {
 public:
  virtual ~BoundModel() = default;
  const ModelType& type() const { return *type_; }
  // Its keys, read back from the typed config (Field::get).
  virtual nlohmann::json keys() const = 0;
  // Its checks against the data beyond what reads/task say (check_model_data runs them),
  // reported at model.* and data.* paths.
  virtual void check(const ModelRunView& run, Validator& v) const = 0;
  // The model for data of `input`'s shape (the one place a model is built); throws
  // DataError when the data cannot feed it.
  virtual std::unique_ptr<Model> build(const ModelInput& input) const = 0;
  // Its parameter count without building it, for a model whose construction allocates
  // its size (quadratic: its curvature alone is dim floats); none: the estimates build it
  // (construction allocates only its layer list).
  virtual std::optional<double> params_unbuilt() const = 0;
  // Its typed config when it is a C, else nullptr (a torch model's module, for the Python
  // package's check of what it was given).
  template <class C>
  const C* config_as() const;

 protected:
  explicit BoundModel(const ModelType& type) : type_(&type) {}

 private:
  const ModelType* type_;
};

// A model's typed hooks over its config struct: `build` builds it; `check` (checks against
// the data) and `params_unbuilt` are optional.
template <class Config>
struct ModelHooks {
  std::function<std::unique_ptr<Model>(const Config&, const ModelInput& input)> build;
  std::function<void(const Config&, const ModelRunView& run, Validator& v)> check;
  std::function<double(const Config&)> params_unbuilt;
};

template <class Config>
class BoundModelOf final : public BoundModel {
 public:
  struct Declared {
    std::vector<Field<Config>> fields;
    ModelHooks<Config> hooks;
  };
  BoundModelOf(const ModelType& type, std::shared_ptr<const Declared> d, Config c)
      : BoundModel(type), d_(std::move(d)), c_(std::move(c)) {}
  const Config& config() const { return c_; }
  nlohmann::json keys() const override { return get_fields(d_->fields, c_); }
  void check(const ModelRunView& run, Validator& v) const override {
    if (d_->hooks.check) d_->hooks.check(c_, run, v);
  }
  std::unique_ptr<Model> build(const ModelInput& input) const override { return d_->hooks.build(c_, input); }
  std::optional<double> params_unbuilt() const override {
    if (!d_->hooks.params_unbuilt) return std::nullopt;
    return d_->hooks.params_unbuilt(c_);
  }

 private:
  std::shared_ptr<const Declared> d_;
  Config c_;
};

template <class C>
const C* BoundModel::config_as() const {
  const auto* of = dynamic_cast<const BoundModelOf<C>*>(this);
  return of ? &of->config() : nullptr;
}

struct ModelType {
  // External: a model from outside (sim/models/external.h) that reads dense samples,
  // native or its own data set's.
  enum class Reads { None, Dense, Sparse, External };
  enum class Task { Regression, Classifier, Binary };
  std::string name;
  std::string doc;
  std::vector<ParamInfo> params;
  Reads reads = Reads::Dense;
  Task task = Task::Classifier;
  // Fills keys derived from others (cnn: the lenet5 preset); `user` is the model object as
  // the config gave it. Optional. It stays over JSON because it runs before there is a typed
  // config to bind: it writes the resolved object (config.json shows the preset's layers)
  // and reads what the user left out (lenet5 refuses conv and hidden given beside it).
  std::function<void(const nlohmann::json& user, nlohmann::json& model, Validator& v)> resolve;
  // Checks the values of its keys beyond their types (a shaped key's parts at their own
  // paths: model.conv[1].kernel, model.curvature[2]; check_parts, check_values), after
  // `resolve`. Set by the model's declaration.
  std::function<void(nlohmann::json& model, Validator& v)> check_keys;
  // Binds a validated model object (defaults filled, resolved; a key it lacks takes its
  // default, as in an object built in code) to the model's typed config (bind_model).
  // `self`: this type (TypeFamily::bind).
  std::function<std::shared_ptr<BoundModel>(const ModelType& self, const nlohmann::json& model)> bind;
  // data.type when the config leaves it out: `data` if set, else by what it reads.
  std::string data;
  std::string default_data() const {
    if (!data.empty()) return data;
    return reads == Reads::None ? "none" : reads == Reads::Sparse ? "sparse_synthetic" : "synthetic";
  }
};

// Every model, in the order `asgdsim list` shows them.
const TypeFamily<ModelType>& model_family();
// model_family()'s types, find (nullptr for an unknown name), type_of (the type a model
// object names; std::invalid_argument for none) and catalog.
const std::vector<ModelType>& model_types();
const ModelType* find_model_type(const std::string& name);
const ModelType& model_type_of(const nlohmann::json& model);
// Binds a validated model object {"type": ..., its keys resolved, defaults filled (a key it
// lacks takes its default)} to its type's typed config; throws std::invalid_argument on an
// unknown type.
std::shared_ptr<const BoundModel> bind_model(const nlohmann::json& model);
const std::vector<ComponentInfo>& model_catalog();
// One convolution block of model cnn (section model.conv[]): its keys, bound to a ConvSpec.
const Section<ConvSpec>& conv_block_section();
const std::vector<ParamInfo>& conv_block_params();

// Resolves and checks the model object at "model" (defaults filled, derived keys set) and
// returns it; when nothing in it was reported, binds it into `out` (bind_model). `user`:
// the config's model object.
nlohmann::json resolve_model(const nlohmann::json& user, Validator& v, std::shared_ptr<const BoundModel>& out);
// The checks across model and data (reported at model.* and data.* paths): what the
// model's type reads against the data's layout, then, where the data's object is valid
// (`data` bound), its task and classes against the data's keys and the bound model's own
// check (skipped, too, when `bound` is null: the model's object was reported invalid).
// `type`: the model's type (null: unknown, reported at model.type); `data_type`: data.type
// as given (an unknown one, reported at data.type, counts as dense).
void check_model_data(const ModelType* type, const BoundModel* bound, const std::string& data_type,
                      const BoundData* data, Validator& v);
// For objects built in code (tests, bench): bind_model(model)->build(input).
std::unique_ptr<Model> build_model(const nlohmann::json& model, const ModelInput& input);

}  // namespace asgd
