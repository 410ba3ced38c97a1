// sim/models/catalog.cpp — the models, each with its keys, data checks and builder.
#include "sim/models/catalog.h"
#include <cmath>
#include <stdexcept>
#include "sim/base/errors.h"
#include "sim/data/catalog.h"
#include "sim/data/sparse_synthetic.h"
#include "sim/data/svmlight_reader.h"
#include "sim/models/external.h"

namespace asgd {
namespace {

using keys::any;
using keys::integer;
using keys::list;
using keys::num;
using keys::str;

json conv_json(const ConvSpec& c) { return get_fields(conv_block_section().fields, c); }
json lenet5_conv_json() {
  json out = json::array();
  for (const ConvSpec& c : lenet5().conv) out.push_back(conv_json(c));
  return out;
}

// A model whose keys fill `Config` (declared with field(), sim/config/field.h: every field
// with a getter): bind sets a Config from the validated object once, and the hooks read it.
template <class Config>
ModelType model_type(std::string name, std::string doc, ModelType::Reads reads, ModelType::Task task,
                     std::vector<Field<Config>> fields, ModelHooks<Config> hooks) {
  using Bound = BoundModelOf<Config>;
  ModelType t;
  t.name = std::move(name);
  t.doc = std::move(doc);
  t.params = params_of(fields);
  t.reads = reads;
  t.task = task;
  auto d =
      std::make_shared<const typename Bound::Declared>(typename Bound::Declared{std::move(fields), std::move(hooks)});
  t.bind = [d](const ModelType& self, const json& model) -> std::shared_ptr<BoundModel> {
    Config c;
    set_fields(d->fields, model, c);
    return std::make_shared<Bound>(self, d, std::move(c));
  };
  t.check_keys = [d](json& model, Validator& v) {
    check_parts(d->fields, model, "model", v);
    check_values(d->fields, model, "model", v);
  };
  return t;
}

struct NoKeys {};

struct QuadraticConfig {
  size_t dim{};
  // h as given: one value for every coordinate, a list of dim values, or {min, max}
  // log-spaced over the dim coordinates (made into dim floats when built: curvature_of).
  enum class Curvature { Value, List, Range } form{};
  std::vector<double> curvature;  // Value: {h}; List: the list; Range: {min, max}
  double noise{}, init{};
};

// The dim values of h (the model computes in fp32).
std::vector<float> curvature_of(const QuadraticConfig& q) {
  using Form = QuadraticConfig::Curvature;
  std::vector<float> h(q.dim, 0.0f);
  const size_t dim = q.dim;
  if (q.form == Form::Value)
    std::fill(h.begin(), h.end(), float(q.curvature[0]));
  else if (q.form == Form::List) {
    if (q.curvature.size() != dim)  // reported at validation (the check below); an object built in code
      throw std::invalid_argument("model quadratic: curvature has " + std::to_string(q.curvature.size()) +
                                  " values but dim is " + std::to_string(dim));
    for (size_t i = 0; i < dim; ++i) h[i] = float(q.curvature[i]);
  } else {
    const double lo = q.curvature[0], hi = q.curvature[1];
    for (size_t i = 0; i < dim; ++i) h[i] = float(dim == 1 ? lo : lo * std::pow(hi / lo, double(i) / double(dim - 1)));
  }
  return h;
}

struct DenseConfig {
  std::vector<int> hidden;
  Activation activation{};
};

struct CnnConfig {
  std::string arch;  // "lenet5": conv and hidden are LeNet-5's (resolve wrote them)
  std::vector<ConvSpec> conv;
  std::vector<int> hidden;
  Activation activation{};
};

template <class S>
Field<S> activation_field(Activation S::*member, const char* doc) {
  return choice_field(member, str("activation", "relu", doc), {{"relu", Activation::ReLU}, {"tanh", Activation::Tanh}});
}

// The model computes in fp32: a curvature that float rounds to 0 or to infinity is not
// the one asked for (issue 31: 1e-50 passed as "> 0" and trained a flat model).
std::string unless_in_float(double h) {
  return float_positive_finite(h) ? "" : brief(json(h)) + " is 0 or infinite in float" + kFloatRange;
}

// model.curvature {min, max}: h log-spaced from min to max over the dim coordinates.
struct CurvatureRange {
  double min{}, max{};
};
const Section<CurvatureRange>& curvature_range_section() {
  using R = CurvatureRange;
  static const Section<R> s{"model.curvature",
                            "h log-spaced over the dim coordinates",
                            {field(&R::min, num("min", nullptr, "smallest curvature", 0, true)),
                             field(&R::max, num("max", nullptr, "largest curvature", 0, true))},
                            nullptr,
                            [](const json& r, const std::string& path, Validator& v) {
                              if (r["max"].get<double>() < r["min"].get<double>())
                                v.error(path, "curvature.max must be >= curvature.min");
                              for (const char* k : {"min", "max"})
                                if (const std::string why = unless_in_float(r[k].get<double>()); !why.empty())
                                  v.error(join_path(path, k), why);
                            }};
  return s;
}

ModelType quadratic() {
  using C = QuadraticConfig;
  using Form = C::Curvature;
  const ParamInfo h = num("curvature", nullptr, "one coordinate's curvature", 0, true);
  ModelHooks<C> hooks;
  hooks.build = [](const C& q, const ModelInput&) {
    return make_quadratic(curvature_of(q), float(q.noise), float(q.init));
  };
  hooks.params_unbuilt = [](const C& q) { return double(q.dim); };
  hooks.check = [](const C& q, const ModelRunView&, Validator& v) {
    if (q.form == Form::List && q.curvature.size() != q.dim)
      v.error("model.curvature",
              "list has " + std::to_string(q.curvature.size()) + " values but model.dim is " + json(q.dim).dump());
  };
  return model_type<C>(
      "quadratic", "f(w) = 1/2 sum_i h_i w_i^2 (optimum 0), with optional gradient noise; reads no data",
      ModelType::Reads::None, ModelType::Task::Regression,
      {field(&C::dim, integer("dim", 100, "number of parameters", 1)),
       shaped<C>(any("curvature", 1.0, "h: a number, a list of dim numbers, or {min, max} log-spaced"),
                 {{number_shape<C>(number_check(h, unless_in_float),
                                   [](C& q, const json& c) {
                                     q.form = Form::Value;
                                     q.curvature = {c.get<double>()};
                                   }),
                   list_shape<C>(number_check(h, unless_in_float), 1,
                                 [](C& q, const json& c) {
                                   q.form = Form::List;
                                   q.curvature = c.get<std::vector<double>>();
                                 }),
                   object_shape<C>(
                       [](json& c, const std::string& path, Validator& v) {
                         CurvatureRange unused;  // bound by the setter, from the checked object
                         c = curvature_range_section().bind(c, path, v, unused);
                       },
                       [](C& q, const json& c) {
                         CurvatureRange r;
                         set_fields(curvature_range_section().fields, c, r);
                         q.form = Form::Range;
                         q.curvature = {r.min, r.max};
                       })},
                  "a number > 0, a list of them, or {\"min\": a, \"max\": b}",
                  [](const C& q) -> json {
                    if (q.form == Form::Value) return q.curvature[0];
                    if (q.form == Form::List) return q.curvature;
                    return {{"min", q.curvature[0]}, {"max", q.curvature[1]}};
                  }}),
       field(&C::noise, num("noise", 0.0, "std of N(0, noise^2) added to each gradient coordinate", 0)),
       field(&C::init, num("init", 1.0, "every coordinate starts here"))},
      std::move(hooks));
}

ModelType dense(std::string name, std::string doc, ModelType::Task task, DenseLoss loss, bool logits_per_class) {
  ModelHooks<NoKeys> hooks;
  hooks.build = [loss, logits_per_class](const NoKeys&, const ModelInput& in) {
    return make_dense({int(in.dim), logits_per_class ? in.classes : 1}, loss);
  };
  return model_type<NoKeys>(std::move(name), std::move(doc), ModelType::Reads::Dense, task, {}, std::move(hooks));
}

ModelType mlp() {
  using C = DenseConfig;
  return model_type<C>(
      "mlp", "multi-layer perceptron: dense hidden layers, each followed by the activation; softmax cross-entropy",
      ModelType::Reads::Dense, ModelType::Task::Classifier,
      {field(&C::hidden, list("hidden", ParamType::IntegerList, json::array({128}), "hidden layer sizes", 1)),
       activation_field(&C::activation, "after every hidden layer")},
      {[](const C& c, const ModelInput& in) {
        std::vector<int> layers{int(in.dim)};
        layers.insert(layers.end(), c.hidden.begin(), c.hidden.end());
        layers.push_back(in.classes);
        return make_dense(layers, DenseLoss::SoftmaxCrossEntropy, c.activation);
      }});
}

ModelType cnn() {
  using C = CnnConfig;
  ModelHooks<C> hooks;
  hooks.build = [](const C& c, const ModelInput& in) {
    return make_cnn(in.shape, CnnSpec{c.conv, c.hidden, c.activation}, in.classes);
  };
  // Each block's shape on the data's images, so that a kernel or a pool window larger
  // than its input is reported at its key.
  hooks.check = [](const C& c, const ModelRunView& run, Validator& v) {
    const std::optional<Shape> image = run.data.image();
    if (!image) {
      if (run.data.config_as<SyntheticSpec>())
        v.error("data.image", "model 'cnn' reads images: give the samples' shape, [channels, height, width]");
      return;
    }
    try {
      cnn_block_shapes(*image, c.conv);
    } catch (const CnnShapeError& e) {
      v.error(index_path("model.conv", e.block) + "." + e.key,
              std::string(e.what()) + " (conv block " + std::to_string(e.block) + "; the data's images are " +
                  image->text() + ", height x width x channels)");
    }
  };
  ModelType t = model_type<C>(
      "cnn",
      "convolutional network on the data's images (Fashion-MNIST: 28x28x1; synthetic data: data.image): conv "
      "blocks (convolution, activation, max-pool), flatten, dense hidden layers with the activation, softmax "
      "cross-entropy",
      ModelType::Reads::Dense, ModelType::Task::Classifier,
      {field(&C::arch,
             str("arch", "custom",
                 "\"lenet5\": the LeNet-5 layers (conv and hidden as their defaults say), and conv and hidden "
                 "must be left out; \"custom\": conv and hidden as given",
                 {"custom", "lenet5"})),
       shaped<C>(any("conv", lenet5_conv_json(),
                     "the convolution blocks in order: a list of {channels, kernel, stride, padding, pool} (section "
                     "model.conv[])"),
                 {{list_shape<C>(
                      [](json& block, const std::string& path, Validator& v) {
                        ConvSpec unused;  // bound by the setter, from the checked blocks
                        block = conv_block_section().bind(block, path, v, unused);
                      },
                      0,
                      [](C& c, const json& blocks) {  // every block's keys filled
                        c.conv.clear();
                        for (const auto& b : blocks) {
                          ConvSpec block;
                          set_fields(conv_block_section().fields, b, block);
                          c.conv.push_back(block);
                        }
                      })},
                  "a list of {channels, kernel, stride, padding, pool}",
                  [](const C& c) {
                    json out = json::array();
                    for (const ConvSpec& b : c.conv) out.push_back(conv_json(b));
                    return out;
                  }}),
       field(&C::hidden,
             list("hidden", ParamType::IntegerList, json(lenet5().hidden), "dense layer sizes after flattening", 1)),
       activation_field(&C::activation, "after every convolution and hidden layer")},
      std::move(hooks));
  // the lenet5 preset (a model of arch lenet5 is an object, as the user gave it)
  t.resolve = [](const json& user, json& model, Validator& v) {
    if (text_of(model, "arch") != "lenet5") return;
    for (const char* k : {"conv", "hidden"})
      if (user.contains(k))
        v.error(std::string("model.") + k,
                "arch \"lenet5\" sets the layers: leave out conv and hidden, or use arch "
                "\"custom\"");
    model["conv"] = lenet5_conv_json();
    model["hidden"] = lenet5().hidden;
  };
  return t;
}

ModelType sparse_linear(std::string name, std::string doc, ModelType::Task task) {
  const bool binary = task == ModelType::Task::Binary;
  const std::string n = name;
  ModelHooks<NoKeys> hooks;
  hooks.build = [binary, n](const NoKeys&, const ModelInput& in) {
    if (binary && in.classes != 2)
      throw DataError("model " + n + " is binary, but the data (" + in.description + ") has " +
                      std::to_string(in.classes) + " classes: use sparse_softmax");
    return make_sparse_linear(in.dim, in.classes, binary ? DenseLoss::Logistic : DenseLoss::SoftmaxCrossEntropy);
  };
  return model_type<NoKeys>(std::move(name), std::move(doc), ModelType::Reads::Sparse, task, {}, std::move(hooks));
}

// A PyTorch module, run by the provider the Python package installs (sim/models/external.h).
ModelType torch_model() {
  using C = ExternalModelConfig;
  ModelType t = model_type<C>(
      "torch",
      "a PyTorch nn.Module from Python (docs/python.md): each gradient job loads the parameters the engine "
      "hands it, runs forward and backward on its minibatch and returns the flat gradient; reads native dense data "
      "(synthetic, fashion_mnist) or data.type torch. Runs from Python only (python3 -m asgdsim run, asgdsim.run)",
      ModelType::Reads::External, ModelType::Task::Classifier,
      {field(&C::module, str("module", "",
                             "FILE.py:FACTORY: a zero-argument function in FILE (relative to the config's folder) "
                             "that returns the nn.Module; \"\": the caller gives it (asgdsim.run(model=...), "
                             "python3 -m asgdsim run --model)")),
       field(&C::loss, str("loss", "",
                           "FILE.py:FUNCTION: loss(outputs, targets) -> scalar tensor; \"\": the caller's (loss=), "
                           "else cross-entropy")),
       field(&C::threads, integer("threads", 1,
                                  "torch intra-op threads of each gradient job and evaluation (part of the config: "
                                  "another count can change the bits)",
                                  1, 1024)),
       field(&C::bn_samples, integer("bn_samples", 2048,
                                     "training samples (the first so many) whose batch statistics recompute the "
                                     "BatchNorm running statistics of the parameters of record at each evaluation "
                                     "(0: keep the module's own)",
                                     0, 1e9))},
      {[](const C& c, const ModelInput& in) -> std::unique_ptr<Model> {
        std::shared_ptr<ExternalProvider> p = external_provider();
        if (!p) throw UsageError(external_provider_missing("model.type"));
        return p->build_model(c, in, ExternalContext{in.base_dir});
      }});
  t.data = "torch";
  return t;
}

}  // namespace

const TypeFamily<ModelType>& model_family() {
  using Task = ModelType::Task;
  static const TypeFamily<ModelType> family(
      "model type", "type",
      {
          quadratic(),
          dense("linear", "linear regression, squared loss (synthetic regression data)", Task::Regression,
                DenseLoss::Squared, false),
          dense("logistic", "logistic regression, binary labels (synthetic classification, classes 2)", Task::Binary,
                DenseLoss::Logistic, false),
          dense("softmax", "softmax regression, cross-entropy", Task::Classifier, DenseLoss::SoftmaxCrossEntropy, true),
          mlp(),
          cnn(),
          sparse_linear(
              "sparse_logistic",
              "logistic regression on sparse data (sparse_synthetic or svmlight, 2 classes); a gradient touches "
              "only the rows of the features in its minibatch",
              Task::Binary),
          sparse_linear("sparse_softmax",
                        "softmax regression on sparse data (sparse_synthetic or svmlight), cross-entropy; a gradient "
                        "touches only the rows of the features in its minibatch",
                        Task::Classifier),
          torch_model(),
      });
  return family;
}

const std::vector<ModelType>& model_types() { return model_family().types(); }
const ModelType* find_model_type(const std::string& name) { return model_family().find(name); }
const ModelType& model_type_of(const json& model) { return model_family().type_of(model); }
const std::vector<ComponentInfo>& model_catalog() { return model_family().catalog(); }

const Section<ConvSpec>& conv_block_section() {
  using B = ConvSpec;
  const ConvSpec defaults;  // the block's defaults are ConvSpec's (kernels/model.h)
  static const Section<B> s{
      "model.conv[]",
      "one convolution block of model cnn: convolution, the activation, then max-pooling",
      {field(&B::channels, integer("channels", nullptr, "filters (output channels)", 1, 4096)),
       field(&B::kernel, integer("kernel", nullptr, "the filters' side (kernel x kernel)", 1, 1024)),
       field(&B::stride, integer("stride", defaults.stride, "step between windows", 1, 1024)),
       field(&B::padding,
             integer("padding", defaults.padding, "zeros added on every side of the input (< kernel)", 0, 1023)),
       field(&B::pool, integer("pool", defaults.pool,
                               "max-pool window and stride after the activation (1: none); rows and columns past the "
                               "last whole window are dropped",
                               1, 1024))}};
  return s;
}

const std::vector<ParamInfo>& conv_block_params() {
  static const std::vector<ParamInfo> p = conv_block_section().params();
  return p;
}

json resolve_model(const json& user, Validator& v, std::shared_ptr<const BoundModel>& out) {
  return model_family().resolve(user, "model", v, out, [&](const ModelType& t, json& model) {
    if (t.resolve) t.resolve(user, model, v);
    if (t.check_keys) t.check_keys(model, v);
  });
}

void check_model_data(const ModelType* t, const BoundModel* bound, const std::string& d, const BoundData* data,
                      Validator& v) {
  if (!t) return;
  const std::string& m = t->name;
  using Reads = ModelType::Reads;
  using Task = ModelType::Task;
  using Layout = DataType::Layout;
  // the model's own checks against the data, where both objects are valid (bound)
  auto own = [&] {
    if (bound && data) bound->check(ModelRunView{*data}, v);
  };
  // what the data's samples are (an unknown type, reported at data.type, counts as dense)
  const DataType* data_type = find_data_type(d);
  const Layout layout = data_type ? data_type->layout : Layout::Dense;
  if (t->reads == Reads::External) {  // any dense samples, native or its own; the module's loss says the task
    if (layout != Layout::Dense && layout != Layout::External)
      v.error("data.type", "model '" + m + "' reads dense samples: " + data_type_names(Layout::Dense) + " or " +
                               data_type_names(Layout::External) + " (got '" + d + "')");
    own();
    return;
  }
  if (layout == Layout::External) {
    v.error("data.type",
            "data '" + d + "' lives outside the simulator: only model.type torch reads it, not '" + m + "'");
    return;
  }
  if (t->reads == Reads::None) {
    if (layout != Layout::None)
      v.error("data.type", "the " + m + " model reads no data: use \"none\" (got '" + d + "')");
    own();
    return;
  }
  const bool sparse_model = t->reads == Reads::Sparse;
  const bool sparse_data = layout == Layout::Sparse;
  const std::string sparse_sets = data_type_names(Layout::Sparse), dense_sets = data_type_names(Layout::Dense);
  if (layout == Layout::None) {
    v.error("data.type", "model '" + m + "' needs data: " + (sparse_model ? sparse_sets : dense_sets));
    return;
  }
  if (sparse_model != sparse_data) {
    v.error("data.type", sparse_model ? "model '" + m + "' reads sparse data: " + sparse_sets + " (got '" + d + "')"
                                      : "model '" + m + "' reads dense data: " + dense_sets + "; for '" + d +
                                            "' use sparse_logistic or sparse_softmax");
    return;
  }
  if (!data) return;  // the data's own keys were reported: what follows reads them
  if (sparse_model) {
    if (const auto* s = data->config_as<SparseSyntheticSpec>()) {
      if (s->nnz > s->features)
        v.error("data.nnz", "must be <= data.features (" + std::to_string(s->features) +
                                "): each sample takes one "
                                "feature from each of nnz fields");
      if (t->task == Task::Binary && s->classes != 2)
        v.error("data.classes", "model '" + m + "' is binary: use classes 2, or sparse_softmax");
    }
    if (const auto* s = data->config_as<SvmlightSpec>(); s && t->task == Task::Binary && s->classes > 2)
      v.error("data.classes", "model '" + m + "' is binary: use classes 0 (from the labels) or 2, or sparse_softmax");
    own();
    return;
  }
  const bool regression = regression_data(*data);
  if (t->task == Task::Regression && !regression)
    v.error("data", "model '" + m + "' is a regression model: use synthetic data with task \"regression\"");
  if (t->task != Task::Regression && regression)
    v.error("data.task", "model '" + m + "' is a classifier: use task \"classification\"");
  const SyntheticSpec* synthetic = data->config_as<SyntheticSpec>();
  if (t->task == Task::Binary && !(synthetic && synthetic->classes == 2))
    v.error("data", "model '" + m + "' is binary: use synthetic classification data with classes 2");
  own();
}

std::shared_ptr<const BoundModel> bind_model(const json& model) { return model_family().bind(model); }

std::unique_ptr<Model> build_model(const json& model, const ModelInput& input) {
  return bind_model(model)->build(input);
}

}  // namespace asgd
