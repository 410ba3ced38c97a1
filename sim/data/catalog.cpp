// sim/data/catalog.cpp — the data sets, each with its keys, derived keys, sizes, file checks
// and loader (see catalog.h).
#include "sim/data/catalog.h"
#include <unistd.h>
#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include "sim/data/sparse_synthetic.h"
#include "sim/data/svmlight_reader.h"
#include "sim/data/external_data.h"

namespace asgd {
namespace {

using keys::integer;
using keys::list;
using keys::num;
using keys::str;
using Layout = DataType::Layout;

constexpr double kFloat = 4;  // bytes per stored value

// A data set whose keys fill `Config` (declared with field(), sim/config/field.h: every
// field with a getter): bind sets a Config from the validated object once, and the hooks
// read it. A labelled set also accepts the partition keys (bound to the BoundData's
// PartitionSpec, not to Config). `hooks.load` is empty exactly for a set of layout None.
template <class Config>
DataType data_type(std::string name, std::string doc, Layout layout, bool labelled, bool seeded,
                   std::vector<Field<Config>> fields, DataHooks<Config> hooks) {
  if ((layout == Layout::None) != !hooks.load)
    throw std::logic_error("data type " + name + ": a loader iff it has samples");
  using Bound = BoundDataOf<Config>;
  DataType t;
  t.name = std::move(name);
  t.doc = std::move(doc);
  t.params = params_of(fields);
  if (labelled)
    for (const auto& f : partition_fields()) t.params.push_back(f.info);
  t.layout = layout;
  t.labelled = labelled;
  t.seeded = seeded;
  auto d =
      std::make_shared<const typename Bound::Declared>(typename Bound::Declared{std::move(fields), std::move(hooks)});
  t.bind = [d](const DataType& self, const json& data) -> std::shared_ptr<BoundData> {
    Config c;
    set_fields(d->fields, data, c);
    PartitionSpec partition;
    if (self.labelled) set_fields(partition_fields(), data, partition);
    return std::make_shared<Bound>(self, std::move(partition), d, std::move(c));
  };
  t.resolve = [d](const json& user, json& data, Validator& v) {
    check_values(d->fields, data, "data", v);
    if (!d->hooks.derive) return;
    Config c;  // its valid keys, typed (one with an issue, reported at its path in `v`, keeps Config's value)
    Validator reported_in_v;
    bind_fields_of(d->fields, data, "data", reported_in_v, c);
    d->hooks.derive(c, user, data, v);
  };
  return t;
}

// A dense set's sizes: flat samples unless `image`; inputs and labels stored as floats.
DataShape dense_shape(double train, double test, double in, int classes, std::optional<Shape> image) {
  DataShape d;
  d.train = train;
  d.test = test;
  d.in = in;
  d.classes = classes;
  d.image = image ? *image : Shape{1, 1, int(std::min(in, 2e9))};
  d.stored_values = (train + test) * (in + 1);
  return d;
}

// ---- none: the quadratic model's nominal epoch ----

struct NoneKeys {
  size_t samples{};
};

DataType none() {
  using C = NoneKeys;
  DataHooks<C> hooks;
  hooks.shape = [](const C& c) {
    DataShape d = dense_shape(double(c.samples), 0, 0, 0, std::nullopt);
    d.samples_key = "data.samples";
    return d;
  };
  return data_type<C>("none", "no data (quadratic model); samples only define the epoch length", Layout::None,
                      /*labelled=*/false, /*seeded=*/false,
                      {field(&C::samples, integer("samples", 1024, "nominal samples per epoch", 1))}, std::move(hooks));
}

// ---- synthetic: Gaussian inputs, a random teacher ----

// data.image's longest side: the image's values per sample (their product) then fit an
// int64, and a product over data.features' range is reported as a number.
constexpr double kMaxImageSide = 1000000;

// data.image: [channels, height, width] (stored channels last), or [] for flat samples.
Field<SyntheticSpec> image_field() {
  using C = SyntheticSpec;
  ParamInfo info = list("image", ParamType::IntegerList, json::array(),
                        "the samples' shape as images, [channels, height, width] (features is then their product; "
                        "stored channels last); [] = flat",
                        1);
  info.max = kMaxImageSide;
  Field<C> f = field<C>(
      std::move(info),
      [](C& s, const json& v) {
        const auto i = v.get<std::vector<int>>();
        s.image = i.size() == 3 ? std::optional<Shape>(Shape{i[1], i[2], i[0]}) : std::nullopt;
      },
      [](const C& s) {
        return s.image ? json{s.image->channels, s.image->height, s.image->width} : json::array();
      });
  f.why_not = [](const json& image) {  // a list of integers in range (the validator's)
    return image.empty() || image.size() == 3
               ? std::string()
               : "expected [channels, height, width] (or [] for flat samples), got " + brief(image);
  };
  return f;
}

DataType synthetic() {
  using C = SyntheticSpec;
  const ParamInfo features = integer("features", 20, "input dimension", 1, 100000);
  DataHooks<C> hooks;
  hooks.shape = [](const C& c) {
    return dense_shape(double(c.train_samples), double(c.test_samples), double(c.features),
                       c.classification ? c.classes : 0, c.image);
  };
  hooks.load = [](const C& c, const DataLoadContext& ctx) { return make_synthetic(c, ctx.seed); };
  hooks.image = [](const C& c) { return c.image; };
  // features, when left out, is the image's values per sample; given, it must be that
  hooks.derive = [features](const C& c, const json& user, json& data, Validator& v) {
    if (!c.image) return;  // flat, or an image with an issue of its own
    const Shape& i = *c.image;
    const int64_t product = int64_t(i.channels) * i.height * i.width;  // (each side <= kMaxImageSide)
    const std::string image = json{i.channels, i.height, i.width}.dump();
    const bool given = user.contains("features");
    // features derived from the image must respect features' own range (issue 31)
    const double cap = effective_max(features);
    if (!given && double(product) > cap) {
      v.error("data.image", image + " holds " + std::to_string(product) +
                                " values per sample, more than data.features may be (" + brief(json(cap)) + ")");
      return;
    }
    if (!given)
      data["features"] = product;
    else if (!reported_at(v, "data.features") && int64_t(c.features) != product)
      v.error("data.features", "is " + std::to_string(c.features) + " but data.image " + image + " holds " +
                                   std::to_string(product) + " values per sample: leave features out, or set it to " +
                                   std::to_string(product));
  };
  return data_type<C>(
      "synthetic", "generated from the seed: Gaussian inputs, a random teacher model", Layout::Dense,
      /*labelled=*/true, /*seeded=*/true,
      {choice_field(&C::classification,
                    str("task", "classification", "classification or regression", {"classification", "regression"}),
                    {{"classification", true}, {"regression", false}}),
       field(&C::classes, integer("classes", 10, "classes (classification)", 2, 1000)), field(&C::features, features),
       field(&C::train_samples, integer("train_samples", 4096, "training samples", 1, 1e8)),
       field(&C::test_samples, integer("test_samples", 1024, "test samples", 1, 1e8)),
       field(&C::noise, num("noise", 0.1, "std of noise on the teacher's logits or targets", 0)), image_field()},
      std::move(hooks));
}

// ---- fashion_mnist: IDX files ----

// The files' sizes (images 28 x 28, one channel).
constexpr double kFashionTrain = 60000, kFashionTest = 10000, kFashionPixels = 784;

struct FashionMnistKeys {
  std::string path;
  size_t train_limit{}, test_limit{};
};

DataType fashion_mnist() {
  using C = FashionMnistKeys;
  DataHooks<C> hooks;
  hooks.shape = [](const C& c) {
    const double tl = double(c.train_limit), sl = double(c.test_limit);
    DataShape d = dense_shape(tl > 0 ? std::min(tl, kFashionTrain) : kFashionTrain,
                              sl > 0 ? std::min(sl, kFashionTest) : kFashionTest, kFashionPixels, 10, Shape{28, 28, 1});
    d.raw_bytes = (kFashionTrain + kFashionTest) * (kFashionPixels + 1);
    return d;
  };
  hooks.load = [](const C& c, const DataLoadContext& ctx) {
    return load_fashion_mnist(data_path(c.path, ctx.base_dir), c.train_limit, c.test_limit);
  };
  hooks.image = [](const C&) { return std::optional<Shape>(Shape{28, 28, 1}); };
  hooks.check_files = [](const C& c, const std::string& base_dir, Validator& v) {
    const std::string problem = fashion_mnist_missing(data_path(c.path, base_dir));
    if (!problem.empty()) v.error("data.path", problem);
  };
  return data_type<C>(
      "fashion_mnist", "Fashion-MNIST (28x28 grey images, 10 classes) from IDX files", Layout::Dense,
      /*labelled=*/true, /*seeded=*/false,
      {field(&C::path,
             str("path", kFashionMnistDir, "folder with the four IDX .gz files (Debian: dataset-fashion-mnist)")),
       field(&C::train_limit, integer("train_limit", 0, "use only the first so many training images (0 = all 60000)")),
       field(&C::test_limit, integer("test_limit", 0, "use only the first so many test images (0 = all 10000)"))},
      std::move(hooks));
}

// ---- sparse_synthetic: generated CTR-like data ----

DataType sparse_synthetic() {
  using C = SparseSyntheticSpec;
  DataHooks<C> hooks;
  hooks.shape = [](const C& c) {
    DataShape d;
    d.sparse = true;
    d.in = double(c.features);
    d.classes = c.classes;
    d.train = double(c.train_samples);
    d.test = double(c.test_samples);
    d.features_per_sample = double(c.nnz);
    d.stored_values = (double(sparse_bytes(uint64_t(d.train), uint64_t(d.train * d.features_per_sample))) +
                       double(sparse_bytes(uint64_t(d.test), uint64_t(d.test * d.features_per_sample)))) /
                      kFloat;
    return d;
  };
  hooks.load = [](const C& c, const DataLoadContext& ctx) { return make_sparse_synthetic(c, ctx.seed); };
  return data_type<C>(
      "sparse_synthetic",
      "sparse click-through-like classification data generated from the seed: nnz one-hot fields, Zipf feature "
      "popularity within each, labels from a hidden linear teacher (the sparse models' default data)",
      Layout::Sparse, /*labelled=*/true, /*seeded=*/true,
      {field(&C::features, integer("features", 100000, "features, split into nnz equal fields", 1, 1e7)),
       field(&C::nnz, integer("nnz", 20, "features per sample: one from each field (<= features)", 1, 1000)),
       field(&C::zipf, num("zipf", 1.1,
                           "popularity exponent: a field's feature of rank k is drawn with probability ~ k^-zipf "
                           "(0: uniform)",
                           0, false, 5)),
       field(&C::classes, integer("classes", 2, "classes", 2, 1000)),
       field(&C::train_samples, integer("train_samples", 10000, "training samples", 1, 1e8)),
       field(&C::test_samples, integer("test_samples", 2000, "test samples", 1, 1e8)),
       field(&C::noise, num("noise", 0.1, "std of the noise on the teacher's logits", 0))},
      std::move(hooks));
}

// ---- svmlight: LIBSVM text files ----

DataType svmlight() {
  using C = SvmlightSpec;
  DataHooks<C> hooks;
  hooks.shape = [](const C& c) {  // measured when read: the samples, and the sizes the config leaves at 0
    DataShape d;
    d.sparse = true;
    d.in = double(c.features);
    d.classes = c.classes;
    return d;
  };
  hooks.load = [](C c, const DataLoadContext& ctx) {
    c.path = data_path(c.path, ctx.base_dir);
    c.test_path = data_path(c.test_path, ctx.base_dir);
    DataSplit split = load_svmlight(c);
    // The files told the features and classes the config left at 0: the model built on
    // them must fit too (an index of 2147483647, or a label of 1e9, in a 1 KB file).
    if ((c.features == 0 || c.classes == 0) && ctx.check_sizes) {
      const HostDataset& t = split.train;
      std::string from = "data.path: " + c.path + (c.test_path.empty() ? "" : " and " + c.test_path) + " (";
      if (c.features == 0)
        from += "its largest feature index is " + std::to_string(int64_t(t.dim) - 1 + c.index_base) +
                (c.classes == 0 ? "; " : ")");
      if (c.classes == 0) from += "its labels make " + std::to_string(t.classes) + " classes)";
      ctx.check_sizes(t.dim, t.classes, from);
    }
    return split;
  };
  hooks.check_files = [](const C& c, const std::string& base_dir, Validator& v) {
    for (const auto& [key, path] : {std::make_pair("path", &c.path), std::make_pair("test_path", &c.test_path)}) {
      const std::string p = data_path(*path, base_dir);
      if (!p.empty() && ::access(p.c_str(), R_OK) != 0)
        v.error(std::string("data.") + key, p + ": cannot be read: " + std::strerror(errno));
    }
  };
  return data_type<C>(
      "svmlight", "LIBSVM/svmlight text files (RCV1, news20, Criteo in LIBSVM form), plain or gzip (sparse models)",
      Layout::Sparse, /*labelled=*/true, /*seeded=*/false,
      {field(&C::path, str("path", nullptr, "training file (a relative path is from the config's folder)")),
       field(&C::test_path, str("test_path", "",
                                "test file; empty: the last `holdout` share of path's samples is the "
                                "test set")),
       field(&C::holdout,
             num("holdout", 0.1, "share of path's samples held out as the test set when test_path is empty", 0, true,
                 0.9)),
       field(&C::features,
             integer("features", 0, "features (indices beyond are errors); 0: one past the largest index in the files",
                     0, 2147483647)),
       field(&C::index_base, integer("index_base", 1, "index of the first feature: 1 (LIBSVM) or 0", 0, 1)),
       field(&C::classes,
             integer("classes", 0, "classes; 0: from the labels (-1/+1: 2; else the largest class number + 1)", 0,
                     1000))},
      std::move(hooks));
}

}  // namespace

const std::vector<Field<PartitionSpec>>& partition_fields() {
  using P = PartitionSpec;
  static const std::vector<Field<P>> f = {
      choice_field(&P::kind,
                   str("partition", "iid",
                       "how the training set is split over the workers: \"iid\" one shared sample stream; \"shards\" "
                       "label-sorted shards dealt to the workers; \"dirichlet\" each class split over the workers by "
                       "Dirichlet(alpha) shares, unequal sizes (Yurochkin et al. 2019; NIID-Bench, Li et al. 2022); "
                       "\"dirichlet_mix\" each worker's label mix drawn from Dirichlet(alpha x the class prior), equal "
                       "sizes (Hsu, Qi & Brown 2019); each worker then draws from its own part"),
                   {{"iid", P::Kind::Iid},
                    {"shards", P::Kind::Shards},
                    {"dirichlet", P::Kind::Dirichlet},
                    {"dirichlet_mix", P::Kind::DirichletMix}}),
      field(&P::alpha, num("partition_alpha", 0.5,
                           "dirichlet, dirichlet_mix: concentration (0.1 highly skewed; large: near IID)", 0, true)),
      field(&P::shards, integer("partition_shards", 2, "shards: label-sorted shards per worker", 1, 1000000))};
  return f;
}

namespace {

// ---- torch: PyTorch datasets, loaded by the Python package's provider ----

DataType torch_data() {
  using C = ExternalDataConfig;
  DataHooks<C> hooks;
  hooks.shape = [](const C& c) {  // what the config says; the sets' own sizes are known once the provider loads them
    DataShape d = dense_shape(double(c.train_limit), double(c.test_limit), 0, c.classes, std::nullopt);
    d.stored_values = 0;  // held by Python, not by the simulator
    return d;
  };
  hooks.load = [](const C& c, const DataLoadContext& ctx) {
    std::shared_ptr<ExternalDataSource> p = external_data_source();
    if (!p) throw UsageError(external_provider_missing("data.type"));
    DataSplit split = p->load_data(c, ExternalContext{ctx.base_dir});
    if (split.train.classes > kMaxTorchClasses)  // data.classes 0: from the targets
      throw DataError(
          "data.type torch: the training set's targets make " +
          (split.train.classes == INT32_MAX ? std::string("2^31 - 1 or more") : std::to_string(split.train.classes)) +
          " classes (its largest target + 1), more than data.classes may be (" + std::to_string(kMaxTorchClasses) +
          "); check the targets, or give data.classes");
    return split;
  };
  return data_type<C>(
      "torch",
      "PyTorch datasets from Python (model.type torch only; docs/python.md): map-style, each item (input, target), "
      "or a pair of tensors",
      Layout::External, /*labelled=*/true, /*seeded=*/false,
      {field(&C::module, str("module", "",
                             "FILE.py:FACTORY: a zero-argument function in FILE (relative to the config's folder) "
                             "returning the training set, or (training set, test set); \"\": the caller gives them "
                             "(asgdsim.run(data=..., test_data=...), python3 -m asgdsim run --data)")),
       field(&C::train_limit, integer("train_limit", 0, "use only the first so many training samples (0 = all)")),
       field(&C::test_limit, integer("test_limit", 0, "use only the first so many test samples (0 = all)")),
       field(&C::classes, integer("classes", 0,
                                  "classes (accuracy, label partitions); 0: from the targets when they are integers "
                                  "(the largest + 1), else none (regression)",
                                  0, kMaxTorchClasses))},
      std::move(hooks));
}

}  // namespace

const TypeFamily<DataType>& data_family() {
  static const TypeFamily<DataType> family(
      "data type", "type", {none(), synthetic(), fashion_mnist(), sparse_synthetic(), svmlight(), torch_data()});
  return family;
}

const std::vector<DataType>& data_types() { return data_family().types(); }
const DataType* find_data_type(const std::string& name) { return data_family().find(name); }
const std::vector<ComponentInfo>& data_catalog() { return data_family().catalog(); }

std::string data_type_names(DataType::Layout layout) {
  return data_family().names(" or ", [layout](const DataType& t) { return t.layout == layout; });
}

json resolve_data(const json& user, const std::string& default_type, Validator& v,
                  std::shared_ptr<const BoundData>& out) {
  return data_family().resolve(
      user, "data", v, out, [&](const DataType& t, json& data) { t.resolve(user, data, v); }, {}, default_type);
}

std::shared_ptr<const BoundData> bind_data(const json& data) { return data_family().bind(data); }

json BoundData::object() const {
  json o = keys();
  o["type"] = type().name;
  return o;
}

json BoundData::share_key(uint64_t seed) const {
  json key = object();
  if (type().seeded) key["seed"] = seed;
  return key;
}

bool regression_data(const BoundData& data) {
  const SyntheticSpec* s = data.config_as<SyntheticSpec>();
  return s && !s->classification;
}

std::string data_path(const std::string& path, const std::string& base_dir) {
  return !path.empty() && path[0] != '/' && !base_dir.empty() ? base_dir + "/" + path : path;
}

}  // namespace asgd
