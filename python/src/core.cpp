// python/src/core.cpp — asgdsim._core: the simulator as the Python package sees it. The
// commands (validate, run, the catalog) go through the same C++ as `asgdsim validate/run/
// list`; a PyTorch model and datasets reach the runs through the one ExternalProvider
// slot (sim/models/external.h), implemented here over the package's Python side
// (python/asgdsim/_torch.py).
//
// Threads and the GIL: run() releases the GIL for the whole experiment; a worker thread
// that needs Python (a gradient, an evaluation, building the model, loading the data)
// takes the job lock first, then the GIL, so PyTorch jobs run one at a time — torch's
// random generator (dropout) is global, and each job seeds it from its own key — while
// everything else the simulator does runs beside them.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cmath>
#include <csignal>
#include <cstdint>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <vector>

#include "engines/powersgd.h"
#include "experiments/run/build_info.h"
#include "experiments/config/experiment_file.h"
#include "experiments/run/run_parts.h"
#include "experiments/run/runner.h"
#include "sim/base/errors.h"
#include "sim/base/interrupt.h"
#include "sim/config/validator.h"
#include "sim/data/catalog.h"
#include "sim/models/external.h"

namespace py = pybind11;
using namespace asgd;
using nlohmann::json;

namespace {

// A mistake in the user's model or data (a gradient of the wrong size, a dataset shorter
// than it says): invalid input, exit 2 on the command line.
struct ModelInputError : DataError {
  using DataError::DataError;
};

std::mutex& job_mutex() {
  static std::mutex m;
  return m;
}

// The Python exception as text with its traceback.
std::string python_error_text(py::error_already_set& e) {
  try {
    py::module_ tb = py::module_::import("traceback");
    py::list lines = tb.attr("format_exception")(e.type(), e.value(), e.trace());
    std::string text;
    for (auto line : lines) text += line.cast<std::string>();
    while (!text.empty() && text.back() == '\n') text.pop_back();
    return text;
  } catch (...) {
    return e.what();
  }
}

// Runs f() holding the job lock and then the GIL (in that order: a thread waiting for the
// lock never holds the GIL). A Python exception leaves as a C++ one: asgdsim.ModelError
// as ModelInputError (exit 2), anything else as std::runtime_error carrying the traceback
// and saying that `who` raised.
template <class F>
auto call_python(const char* what, F&& f, const char* who = "the PyTorch model") -> decltype(f()) {
  std::lock_guard<std::mutex> lock(job_mutex());
  py::gil_scoped_acquire gil;
  try {
    return f();
  } catch (py::error_already_set& e) {
    if (e.matches(PyExc_KeyboardInterrupt))  // a loop that polls asgdsim._core.interrupted()
      throw Interrupted(std::string("interrupted by a signal while ") + what);
    py::object model_error = py::module_::import("asgdsim.errors").attr("ModelError");
    const bool theirs = !e.matches(model_error.ptr());
    std::string text = theirs ? python_error_text(e) : py::str(e.value()).cast<std::string>();
    if (!theirs) throw ModelInputError(text);
    throw std::runtime_error(std::string(who) + " raised while " + what + ":\n" + text);
  }
}

// An array of backend (= host: the package builds the CPU backends) memory seen from
// NumPy without a copy; valid while the caller's pointer is.
template <class T>
py::array_t<T> view(const T* p, std::vector<py::ssize_t> shape) {
  return py::array_t<T>(shape, const_cast<T*>(p), py::capsule(p, [](void*) {}));
}

// The PyTorch module as a Model: each call is one call into its job (asgdsim._torch.Job).
class TorchModel final : public Model {
 public:
  TorchModel(py::object job, size_t params, bool classifier, int threads)
      : job_(std::move(job)), n_(params), classifier_(classifier), threads_(threads) {}
  ~TorchModel() override {
    py::gil_scoped_acquire gil;
    job_ = py::object();
  }
  std::string name() const override { return "torch"; }
  size_t num_params() const override { return n_; }
  bool is_classifier() const override { return classifier_; }
  int job_threads() const override { return threads_; }
  // Counted once, by asgdsim.flops (Job.flops), when dist "flops" first asks.
  double flops_per_sample() const override {
    count_flops();
    return flops_;
  }
  std::string flops_counter() const override {
    count_flops();
    return flops_counter_;
  }
  std::string code_identity() const override {
    return call_python("fingerprinting the module", [&] { return job_.attr("identity")().cast<std::string>(); });
  }

  void init_params(uint64_t seed, std::vector<float>& w) const override {
    call_python("making the initial parameters", [&] {
      py::array_t<float, py::array::c_style | py::array::forcecast> a = job_.attr("init_params")(seed);
      if (size_t(a.size()) != n_)
        throw ModelInputError("the module's factory made " + std::to_string(a.size()) + " parameters for seed " +
                              std::to_string(seed) + ", but it had " + std::to_string(n_) +
                              ": the factory must make the same module every time");
      w.assign(a.data(), a.data() + n_);
    });
  }

  double loss_grad(ExecContext&, const float* w, const DeviceDataset* data, const int32_t* ids, size_t m,
                   const NoiseKey& noise, float* grad) const override {
    return call_python("computing a gradient", [&] {
      py::object x = py::none(), y = py::none();
      if (data->external < 0) {  // native samples: the minibatch's rows, gathered
        py::array_t<float> xs({py::ssize_t(m), py::ssize_t(data->dim)});
        py::array_t<float> ys({py::ssize_t(m)});
        float* xd = xs.mutable_data();
        float* yd = ys.mutable_data();
        for (size_t i = 0; i < m; ++i) {
          std::memcpy(xd + i * data->dim, data->x.data() + size_t(ids[i]) * data->dim, data->dim * sizeof(float));
          yd[i] = data->y.data()[ids[i]];
        }
        x = xs;
        y = ys;
      }
      py::object loss = job_.attr("grad")(view(w, {py::ssize_t(n_)}), view(grad, {py::ssize_t(n_)}), data->external,
                                          view(ids, {py::ssize_t(m)}), x, y, noise.seed, noise.worker, noise.step);
      return loss.cast<double>();
    });
  }

  EvalSums evaluate(ExecContext&, const float* w, const DeviceDataset* data, size_t begin, size_t end) const override {
    return call_python("evaluating", [&] {
      py::object x = py::none(), y = py::none();
      if (data->external < 0 && end > begin) {
        x = view(data->x.data() + begin * data->dim, {py::ssize_t(end - begin), py::ssize_t(data->dim)});
        y = view(data->y.data() + begin, {py::ssize_t(end - begin)});
      }
      py::tuple r = job_.attr("evaluate")(view(w, {py::ssize_t(n_)}), data->external, begin, end, x, y);
      EvalSums s;
      s.loss_sum = r[0].cast<double>();
      s.correct = r[1].cast<double>();
      s.count = r[2].cast<size_t>();
      return s;
    });
  }

 private:
  void count_flops() const {
    if (flops_ >= 0) return;
    call_python("counting its FLOPs", [&] {
      py::tuple r = job_.attr("flops")();
      flops_counter_ = r[1].cast<std::string>();
      flops_ = r[0].cast<double>();
    });
  }

  py::object job_;
  size_t n_;
  bool classifier_;
  int threads_;
  mutable double flops_ = -1;  // < 0: not counted yet
  mutable std::string flops_counter_;
};

// The provider over asgdsim._torch.Bridge (the objects asgdsim.run was given).
class PythonProvider final : public ExternalProvider {
 public:
  explicit PythonProvider(py::object bridge) : bridge_(std::move(bridge)) {}
  ~PythonProvider() override {
    py::gil_scoped_acquire gil;
    bridge_ = py::object();
  }

  std::unique_ptr<Model> build_model(const ExternalModelConfig& c, const ModelInput& in,
                                     const ExternalContext& where) override {
    return call_python("building the model", [&]() -> std::unique_ptr<Model> {
      py::dict cfg;
      cfg["module"] = c.module;
      cfg["loss"] = c.loss;
      cfg["threads"] = c.threads;
      cfg["bn_samples"] = c.bn_samples;
      py::dict input;
      input["dim"] = in.dim;
      input["classes"] = in.classes;
      input["shape"] = py::make_tuple(in.shape.height, in.shape.width, in.shape.channels);
      input["base_dir"] = where.base_dir;
      input["description"] = in.description;
      if (in.train && in.train->external < 0 && in.train->n > 0) {  // native data: the training set, for BatchNorm
        input["train_x"] = view(in.train->x.data(), {py::ssize_t(in.train->n), py::ssize_t(in.train->dim)});
        input["train_y"] = view(in.train->y.data(), {py::ssize_t(in.train->n)});
      }
      py::object job = bridge_.attr("build_model")(cfg, input);
      return std::make_unique<TorchModel>(job, job.attr("num_params").cast<size_t>(), in.classes > 0, c.threads);
    });
  }

  DataSplit load_data(const ExternalDataConfig& c, const ExternalContext& where) override {
    return call_python("loading the data", [&] {
      py::dict cfg;
      cfg["module"] = c.module;
      cfg["train_limit"] = c.train_limit;
      cfg["test_limit"] = c.test_limit;
      cfg["classes"] = c.classes;
      cfg["base_dir"] = where.base_dir;
      py::dict r = bridge_.attr("load_data")(cfg);
      DataSplit split;
      // (a stray target of 10^12 must reach the data set's check as a class count, not overflow)
      const int classes = int(std::min<int64_t>(r["classes"].cast<int64_t>(), INT32_MAX));
      int id = 0;
      for (const char* part : {"train", "test"}) {
        HostDataset& h = id == 0 ? split.train : split.test;
        h.n = r[(std::string(part) + "_n").c_str()].cast<size_t>();
        h.classes = classes;
        h.external = id++;
        py::object labels = r[(std::string(part) + "_labels").c_str()];
        if (!labels.is_none()) {
          py::array_t<float, py::array::c_style | py::array::forcecast> a = labels;
          h.y.assign(a.data(), a.data() + a.size());
        }
      }
      split.description = r["description"].cast<std::string>();
      return split;
    });
  }

 private:
  py::object bridge_;
};

// The catalog as asgdsim.catalog() returns it: the plain sections and the families, each
// key with its type, range, default and doc (the declarations `asgdsim list` prints).
json param_json(const ParamInfo& p) {
  return {{"key", p.name},
          {"allowed", describe_allowed(p)},
          {"required", p.required()},
          {"default", p.required() ? json() : p.default_value},
          {"doc", p.doc}};
}

json catalog_json() {
  json out = {{"sections", json::array()}, {"families", json::array()}};
  for (const auto& s : section_catalog()) {
    json keys = json::array();
    for (const auto& p : s.params) keys.push_back(param_json(p));
    out["sections"].push_back({{"name", s.name}, {"doc", s.doc}, {"keys", keys}});
  }
  for (const auto& f : families()) {
    json members = json::array();
    for (const auto& c : f.catalog) {
      json keys = json::array();
      for (const auto& p : c.params) keys.push_back(param_json(p));
      members.push_back({{"name", c.name}, {"doc", c.doc}, {"keys", keys}});
    }
    out["families"].push_back({{"title", f.title}, {"key", f.key}, {"members", members}});
  }
  return out;
}

Experiment load(const std::string& config_text, const std::string& source, const std::string& base_dir,
                const std::vector<std::string>& sets, const std::string& default_name) {
  return load_experiment(json::parse(config_text), source, base_dir, sets, default_name);
}

// The experiment as validate shows it: the resolved config, each run, and validate's text
// and warnings as the command line prints them.
json experiment_json(const Experiment& exp) {
  json runs = json::array();
  for (const auto& r : exp.runs)
    runs.push_back({{"run_id", r.run_id}, {"engine", r.engine}, {"sweep", r.sweep_values}, {"seed", r.seed}});
  return {{"resolved", exp.resolved}, {"runs", runs}, {"text", runs_text(exp)}, {"warnings", exp.warnings}};
}

// The signal handler of a run from Python: as the command line's (the runs under way end
// as interrupted; a second signal leaves at once).
void on_signal(int) {
  if (interrupt_count().fetch_add(1) >= 1) _exit(130);
}

// One experiment at a time in this process: the provider slot and the interrupt flag are
// the process's.
std::mutex& run_mutex() {
  static std::mutex m;
  return m;
}

// Whether the error is, or wraps (std::throw_with_nested: the runner names the run), a
// break of the gradient contract that the package's Python side raised as ModelError.
bool is_model_error(const std::exception_ptr& error) {
  try {
    std::rethrow_exception(error);
  } catch (const ModelInputError&) {
    return true;
  } catch (const std::nested_exception& outer) {
    return outer.nested_ptr() && is_model_error(outer.nested_ptr());
  } catch (...) {
  }
  return false;
}

// Raises the C++ error as the package's exception (asgdsim.errors): its class by kind,
// its message as the command line prints it, its exit code; ConfigError with its issues.
[[noreturn]] void raise_as_python(std::exception_ptr error) {
  py::module_ errors = py::module_::import("asgdsim.errors");
  const int code = exit_code_of(error);
  std::string message = error_message(error);
  py::list issues;
  const char* kind = code == 2 ? "InputError" : "RunError";
  try {
    std::rethrow_exception(error);
  } catch (const ConfigError& e) {
    kind = "ConfigError";
    for (const auto& i : e.issues()) issues.append(py::make_tuple(i.path, i.message));
  } catch (const UsageError&) {
    kind = "InputError";
  } catch (...) {
  }
  if (is_model_error(error)) kind = "ModelError";  // a DataError, which is an InputError
  py::object cls = errors.attr(kind);
  py::object instance = cls(message, code, issues);
  PyErr_SetObject(cls.ptr(), instance.ptr());
  throw py::error_already_set();
}

// What asgdsim.run was handed beside the config, against what the runs read: a model or
// data set given while no run's type is "torch" would be silently ignored (the runs
// train the config's native model), and a run of type "torch" with neither the object
// nor a module file would fail only once its folder is made. Both are refused first.
void check_given(const Experiment& exp, bool model, bool loss, bool data, bool test_data) {
  std::string native_model, native_data;
  bool torch_model = false, torch_data = false;
  for (const RunSpec& r : exp.runs) {
    if (const auto* torch = r.bound_model->config_as<ExternalModelConfig>()) {
      torch_model = true;
      if (!model && torch->module.empty())
        throw UsageError("run " + r.run_id +
                         ": model.type \"torch\" but no model: give model= (an nn.Module or a "
                         "factory) or model.module FILE.py:FACTORY (python3 -m asgdsim run --model FILE.py:FACTORY)");
    } else if (native_model.empty()) {
      native_model = r.bound_model->type().name;
    }
    if (const auto* torch = r.bound_data->config_as<ExternalDataConfig>()) {
      torch_data = true;
      if (!data && torch->module.empty())
        throw UsageError("run " + r.run_id +
                         ": data.type \"torch\" but no data: give data= (and test_data=, or a "
                         "factory returning both) or data.module FILE.py:FACTORY (python3 -m asgdsim run --data "
                         "FILE.py:FACTORY)");
    } else if (native_data.empty()) {
      native_data = r.bound_data->type().name;
    }
  }
  const std::string given_model = model && loss ? "model= and loss= were" : model ? "model= was" : "loss= was";
  if ((model || loss) && !torch_model)
    throw UsageError(given_model + " given, but no run's model.type is \"torch\" (model.type is \"" + native_model +
                     "\"): the runs would train that model and never call yours; set model.type to \"torch\", or "
                     "leave model= out");
  const std::string given_data = data && test_data ? "data= and test_data= were"
                                 : data            ? "data= was"
                                                   : "test_data= was";
  if ((data || test_data) && !torch_data)
    throw UsageError(given_data + " given, but no run's data.type is \"torch\" (data.type is \"" + native_data +
                     "\"): the runs would read that data set and never yours; set data.type to \"torch\", or leave "
                     "data= out");
}

// A RunOptions field by its name, as T; a value of another type is a TypeError naming it
// and what it must be (`expected`).
template <class T>
T option(const py::object& options, const char* name, const char* expected) {
  py::object value = options.attr(name);
  try {
    return value.cast<T>();
  } catch (const py::cast_error&) {
    throw py::type_error(std::string("RunOptions.") + name + ": " + py::repr(value).cast<std::string>() + " is not " +
                         expected);
  }
}

template <class F>
auto translated(F&& f) -> decltype(f()) {
  try {
    return f();
  } catch (py::error_already_set&) {
    throw;
  } catch (const json::exception& e) {  // the config text the package hands in is its own JSON
    throw std::logic_error(std::string("asgdsim._core: bad JSON from the package: ") + e.what());
  } catch (...) {
    raise_as_python(std::current_exception());
  }
}

}  // namespace

PYBIND11_MODULE(_core, m) {
  m.doc() = "asgdsim's simulator (C++): validate, run, catalog. Use the asgdsim package, not this module.";
  m.attr("version") = build::version;
  m.attr("backend") = build::backend;
  m.attr("git_commit") = build::git_commit;
  m.attr("default_experiment_name") = kDefaultExperimentName;  // a dict config without "name"

  m.def(
      "catalog", [] { return catalog_json().dump(); }, "the config keys and families, as JSON text");
  m.def(
      "read_config", [](const std::string& path) { return translated([&] { return load_json_file(path).dump(); }); },
      "a config file's JSON as `asgdsim run` reads it (comments allowed; errors name line and column)");
  m.def(
      "initial_parameters",
      [](const std::string& config_text, const std::string& source, const std::string& base_dir, size_t run) {
        std::vector<float> w = translated([&] {
          Experiment exp = load(config_text, source, base_dir, {}, kDefaultExperimentName);
          if (run >= exp.runs.size())
            throw UsageError("run " + std::to_string(run) + ": the experiment has " + std::to_string(exp.runs.size()) +
                             " runs");
          const RunSpec& r = exp.runs[run];
          std::shared_ptr<LoadedData> data = load_data(r, exp.base_dir);
          std::vector<float> out;
          build_model(*r.bound_model, *data, exp.base_dir)->init_params(r.seed, out);
          return out;
        });
        return py::array_t<float>(py::ssize_t(w.size()), w.data());
      },
      "the initial parameters a native model of run `run` starts from (its flat layout: docs/python.md)",
      py::arg("config_text"), py::arg("source"), py::arg("base_dir"), py::arg("run") = 0);
  m.def(
      "interrupted", [] { return interrupt_requested(); },
      "whether Ctrl-C (SIGINT, SIGTERM) came during asgdsim.run: Python loops that the simulator waits on poll it");
  m.def("name_from_path", &name_from_path, "the experiment name `asgdsim run` gives a config file without one");

  m.def(
      "validate",
      [](const std::string& config_text, const std::string& source, const std::string& base_dir,
         const std::vector<std::string>& sets, const std::string& default_name) {
        return translated(
            [&] { return experiment_json(load(config_text, source, base_dir, sets, default_name)).dump(); });
      },
      py::arg("config_text"), py::arg("source"), py::arg("base_dir"), py::arg("sets"), py::arg("default_name"));

  m.def(
      "run",
      [](const std::string& config_text, const std::string& source, const std::string& base_dir,
         const std::vector<std::string>& sets, const std::string& default_name, const std::string& out,
         const py::object& options, const std::vector<std::string>& given, py::object make_bridge) {
        std::unique_lock<std::mutex> one(run_mutex(), std::try_to_lock);
        if (!one.owns_lock())
          translated(
              []() -> int { throw UsageError("another asgdsim.run is under way in this process: one at a time"); });
        RunnerOptions ro;
        ro.out_dir = out;  // the options first: a wrong one is refused before the config is read
        ro.replace.rerun = option<bool>(options, "rerun", "a bool");
        ro.replace.supersede = option<bool>(options, "supersede", "a bool");
        ro.recalibrate = option<bool>(options, "recalibrate", "a bool");
        ro.quiet = option<bool>(options, "quiet", "a bool");
        ro.trace = option<bool>(options, "trace", "a bool");
        ro.wait = option<bool>(options, "wait", "a bool");
        // checkpoint_every (None: asgdsim run's default) and interrupt_after_updates, checked as
        // the command line checks them
        py::object every = options.attr("checkpoint_every");
        if (!every.is_none()) ro.checkpoint_every = option<double>(options, "checkpoint_every", "a number of seconds");
        translated([&] {
          if (!(ro.checkpoint_every >= 0) || !std::isfinite(ro.checkpoint_every))
            throw UsageError("checkpoint_every=" + format_number(ro.checkpoint_every) +
                             ": give the wall seconds between a run's checkpoints (>= 0; 0: none)");
        });
        ro.interrupt_after_updates = option<uint64_t>(options, "interrupt_after_updates", "a whole number >= 0");
        // as `asgdsim run` writes its own
        // (as bytes: a str with os.fsdecode's surrogates, from a path that is not UTF-8, too)
        py::object line = options.attr("command_line");
        if (!py::isinstance<py::str>(line))
          throw py::type_error("RunOptions.command_line: " + py::repr(line).cast<std::string>() + " is not a str");
        ro.command_line = utf8_or_question_marks(py::module_::import("os").attr("fsencode")(line).cast<std::string>());
        // the run options' checks are `asgdsim run`'s: threads and jobs as text, and the
        // names the caller knows them by
        // progress= (None, or a callable): called with each RunProgress as a dict, holding the
        // job lock and the GIL as a model's calls do; the handle lives as long as `options`
        py::handle progress = options.attr("progress");
        if (!progress.is_none())
          ro.on_progress = [progress](const RunProgress& p) {
            call_python(
                "reporting progress",
                [&] {
                  py::dict d;
                  d["run_id"] = p.run_id;
                  d["run"] = p.run;
                  d["runs"] = p.runs;
                  d["fraction"] = p.fraction;
                  d["time"] = p.time;
                  d["epoch"] = p.epoch;
                  d["updates"] = p.updates;
                  d["train_loss"] = p.train_loss;
                  d["test_loss"] = p.test_loss;
                  d["test_accuracy"] = p.test_accuracy;
                  d["status"] = p.status;
                  progress(d);
                },
                "the progress callback");
          };
        const auto names = option<std::vector<std::string>>(options, "option_names", "two str");
        if (names.size() != 2) throw py::type_error("RunOptions.option_names: two names (threads, jobs)");
        translated([&] {
          set_run_counts(ro, py::str(options.attr("threads")), py::str(options.attr("jobs")), names[0], names[1]);
        });
        Experiment exp = translated([&] { return load(config_text, source, base_dir, sets, default_name); });
        const auto is_given = [&](const char* what) { return std::count(given.begin(), given.end(), what) > 0; };
        translated(
            [&] { check_given(exp, is_given("model"), is_given("loss"), is_given("data"), is_given("test_data")); });
        py::object bridge = py::none();  // made only when a run reads a PyTorch model or data set
        for (const RunSpec& r : exp.runs)
          if (bridge.is_none() && !external_key(r.config).empty()) bridge = make_bridge();
        struct Slot {  // the provider and the signal handlers, for this run only
          explicit Slot(py::object bridge) {
            if (!bridge.is_none()) set_external_provider(std::make_shared<PythonProvider>(std::move(bridge)));
            interrupt_count().store(0);
            old_int = std::signal(SIGINT, on_signal);
            old_term = std::signal(SIGTERM, on_signal);
          }
          ~Slot() {
            std::signal(SIGINT, old_int);
            std::signal(SIGTERM, old_term);
            py::gil_scoped_release release;  // the provider's destructor takes the GIL itself
            set_external_provider(nullptr);
          }
          void (*old_int)(int) = SIG_DFL;
          void (*old_term)(int) = SIG_DFL;
        } slot(std::move(bridge));
        int code = 0;
        std::exception_ptr error;
        {
          py::gil_scoped_release release;
          try {
            code = run_experiment(exp, ro);
          } catch (...) {
            error = std::current_exception();
          }
        }
        const bool interrupted = interrupt_requested();
        interrupt_count().store(0);
        if (error) translated([&]() -> int { std::rethrow_exception(error); });
        if (interrupted || code == 130) {  // the runs under way ended as interrupted, as on the command line
          PyErr_SetNone(PyExc_KeyboardInterrupt);
          throw py::error_already_set();
        }
        // bytes: --out may hold any (the package decodes them as the file system does)
        return py::make_tuple(code, py::bytes(ro.out_dir + "/" + experiment_name(exp)));
      },
      "runs an experiment as `asgdsim run` does (asgdsim.run: the options are an asgdsim.RunOptions)", py::kw_only(),
      py::arg("config_text"), py::arg("source"), py::arg("base_dir"), py::arg("sets"), py::arg("default_name"),
      py::arg("out"), py::arg("options"), py::arg("given"), py::arg("make_bridge"));

  // The simulator's PowerSGD all-reduce (engines/powersgd.h) on given gradients, so that
  // it can be checked against torch's powerSGD_hook (tests/python/test_powersgd.py).
  py::class_<PowerSgd>(m, "PowerSgd",
                       "the PowerSGD all-reduce of sync's collectives (engines/powersgd.h), on arrays: blocks are "
                       "(offset, rows, cols) row-major matrices covering n values")
      .def(py::init([](const std::vector<std::tuple<size_t, size_t, size_t>>& blocks, size_t n, int rank,
                       double min_compression_rate, double epsilon, bool error_feedback, bool warm_start, int workers) {
             std::vector<ParamBlock> b;
             for (const auto& [offset, rows, cols] : blocks) b.push_back(ParamBlock{offset, rows, cols, false});
             CompressionSpec c;
             c.type = CompressionSpec::Type::PowerSgd;
             c.rank = rank;
             c.min_compression_rate = min_compression_rate;
             c.orthogonalization_epsilon = epsilon;
             c.error_feedback = error_feedback;
             c.warm_start = warm_start;
             return translated([&] { return std::make_unique<PowerSgd>(b, n, c, workers); });
           }),
           py::arg("blocks"), py::arg("n"), py::arg("rank"), py::arg("min_compression_rate"), py::arg("epsilon"),
           py::arg("error_feedback"), py::arg("warm_start"), py::arg("workers"))
      .def(
          "matrices",
          [](const PowerSgd& p) {
            py::list out;
            for (size_t c = 0; c < p.matrices().size(); ++c)
              out.append(
                  py::make_tuple(p.matrices()[c].offset, p.matrices()[c].rows, p.matrices()[c].cols, p.rank_of(c)));
            return out;
          },
          "the compressed matrices: (offset, rows, cols, rank) each")
      .def(
          "set_q",
          [](PowerSgd& p, size_t c, py::array_t<float, py::array::c_style | py::array::forcecast> q) {
            translated([&] { p.set_q(c, std::vector<float>(q.data(), q.data() + q.size())); });
          },
          "the first Q of compressed matrix c (cols x rank, row-major)")
      .def(
          "reduce",
          [](PowerSgd& p, const std::vector<py::array_t<float, py::array::c_style | py::array::forcecast>>& grads) {
            static ExecContext ctx;
            std::vector<const float*> inputs;
            std::vector<int> workers;
            for (size_t i = 0; i < grads.size(); ++i) {
              inputs.push_back(grads[i].data());
              workers.push_back(int(i));
            }
            py::array_t<float> out(grads.empty() ? 0 : grads[0].size());
            translated([&] { p.reduce(ctx, inputs, workers, out.mutable_data()); });
            return out;
          },
          "one all-reduce of the workers' gradients (worker i: grads[i]): what every worker ends with");
}
