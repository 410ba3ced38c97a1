// sim/models/catalog.h — the model family keyed by model.type. Everything the program
// knows about one model is its ModelType here: its keys (declared once, with defaults,
// ranges and docs), the data it reads (the default data type and the checks across model
// and data), how it is built from the data's shape (kernels/model.h), and so its sizes:
// the memory estimate asks the built model for its parameters and its workspace per
// sample (Model::num_params, Model::floats_per_sample), instead of keeping its own sums.
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
  // Fills keys derived from others and validates nested ones (cnn: the lenet5 preset, the
  // conv blocks); `user` is the model object as the config gave it. Optional.
  std::function<void(const nlohmann::json& user, nlohmann::json& model, Validator& v)> resolve;
  // Checks of the model against its data beyond what reads/task say (quadratic: curvature
  // list length; cnn: each block's shape on the data's images). Optional.
  std::function<void(const nlohmann::json& model, const nlohmann::json& data, const std::optional<Shape>& image,
                     Validator& v)>
      check;
  // Builds the model from its validated object for data of `input`'s shape.
  std::function<std::unique_ptr<Model>(const nlohmann::json& model, const ModelInput& input)> build;
  // Its parameter count from its validated object, for a model the estimates do not build
  // because building it allocates its size (quadratic: its curvature alone is dim floats).
  // Optional: the estimates build the model (construction allocates only its layer list).
  std::function<double(const nlohmann::json& model)> params_unbuilt;
  // data.type when the config leaves it out: `data` if set, else by what it reads.
  std::string data;
  std::string default_data() const {
    if (!data.empty()) return data;
    return reads == Reads::None ? "none" : reads == Reads::Sparse ? "sparse_synthetic" : "synthetic";
  }
};

const std::vector<ModelType>& model_types();
const ModelType* find_model_type(const std::string& name);
// The member a validated model object names (throws std::invalid_argument for none).
const ModelType& model_type_of(const nlohmann::json& model);
// The models and their keys, as the validator and `asgdsim list` read them.
const std::vector<ComponentInfo>& model_catalog();
// One convolution block of model cnn (section model.conv[]).
const std::vector<ParamInfo>& conv_block_params();

// Resolves and checks the model object at "model" (defaults filled, derived keys set);
// returns it. `user`: the config's model object.
nlohmann::json resolve_model(const nlohmann::json& user, Validator& v);
// The checks across model and data (reported at model.* and data.* paths); `image`: the
// data's samples as images, if they are (data_image).
void check_model_data(const nlohmann::json& model, const nlohmann::json& data, const std::optional<Shape>& image,
                      Validator& v);
// Builds the validated model for `input`; throws DataError when the data cannot feed it.
std::unique_ptr<Model> build_model(const nlohmann::json& model, const ModelInput& input);

}  // namespace asgd
