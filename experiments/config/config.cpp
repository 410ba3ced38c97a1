// experiments/config/config.cpp — binding a config: each run's sections are validated with
// the declarations of the components that own them (sim/run/settings.cpp, the engines'
// files, sim/models/catalog.cpp, sim/timing/distribution.cpp) and bound into the run's
// RunSettings in the same pass (the data sets: sim/data/catalog.cpp); overrides and sweep
// expansion.
#include "experiments/config/config.h"
#include "sim/models/catalog.h"
#include <algorithm>
#include <charconv>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include "engines/engine_registry.h"
#include "sim/data/catalog.h"
#include "sim/data/client_devices.h"
#include "sim/data/dataset.h"
#include "sim/data/partition.h"
#include "sim/models/external.h"
#include "sim/net/catalog.h"
#include "kernels/model.h"
#include "experiments/config/records.h"  // the run record
#include "experiments/config/resources.h"
#include "sim/run/atomic_file.h"
#include "sim/run/recorder.h"  // format_number
#include "sim/timing/distribution.h"
#include "sim/timing/measured_trace.h"
#include "sim/base/time.h"

namespace asgd {

const Section<RunSettings>& top_section() { return settings_section("top"); }

namespace {

constexpr size_t kMaxConfigBytes = size_t(64) << 20;  // a config file larger than this is refused unread

// A run's sections below the top level, as a config names them: the run, the experiment and
// the experiment's resolved copy list these, plus their own ("engine", "engines", "sweep").
const std::vector<std::string> kRunSections = {"model",   "data",      "train", "stop",   "eval",
                                               "cluster", "staleness", "real",  "clients"};
std::vector<std::string> with_sections(std::vector<std::string> own) {
  own.insert(own.begin(), kRunSections.begin(), kRunSections.end());
  return own;
}

using keys::any;
using keys::boolean;
using keys::integer;
using keys::list;
using keys::num;
using keys::seconds;
using keys::str;

// -------- checks that need more than one key --------

std::string sanitize(const std::string& s);  // a run-id label: characters outside [A-Za-z0-9._=-] become _

std::string whole(double v) {  // a count for messages: 60000, not 60000.0
  char text[32];
  std::snprintf(text, sizeof(text), "%.0f", v);
  return text;
}

constexpr size_t kMaxRunIdBytes = kMaxNameBytes;

// A top-level integer key as validated (`top`: the top level, defaults filled, when it
// reported no issue), else its declared default: the config is invalid then, and the value
// only lets the other checks go on.
int64_t top_integer(const json& top, bool clean, const std::string& key) {
  for (const ParamInfo& p : top_section().params())
    if (p.name == key) return (clean ? top.at(key) : p.default_value).get<int64_t>();
  throw std::logic_error("top_integer: no top-level key " + key);
}

// The experiment's name is a folder under --out: the label rule of run ids (letters,
// digits and . - _ =), and not "." or "..", so that no name leads out of --out.
// `given`: the config gives it, and the top level reported no issue of its own.
void check_name(const std::string& name, bool given, Validator& v) {
  if (!given) return;
  std::string why;
  if (name.empty())
    why = "is empty";
  else if (name == "." || name == "..")
    why = "would write into or beside --out instead of a folder of its own";
  else if (sanitize(name) != name)
    why = "holds characters a folder name must not (only letters, digits and . - _ =)";
  else if (name.size() > kMaxRunIdBytes)
    why = "is longer than " + std::to_string(kMaxRunIdBytes) + " bytes";
  if (!why.empty())
    v.error("name",
            "'" + name + "' " + why + ": it names the experiment's folder under --out" +
                (name.empty() || name == "." || name == ".." ? std::string() : " (e.g. '" + sanitize(name) + "')"));
}

// Which of a run's sections bound with no issue of their own. The checks across sections
// read the typed settings (and the bound engine and model) of clean sections only: a
// section with an error reports that error alone, and its checks across sections show
// once it is fixed.
struct Clean {
  bool cluster = false;      // cluster's own keys (workers, placement)
  bool topology = false;     // cluster.topology (and the worker count it fixes)
  bool network = false;      // cluster.network's own keys
  bool compression = false;  // cluster.network.compression
  bool failures = false;     // cluster.failures with its events
  bool train = false;        // train's own keys and the checks across them (lr_schedule apart)
  bool stop = false;
  bool staleness = false;
  bool clients = false;  // clients with its speeds
  // cluster.workers as the run has it: given, or fixed by the topology.
  bool workers() const { return cluster && topology; }
};

// Counts the issues a binding step reports: clean() is true when it reported none.
class IssueMark {
 public:
  explicit IssueMark(const Validator& v) : v_(v), before_(v.issues().size()) {}
  bool clean() const { return v_.issues().size() == before_; }

 private:
  const Validator& v_;
  size_t before_;
};

// What the topology and placement allow of the engine (docs/architecture.md, "Boxes").
void check_placement(const EngineType& type, const RunSettings& s, Validator& v) {
  if (!type.sums_across_boxes && s.topology.host_placement && topology_facts(s.topology).boxes > 1)
    v.error("cluster.placement",
            "\"host\" over more than one box is defined for sync and sync_backup (each box's "
            "sum is exchanged with the servers); engine " +
                type.name + " needs \"servers\" or one box");
}

// Validates a list of objects (each against `section`'s keys) whose "worker" must name an
// existing worker (`workers` 0: unknown, not checked); appends each valid item, bound, to
// `items`. An item with an error of its own reports that alone.
template <class Item>
json worker_list(const json& list, const std::string& path, const Section<Item>& section, int64_t workers, Validator& v,
                 std::vector<Item>& items) {
  if (!list.is_array()) {
    v.error(path, "expected a list of objects, got " + brief(list));
    return json::array();
  }
  json out = json::array();
  for (size_t i = 0; i < list.size(); ++i) {
    Item bound;
    const IssueMark item_mark(v);
    out.push_back(section.bind(list[i], index_path(path, i), v, bound));
    if (!item_mark.clean()) continue;
    if (workers > 0 && bound.worker >= workers)
      v.error(index_path(path, i) + ".worker", "worker " + std::to_string(bound.worker) +
                                                   " does not exist (cluster.workers is " + std::to_string(workers) +
                                                   ": valid 0.." + std::to_string(workers - 1) + ")");
    else
      items.push_back(bound);
  }
  return out;
}

// What topologies' checks read of the run (TopologyRunView), from the bound network:
// latency and worker_bandwidth where other than 0.
TopologyRunView topology_run_view(const NetworkSpec& network) {
  auto given = [](double value) { return value == 0 ? std::string() : brief(json(value)); };
  TopologyRunView r;
  r.network_latency = given(network.latency);
  r.network_worker_bandwidth = given(network.worker_bandwidth);
  return r;
}

// cluster.topology (sim/net/catalog.h; left out: the star) and cluster.placement. A
// topology that fixes the worker count derives cluster.workers when it is left out;
// given, it must equal that. The topology binds with its own checks here; its checks
// against the network run once the network is bound (resolve_cluster).
void resolve_topology(const json& user, json& cluster, Validator& v, RunSettings& s, Clean& clean) {
  const IssueMark mark(v);
  cluster["topology"] =
      bind_topology(cluster.value("topology", json::object()), "cluster.topology", TopologyRunView{}, v, s.topology);
  if (!mark.clean()) return;
  const TopologyType* type = find_topology_type(s.topology.type);
  if (clean.cluster && s.topology.host_placement && !type->hosts)
    v.error("cluster.placement",
            "\"host\" keeps the parameters in each box's host: it needs a topology with boxes "
            "(cluster.topology.type \"boxes\"; got \"" +
                type->name + "\")");
  clean.topology = true;
  if (!type->workers) return;
  const int64_t fixed = type->workers(s.topology);
  if (fixed > int64_t(kMaxWorkers)) {
    v.error("cluster.topology", "boxes x per_box is " + std::to_string(fixed) + " workers, more than " +
                                    std::to_string(int64_t(kMaxWorkers)));
    clean.topology = false;
  } else if (!user.contains("workers")) {
    cluster["workers"] = fixed;
    s.workers = int(fixed);
  } else if (clean.cluster && s.workers != fixed) {
    v.error("cluster.workers", "must equal cluster.topology boxes x per_box (" + std::to_string(fixed) +
                                   ") or be left out (it is then derived); got " + std::to_string(s.workers));
  }
}

json resolve_cluster(const json& user, Validator& v, RunSettings& s, Clean& clean) {
  const IssueMark mark(v);
  json cluster = settings_section("cluster").bind(
      user, "cluster", v, s, {"compute", "network", "server", "stragglers", "failures", "topology"});
  clean.cluster = mark.clean();
  resolve_topology(user, cluster, v, s, clean);
  const int64_t workers = clean.workers() ? s.workers : 0;  // 0: unknown
  json compute_user = cluster.value("compute", settings_section("cluster.compute").when_left_out());
  const Section<RunSettings>& compute_keys = settings_section("cluster.compute");
  std::shared_ptr<const BoundDistribution> compute;
  cluster["compute"] = bind_distribution(compute_user, "cluster.compute", v, compute, compute_keys.params());
  if (compute) {
    set_fields(compute_keys.fields, cluster["compute"], s);
    s.compute_dist = compute;
  }

  // a list of factors (bound with cluster's keys): one per worker
  if (workers > 0 && !s.speeds.empty() && s.speeds.size() != size_t(workers))
    v.error("cluster.speeds",
            "has " + std::to_string(s.speeds.size()) + " factors but cluster.workers is " + std::to_string(workers));

  const IssueMark network_mark(v);
  json network = settings_section("cluster.network")
                     .bind(cluster.value("network", json::object()), "cluster.network", v, s, {"compression"});
  clean.network = network_mark.clean();
  if (clean.topology && clean.network)  // the topology's checks against the network
    if (const TopologyType* type = find_topology_type(s.topology.type); type->check)
      type->check(s.topology, topology_run_view(s.network), v);
  const IssueMark compression_mark(v);
  network["compression"] = settings_section("cluster.network.compression")
                               .bind(network.value("compression", json::object()), "cluster.network.compression", v, s);
  clean.compression = compression_mark.clean();
  cluster["network"] = network;
  cluster["server"] =
      settings_section("cluster.server").bind(cluster.value("server", json::object()), "cluster.server", v, s);
  const IssueMark stragglers_mark(v);
  json stragglers = settings_section("cluster.stragglers")
                        .bind(cluster.value("stragglers", json::object()), "cluster.stragglers", v, s, {"slow"});
  stragglers["slow"] =
      worker_list(stragglers.value("slow", json::array()), "cluster.stragglers.slow", slow_window_section(),
                  stragglers_mark.clean() ? workers : 0, v, s.stragglers.windows);
  cluster["stragglers"] = stragglers;
  const IssueMark failures_mark(v);
  json failures = settings_section("cluster.failures")
                      .bind(cluster.value("failures", json::object()), "cluster.failures", v, s, {"events"});
  failures["events"] = worker_list(failures.value("events", json::array()), "cluster.failures.events",
                                   failure_event_section(), failures_mark.clean() ? workers : 0, v, s.failures);
  clean.failures = failures_mark.clean();
  cluster["failures"] = failures;
  return cluster;
}

// -------- the experiment's own keys: engines and sweep --------

// An engines entry as the experiment reads it, before each of its runs validates it whole
// (with the sweep's values set): its type, its name and what it overrides of train. A key
// of the wrong type reads as absent here; its runs report it.
struct EngineEntry {
  json object;                  // as written
  std::string type;             // "": none, or not a word
  std::string name;             // "": none
  json train = json::object();  // the train keys it overrides (engine.train)
  // How run ids label it (before sanitising): its name, else its type, else engine<i>.
  std::string label(size_t i) const {
    return !name.empty() ? name : !type.empty() ? type : "engine" + std::to_string(i);
  }
};

// engine.train: an object of train.* keys that override train for that engine's runs (a
// per-engine learning rate, momentum, optimizer).
const Field<EngineEntry>& engine_train_key() {
  static const Field<EngineEntry> f = shaped<EngineEntry>(
      any("train", json::object(),
          "train keys that override train for this engine's runs (an lr_schedule of the same type merges key by "
          "key)"),
      {{object_shape<EngineEntry>({}, [](EngineEntry& e, const json& v) { e.train = v; })},
       "an object of train keys that override train for this engine (e.g. {\"lr\": 0.01, \"momentum\": 0.9})"});
  return f;
}

// The keys every engine object takes beside its type and its type's keys.
const std::vector<Field<EngineEntry>>& engine_entry_fields() {
  static const std::vector<Field<EngineEntry>> f = {field(&EngineEntry::name, engine_name_key()), engine_train_key()};
  return f;
}

EngineEntry read_engine_entry(const json& given) {
  EngineEntry e;
  e.object = given;
  e.type = text_of(given, "type");
  Validator unreported;  // each run reports the entry's issues, beside its other keys'
  json object = given;
  bind_fields_of(engine_entry_fields(), object, "", unreported, e);
  return e;
}

// The sweep: dotted keys, each with its values, in the order written.
using Sweep = std::vector<std::pair<std::string, std::vector<json>>>;

struct ExperimentKeys {
  std::vector<EngineEntry> engines;
  Sweep sweep;
};

const Field<ExperimentKeys>& engines_key() {
  using E = ExperimentKeys;
  static const Field<E> f =
      shaped<E>(any("engines", nullptr, "the engines compared: a non-empty list of {\"type\": ...} (section engines)"),
                {{list_shape<E>({}, 1,
                                [](E& e, const json& list) {
                                  for (const json& entry : list) e.engines.push_back(read_engine_entry(entry));
                                })},
                 "a non-empty list of engine objects"});
  return f;
}

const Field<ExperimentKeys>& sweep_key() {
  using E = ExperimentKeys;
  static const Shapes<E> values{{list_shape<E>({}, 1, {})}, "a non-empty list of values"};
  static const Field<E> f =
      shaped<E>(any("sweep", json::object(),
                    "dotted config keys, each with a list of values: a run for each engine, point and repeat"),
                {{map_shape<E>([](json& list, const std::string& path, Validator& v) { values.check(list, path, v); },
                               [](E& e, const json& sweep) {
                                 for (const auto& [key, list] : sweep.items())
                                   e.sweep.emplace_back(key, list.get<std::vector<json>>());
                               })},
                 "an object {\"dotted.key\": [values...]}"});
  return f;
}

// The sweep as `config` gives it; {} where it gives none, or one that is not valid.
Sweep sweep_of(const json& config) {
  ExperimentKeys keys;
  Validator unreported;  // reported when the config is validated
  json given = config;
  bind_fields_of<ExperimentKeys>({sweep_key()}, given, "", unreported, keys);
  return keys.sweep;
}

// train with an engine's overrides: each key replaces train's (null removes it, as in a JSON
// merge patch); an lr_schedule of the same type merges key by key, one of another type
// replaces it. A train that is not an object is left as given, for its section to report.
json with_train_override(json train, const json& override) {
  if (!train.is_object() || override.empty()) return train;
  json patch = override;
  auto schedule_type = [](const json& t) {
    const std::string type = text_of(t.at("lr_schedule"), "type");
    return type.empty() ? std::string("constant") : type;
  };
  if (patch.contains("lr_schedule") && train.contains("lr_schedule") && schedule_type(patch) != schedule_type(train)) {
    train["lr_schedule"] = patch["lr_schedule"];
    patch.erase("lr_schedule");
  }
  train.merge_patch(patch);
  return train;
}

// Said of an issue in train that comes of train and an engine's overrides together; the
// experiment names the engine (engines[i].train).
constexpr const char* kWithEngineTrain = " (train with this engine's overrides, engine.train)";

// An issue's path in train as the config holds it: a key the engine overrides is the
// engine's (train.lr -> engine.train.lr; the caller names the engine engines[i]).
std::string train_issue_path(const std::string& path, const json& override) {
  if (path.rfind("train.", 0) != 0) return path;
  const std::string key = path.substr(
      6, path.find_first_of(".[", 6) == std::string::npos ? std::string::npos : path.find_first_of(".[", 6) - 6);
  return override.contains(key) ? "engine." + path : path;
}

// A sweep over model.* or the batch size while cluster.compute is a fixed draw (neither
// "flops" nor "measured") adds a warning to exp.warnings: compute then ignores the model.
void warn_of_fixed_compute_in_sweeps(const Sweep& sweep, Experiment& exp) {
  for (const auto& [key, values] : sweep) {
    const bool over_model = key == "model" || key.rfind("model.", 0) == 0;
    const bool over_batch = key == "train.batch_size" || key == "train.global_batch";
    if (!over_model && !over_batch) continue;
    std::set<std::string> fixed;  // the fixed draws some run keeps, "exponential per sample"
    for (const auto& run : exp.runs) {
      const std::string dist = run.settings.compute_model.value("dist", "");  // set for every valid run
      if (dist != "flops" && dist != "measured")
        fixed.insert(dist + " per " + (run.settings.step_cost.per_sample ? "sample" : "step"));
    }
    if (fixed.empty()) continue;
    std::string draws;
    for (const auto& f : fixed) draws += (draws.empty() ? "" : ", ") + f;
    exp.warnings.push_back(
        "sweep." + key + ": cluster.compute keeps a fixed draw (" + draws + "), so virtual compute time " +
        (over_model ? "is the same for every model of the sweep"
                    : "does not follow the model's cost at each batch size (per sample: in proportion to the batch; "
                      "per step: not at all)") +
        "; use dist \"flops\" or \"measured\" for compute that follows the model");
  }
}

// What engines' checks read of the run (EngineRunView), from the typed settings of its
// clean sections (a section with an error leaves its part empty).
EngineRunView engine_run_view(const RunSettings& s, const Clean& clean) {
  EngineRunView r;
  if (clean.workers()) r.workers = s.workers;
  if (clean.train) {
    r.momentum = s.optimizer.momentum;
    r.optimizer = word_of(optimizer_words(), s.optimizer.kind);
    r.nesterov = s.optimizer.nesterov;
  }
  if (clean.compression) r.compression = compression_type_name(s.compression.type);
  r.host_placement = clean.cluster && s.topology.host_placement;
  if (clean.topology) r.topology = topology_facts(s.topology);
  r.failures = clean.failures && (!s.failures.empty() || s.failure_rate > 0);
  if (clean.staleness) r.staleness = word_of(staleness_mode_words(), s.staleness);
  return r;
}

}  // namespace

ParamInfo engine_name_key() {
  return str("name", "", "label for this engine in run ids and plots (default: its type)");
}

ComputeRunView compute_run_view(const RunSpec& run) {
  ComputeRunView r;
  const ModelType& model = run.bound_model->type();
  r.model = model.name;
  r.batch_size = run.settings.batch_size;
  r.per_sample = run.settings.step_cost.per_sample;
  const RunSpec* of = &run;                       // (the view lives no longer than the run it is built from)
  if (model.reads == ModelType::Reads::External)  // a PyTorch module's FLOPs: counted once it is built
    r.flops_per_sample = [] { return std::optional<double>(); };
  else
    r.flops_per_sample = [of] {
      return std::optional<double>(model_sizes(*of->bound_model, *of->bound_data).flops_per_sample);
    };
  r.trace_name = [of] { return trace_name_of(*of); };
  return r;
}

json sources_of(const RunSpec& run) {
  return run.config.at("run").value("sources", json());  // (expand_runs writes every run's `run` record)
}

std::string trace_name_of(const RunSpec& run) {
  return measured_trace_name(run.config["model"], run.config["data"], run.settings.batch_size, sources_of(run));
}

void apply_compute(RunSpec& run, const ComputeResolution& resolved, std::vector<std::string>& notes) {
  if (resolved.per_step) {  // (config.json says what the run computes with)
    run.settings.step_cost.per_sample = false;
    run.config["cluster"]["compute"]["per"] = "step";
  }
  if (resolved.draw) run.settings.compute_dist = resolved.draw;
  run.settings.compute_model = resolved.model;
  if (!resolved.note.empty() && std::find(notes.begin(), notes.end(), resolved.note) == notes.end())
    notes.push_back(resolved.note);
}

namespace {

// The population (section clients): its keys (its speeds' distribution among them), and at
// least as many clients as slots (each slot trains one client at a time).
json resolve_clients(const json& user, Validator& v, RunSettings& s, Clean& clean) {
  const IssueMark mark(v);
  json clients = settings_section("clients").bind(user, "clients", v, s);
  clean.clients = mark.clean();
  if (clean.clients && clean.workers() && s.clients.count > 0 && s.clients.count < s.workers)
    v.error("clients.count", std::to_string(s.clients.count) + " clients for " + std::to_string(s.workers) +
                                 " slots (cluster.workers): a slot trains one client at a time, so give at least as "
                                 "many clients as slots, or 0 for no population");
  return clients;
}

// `engine`, `bound_model`, `bound_data`: the run's engine, model and data bound to their
// typed configs (null when their objects were reported invalid).
json resolve_run(const json& u, Validator& v, RunSettings& s, std::shared_ptr<const BoundEngine>& engine,
                 std::shared_ptr<const BoundModel>& bound_model, std::shared_ptr<const BoundData>& bound_data) {
  json out = top_section().bind(u, "", v, s, with_sections({"engine", "run"}));

  if (!u.contains("model")) v.error("model", "missing required key (an object with \"type\")");
  json model = resolve_model(u.value("model", json::object()), v, bound_model);
  out["model"] = model;

  const std::string model_type = text_of(model, "type");
  const ModelType* model_kind = find_model_type(model_type);
  const std::string default_data = model_kind ? model_kind->default_data() : "synthetic";
  const size_t data_issues = v.issues().size();
  json data = resolve_data(u.value("data", json::object()), default_data, v, bound_data);
  out["data"] = data;
  if (const std::string data_type = text_of(data, "type"); !data_type.empty())  // (else reported at data.type)
    check_model_data(model_kind, bound_model.get(), data_type, bound_data.get(), v);
  if (bound_data && bound_data->partition().kind != PartitionSpec::Kind::Iid) {  // sim/data/partition.h
    if (regression_data(*bound_data) || (model_kind && (model_kind->reads == ModelType::Reads::None ||
                                                        model_kind->task == ModelType::Task::Regression)))
      v.error("data.partition", "\"" + bound_data->keys()["partition"].get<std::string>() +
                                    "\" splits the training set by label: it needs a classification set that the "
                                    "model reads (use \"iid\")");
  }
  if (bound_data && v.issues().size() == data_issues) {  // the data and its checks valid: what the run reads of them
    s.partition = bound_data->partition();
    if (bound_data->type().layout == DataType::Layout::None) s.nominal_train_size = size_t(bound_data->shape().train);
  }

  // train, with the engine's own overrides (engine.train) merged in: issues of a key the
  // engine overrides are the engine's (engine.train.<key>)
  Clean clean;
  EngineEntry own;  // the engine's train (its name: validated with its type's keys below)
  json engine_given = u.value("engine", json());
  bind_fields_of<EngineEntry>({engine_train_key()}, engine_given, "engine", v, own);
  const json& train_override = own.train;
  Validator tv;
  json train = settings_section("train").bind(with_train_override(u.value("train", json::object()), train_override),
                                              "train", tv, s, {"lr_schedule"});
  if (tv.ok()) check_optimizer(s.optimizer, tv);  // bound: train's own keys are valid
  clean.train = tv.ok();
  json sched = lr_schedule_family().bind(train.value("lr_schedule", json::object()), "train.lr_schedule", tv, s);
  train["lr_schedule"] = sched;
  out["train"] = train;
  for (const auto& issue : tv.issues()) {
    const std::string path = train_issue_path(issue.path, train_override);
    const bool merged = !train_override.empty() && path == issue.path;  // a key of train, beside the engine's
    v.error(path, merged ? issue.message + kWithEngineTrain : issue.message);
  }

  json stop_user = u.value("stop", settings_section("stop").when_left_out());
  const IssueMark stop_mark(v);
  out["stop"] = settings_section("stop").bind(stop_user, "stop", v, s);
  clean.stop = stop_mark.clean();
  if (clean.stop && s.stop_time == kNever && s.stop_updates == 0 && s.stop_gradients == 0 && !(s.stop_epochs > 0))
    v.error("stop",
            "give at least one limit > 0: time, updates, gradients or epochs (a target alone may never be "
            "reached)");
  if (clean.stop && s.stop_target_accuracy > 0 && bound_model &&
      bound_model->type().task == ModelType::Task::Regression)
    v.error("stop.target_accuracy", "model '" + bound_model->type().name +
                                        "' is a regression: it has no test accuracy (use "
                                        "stop.target_loss)");
  out["eval"] = settings_section("eval").bind(u.value("eval", json::object()), "eval", v, s);

  json cluster = resolve_cluster(u.value("cluster", json::object()), v, s, clean);
  out["cluster"] = cluster;

  const IssueMark staleness_mark(v);
  json st = staleness_family().bind(u.value("staleness", json::object()), "staleness", v, s);
  if (staleness_mark.clean()) check_staleness(s, st, v);
  clean.staleness = staleness_mark.clean();
  if (clean.staleness && s.staleness == StalenessMode::PerLayer && bound_model &&
      bound_model->type().reads == ModelType::Reads::Sparse)
    v.error("staleness.mode", "\"per_layer\" reads each layer of a version; model '" + bound_model->type().name +
                                  "' reads only the rows its minibatch names: use fixed, uniform or geometric");
  out["staleness"] = st;
  out["real"] = settings_section("real").bind(u.value("real", json::object()), "real", v, s);
  out["clients"] = resolve_clients(u.value("clients", json::object()), v, s, clean);

  if (s.partition.kind != PartitionSpec::Kind::Iid) {  // a split the data cannot give (s.partition: bound)
    const DataShape shape = bound_data->shape();
    if (const std::string why = partition_impossible(s.partition, s.data_owners(), shape.train, shape.classes);
        !why.empty())
      v.error("data.partition", s.clients.count > 0
                                    ? why + " (the parts are the " + std::to_string(s.clients.count) + " clients')"
                                    : why);
  }

  if (!u.contains("engine"))
    v.error("engine", "missing required key");
  else {
    // Bound once, when its own keys are valid; its checks across sections read the typed
    // settings of the clean sections (engine_run_view).
    out["engine"] = engine_family().resolve(
        engine_given, "engine", v, engine,
        [&](const EngineType& t, json& resolved) {
          if (train_override.empty()) resolved.erase("train");  // config.json: what its runs changed of train
          t.check_values(resolved, v);
        },
        params_of(engine_entry_fields()));
    if (engine) {
      engine->check(engine_run_view(s, clean), v);
      if (clean.clients && s.clients.count > 0 && !find_engine_type(engine->type())->population) {
        std::string able;
        for (const auto& t : engine_types())
          if (t.population) able += (able.empty() ? "" : ", ") + t.name;
        v.error("clients.count", "engine " + engine->type() +
                                     " keeps a state per worker and does not run on a "
                                     "population of clients; engines that do: " +
                                     able + " (or set clients.count 0)");
      }
      if (clean.clients && s.clients.count == 0 && find_engine_type(engine->type())->needs_population)
        v.error("clients.count",
                "engine " + engine->type() +
                    " trains the clients of a population (section clients): give clients.count, at least "
                    "cluster.workers (each slot trains one client at a time); 0 is no population");
    }
  }
  const EngineType* engine_type = engine ? find_engine_type(engine->type()) : nullptr;
  if (clean.compression && s.compression.type != CompressionSpec::Type::None && bound_model &&
      bound_model->type().reads == ModelType::Reads::Sparse)
    v.error("cluster.network.compression.type", "compression is for dense models: model '" + bound_model->type().name +
                                                    "' already sends only the rows it touches (use \"none\")");
  if (engine_type && clean.cluster && clean.topology) check_placement(*engine_type, s, v);
  if (engine_type && clean.compression && s.compression.type == CompressionSpec::Type::PowerSgd &&
      !engine_type->all_reduces)
    v.error("cluster.network.compression.type",
            "\"powersgd\" compresses the gradients of an all-reduce (P and Q are summed across the workers): "
            "engine " +
                engine_type->name + " has none; use sync or sync_backup with comm \"allreduce\" or \"hierarchical\"");

  if (clean.train && clean.workers() && s.global_batch > 0) {
    const int64_t g = int64_t(s.global_batch), w = s.workers;
    if (g % w != 0)
      v.error("train.global_batch",
              std::to_string(g) + " does not split evenly over " + std::to_string(w) + " workers");
    else if (g / w > 16777216)
      v.error("train.global_batch", std::to_string(g) + " over " + std::to_string(w) + " workers is a batch of " +
                                        std::to_string(g / w) +
                                        " per worker, more than train.batch_size may be (16777216)");
    else
      out["train"]["batch_size"] = g / w;  // the per-worker batch it resolves to, shown in config.json
  }
  finish_settings(s);
  return out;
}

// --- dotted paths ---
struct PathToken {
  std::string key;
  bool is_index = false;
  size_t index = 0;
};

bool is_digit(char c) { return c >= '0' && c <= '9'; }

std::vector<PathToken> parse_path(const std::string& path) {
  std::vector<PathToken> out;
  std::string cur;
  auto flush = [&] {
    if (cur.empty()) return;
    bool digits = std::all_of(cur.begin(), cur.end(), is_digit);
    if (digits) {
      // At most 9 digits: a list holds fewer elements, and no size_t overflows.
      size_t index = 0;
      if (cur.size() > 9 || std::from_chars(cur.data(), cur.data() + cur.size(), index).ec != std::errc())
        throw std::invalid_argument("list index " + cur + " is out of range (a list holds at most 999999999 elements)");
      out.push_back(PathToken{"", true, index});
    } else {
      out.push_back(PathToken{cur});
    }
    cur.clear();
  };
  for (size_t i = 0; i < path.size(); ++i) {
    char c = path[i];
    if (c == '.')
      flush();
    else if (c == '[') {
      flush();
      size_t close = path.find(']', i);
      if (close == std::string::npos) throw std::invalid_argument("unclosed '[' in key path '" + path + "'");
      cur = path.substr(i + 1, close - i - 1);
      if (cur.empty() || !std::all_of(cur.begin(), cur.end(), is_digit))
        throw std::invalid_argument("list index in '" + path + "' must be a number");
      flush();
      i = close;
    } else
      cur += c;
  }
  flush();
  if (out.empty()) throw std::invalid_argument("empty key path");
  return out;
}

// Sets the value at `tokens` (parse_path's; `path`: their text, for messages), making
// objects on the way; a list element must exist.
void set_tokens(json& root, const std::vector<PathToken>& tokens, const std::string& path, const json& value) {
  json* node = &root;
  for (size_t t = 0; t < tokens.size(); ++t) {
    const auto& tok = tokens[t];
    bool last = t + 1 == tokens.size();
    if (tok.is_index) {
      if (!node->is_array() || tok.index >= node->size())
        throw std::invalid_argument("'" + path + "': no list element [" + std::to_string(tok.index) + "] there");
      node = &(*node)[tok.index];
    } else {
      if (node->is_null()) *node = json::object();
      if (!node->is_object()) throw std::invalid_argument("'" + path + "': '" + tok.key + "' is inside a non-object");
      node = &(*node)[tok.key];
    }
    if (last) *node = value;
  }
}

void set_path(json& root, const std::string& path, const json& value) {
  set_tokens(root, parse_path(path), path, value);
}

std::string sanitize(const std::string& s) {
  std::string out;
  for (char c : s)
    out += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_' || c == '=') ? c : '_';
  return out;
}

// A swept value as a run id writes it: scalars as value_text; a list's elements joined
// with x ([64,32] -> 64x32); an object's "type" first, then key+value for each other key,
// joined with _ ({"type": "mlp", "hidden": [32]} -> mlp_hidden32). Readable in a folder
// name, and distinct values stay distinct in practice (a clash is refused below).
std::string value_label(const json& v) {
  if (v.is_array()) {
    std::string out;
    for (const auto& e : v) out += (out.empty() ? "" : "x") + value_label(e);
    return out.empty() ? "none" : out;
  }
  if (v.is_object()) {
    std::string out = v.contains("type") ? value_label(v["type"]) : "";
    for (const auto& [k, e] : v.items())
      if (k != "type") out += (out.empty() ? "" : "_") + k + value_label(e);
    return out.empty() ? "none" : out;
  }
  return value_text(v);
}

// "engine 'a b', train.lr=0.1, seed 1": what a run is, for messages.
std::string describe_run(const RunSpec& run) {
  std::string out = "engine '" + run.engine + "'";
  for (const auto& [k, val] : run.sweep_values.items()) out += ", " + k + "=" + val.dump();
  return "(" + out + ", seed " + std::to_string(run.seed) + ")";
}

// The stop budget in words, for a warning: "stop.epochs 2", "stop.time 1 s", ...
// (`stop`: a valid run's, its limits filled in.)
std::string budget_text(const json& stop) {
  std::string out;
  for (const char* k : {"time", "updates", "gradients", "epochs"})
    if (stop.at(k).get<double>() > 0)
      out += (out.empty() ? "" : ", ") + std::string("stop.") + k + " " + brief(stop[k]);
  return out;
}

// A round of the engine (the gradients one update of the model of record takes: a sync
// iteration, local SGD's or DiLoCo's workers x steps, EASGD's period) that the stop budget
// cannot hold: the run would end with no update, which is no result about the engine.
// Said once per engine (and budget) in exp.warnings (the run's note says it when it
// happens: RunMonitor::finish).
void warn_of_rounds_past_the_budget(Experiment& exp, const RunSpec& run, const Distribution& compute) {
  // A data set whose size is known only once it is loaded (a PyTorch Dataset) leaves an epoch
  // budget unknown here: estimate_run_scale would count it as one sample.
  if (run.settings.stop_epochs > 0 && !(run.bound_data->shape().train > 0)) return;
  const RunScale scale = estimate_run_scale(run, compute);
  const EngineCost cost = run.bound_engine->cost(run.settings.workers);
  if (!(cost.gradients_per_update > 1) || !(scale.gradients < cost.gradients_per_update)) return;
  const std::string budget = budget_text(run.config["stop"]);
  const std::string text = "engine '" + run.engine + "': one round (an update of the model of record) takes " +
                           whole(cost.gradients_per_update) + " gradients, more than the about " +
                           whole(scale.gradients) + " the stop budget allows (" + budget +
                           "): no round will finish, so its runs end without training; raise the stop limits or "
                           "shorten the round";
  if (std::find(exp.warnings.begin(), exp.warnings.end(), text) == exp.warnings.end()) exp.warnings.push_back(text);
}

// Engines that differ in what they send per gradient compared over a free network (no
// latency, unlimited bandwidth, the default star): the difference, which some engines
// exist to exploit (DiLoCo, local SGD, EASGD), costs nothing. Said once in exp.warnings
// and in each such run's note. A population's devices (clients.devices) charge each message
// the client's own link: that network is not free.
void warn_of_free_network(Experiment& exp) {
  std::map<std::string, double> sends;  // engine label -> messages per gradient, free-network runs
  std::vector<RunSpec*> free;
  for (auto& run : exp.runs) {
    const NetworkSpec& n = run.settings.network;
    if (n.latency > 0 || n.bandwidth > 0 || n.worker_bandwidth > 0 ||
        run.settings.topology.type != kDefaultTopologyType || !run.settings.clients.devices.empty())
      continue;
    sends.emplace(run.engine, run.bound_engine->cost(run.settings.workers).messages_per_step);
    free.push_back(&run);
  }
  bool differ = false;
  for (const auto& [label, m] : sends) differ = differ || m != sends.begin()->second;
  if (!differ) return;
  std::string list;
  for (const auto& [label, m] : sends) list += (list.empty() ? "" : ", ") + label + " " + format_number(m);
  exp.warnings.push_back(
      "the network is free (cluster.network latency 0, bandwidth unlimited) while the engines differ "
      "in the messages they send per gradient (" +
      list +
      "): that difference costs nothing here, so the comparison leaves out what sending less "
      "saves; set cluster.network.latency and bandwidth (docs/time-model.md)");
  for (RunSpec* run : free)
    run->notes.push_back("the network is free: engines that send " + list +
                         " messages per gradient cost the same here");
}

}  // namespace

// ------------------------------------------------------------------ catalogs

const std::vector<SectionInfo>& section_catalog() {
  static const std::vector<SectionInfo> sections = [] {
    std::vector<SectionInfo> out;
    auto add = [&](const auto& section) { out.push_back(SectionInfo{section.name, section.doc, section.params()}); };
    add(top_section());
    for (const char* name : {"train", "stop", "eval", "cluster"}) add(settings_section(name));
    for (const auto& t : topology_types())  // members share levels (intra, inter): listed once
      for (const auto& level : t.levels)
        if (std::none_of(out.begin(), out.end(), [&](const SectionInfo& s) { return s.name == level.name; }))
          add(level);
    for (const char* name :
         {"cluster.compute", "cluster.network", "cluster.network.compression", "cluster.server", "cluster.stragglers"})
      add(settings_section(name));
    add(slow_window_section());
    add(settings_section("cluster.failures"));
    add(failure_event_section());
    out.push_back(SectionInfo{"model.conv[]",
                              "one convolution block of model cnn: convolution, the activation, then max-pooling",
                              conv_block_params()});
    add(settings_section("real"));
    return out;
  }();
  return sections;
}

const std::vector<ComponentInfo>& staleness_catalog() {
  static const std::vector<ComponentInfo> c = staleness_family().catalog();
  return c;
}

const std::vector<ComponentInfo>& lr_schedule_catalog() {
  static const std::vector<ComponentInfo> c = lr_schedule_family().catalog();
  return c;
}

// ------------------------------------------------------------------ loading

json load_json_file(const std::string& path) {
  // Read at most kMaxConfigBytes + 1: a config is never that large, and /dev/zero or a
  // huge file must fail here, not exhaust memory.
  std::string text;
  if (!read_file_limited(path, kMaxConfigBytes, text))
    throw ConfigError(path, {{"", std::string("cannot open: ") + std::strerror(errno)}});
  if (text.size() > kMaxConfigBytes)
    throw ConfigError(path, {{"", "larger than " + std::to_string(kMaxConfigBytes >> 20) +
                                      " MiB: not a config (give long traces as cluster.compute.file)"}});
  try {
    return parse_json_strict(text, /*allow_comments=*/true);
  } catch (const json::parse_error& e) {
    size_t byte = e.byte > 0 ? e.byte - 1 : 0;
    size_t line = 1, col = 1;
    for (size_t i = 0; i < byte && i < text.size(); ++i) {
      if (text[i] == '\n') {
        ++line;
        col = 1;
      } else
        ++col;
    }
    std::string what = e.what();
    size_t cut = what.find("parse error");
    if (cut != std::string::npos) what = what.substr(cut);
    throw ConfigError(path, {{"", "JSON syntax error at line " + std::to_string(line) + ", column " +
                                      std::to_string(col) + ": " + what}});
  } catch (const StrictJsonError& e) {
    throw ConfigError(path, {{"", e.what()}});
  } catch (const json::exception& e) {  // e.g. a number literal too large for a double
    throw ConfigError(path, {{"", std::string("unreadable JSON: ") + e.what()}});
  }
}

void apply_overrides(json& config, const std::vector<std::string>& sets, const std::string& source) {
  std::vector<ConfigIssue> issues;
  for (const auto& s : sets) {
    size_t eq = s.find('=');
    if (eq == std::string::npos || eq == 0) {
      issues.push_back({"--set " + s, "expected KEY.PATH=VALUE"});
      continue;
    }
    std::string key = s.substr(0, eq), text = s.substr(eq + 1);
    size_t bad = 0;
    if (!valid_utf8(s, &bad)) {  // JSON holds only UTF-8: such a value could never be written out
      char byte[8];
      std::snprintf(byte, sizeof(byte), "0x%02x", unsigned(static_cast<unsigned char>(s[bad])));
      issues.push_back({"--set " + (valid_utf8(key) ? key : std::string("(key)")),
                        std::string("not valid UTF-8 (byte ") + byte + " at offset " + std::to_string(bad) + ")"});
      continue;
    }
    json value;
    try {
      value = parse_json_strict(text, /*allow_comments=*/false);
    } catch (const StrictJsonError& e) {
      issues.push_back({"--set " + key, e.what()});
      continue;
    } catch (const json::exception&) {
      value = text;  // bare words (and numbers no double holds) are strings; validation judges them
    }
    try {
      // sweep's keys are dotted paths themselves: sweep.train.lr=[...] is the one sweep
      // key "train.lr", added beside the others (or replacing its values).
      if (key.rfind("sweep.", 0) == 0 && key.size() > 6)
        set_tokens(config, {PathToken{"sweep"}, PathToken{key.substr(6)}}, key, value);
      else
        set_path(config, key, value);
    } catch (const std::exception& e) {
      issues.push_back({"--set " + key, e.what()});
    }
  }
  // A key the sweep sets would be overwritten by every sweep point: say so instead of
  // ignoring the --set (the sweep's own values are set with --set sweep.KEY=[...]).
  const Sweep sweep = issues.empty() ? sweep_of(config) : Sweep();
  for (const auto& s : sets) {
    const std::string key = s.substr(0, s.find('='));
    if (key.rfind("sweep", 0) == 0) continue;
    for (const auto& [swept, values] : sweep) {
      const bool inside = key == swept || key.rfind(swept + ".", 0) == 0 || key.rfind(swept + "[", 0) == 0 ||
                          swept.rfind(key + ".", 0) == 0 || swept.rfind(key + "[", 0) == 0;
      if (inside)
        issues.push_back({"--set " + key, "the sweep sets " + swept + " (sweep." + swept + " = " + brief(json(values)) +
                                              "), which would override this in every run: set the sweep's values "
                                              "instead (--set 'sweep." +
                                              swept + "=[...]') or remove the key from the sweep"});
    }
  }
  if (!issues.empty()) throw ConfigError(source, issues);
}

std::vector<std::string> run_id_key_names(const std::vector<std::string>& keys) {
  // `suffix` is a dotted suffix of `key` ("lr", "train.lr", ...) when it is the whole key or
  // follows a '.' in it.
  auto ends_with_part = [](const std::string& key, const std::string& suffix) {
    return key.size() >= suffix.size() && key.compare(key.size() - suffix.size(), suffix.size(), suffix) == 0 &&
           (key.size() == suffix.size() || key[key.size() - suffix.size() - 1] == '.');
  };
  std::vector<std::string> names;
  for (const std::string& key : keys) {
    // shortest first: "lr", "train.lr", ...; the whole key when every shorter one is ambiguous
    std::string name = key;
    for (size_t dot = key.rfind('.'); dot != std::string::npos;
         dot = dot == 0 ? std::string::npos : key.rfind('.', dot - 1)) {
      const std::string suffix = key.substr(dot + 1);
      if (std::none_of(keys.begin(), keys.end(),
                       [&](const std::string& other) { return other != key && ends_with_part(other, suffix); })) {
        name = suffix;
        break;
      }
    }
    names.push_back(name);
  }
  return names;
}

namespace {

// resolve_experiment's jobs, in the order it does them.

// The experiment's engines and sweep, their shapes checked (each engines entry is checked
// whole in each of its runs).
ExperimentKeys read_experiment_keys(const json& user, Validator& v) {
  ExperimentKeys keys;
  if (!user.contains("engines")) v.error("engines", "missing required key (a non-empty list of {\"type\": ...})");
  json given = user;
  bind_fields_of<ExperimentKeys>({engines_key(), sweep_key()}, given, "", v, keys);
  return keys;
}

// The sweep's keys that can be swept, with their values, in the order written; keys that
// cannot be swept and values that repeat are reported.
Sweep check_sweep(const Sweep& given, Validator& v) {
  Sweep sweep;
  for (const auto& [key, values] : given) {
    if (key == "seed" || key == "repeats" || key == "name" || key.rfind("engines", 0) == 0) {
      v.error("sweep." + key, "cannot be swept (use repeats for seeds, the engines list for engines)");
      continue;
    }
    // Keys the program sets itself (a run's engine object and its `run` record) are
    // not config keys: sweeping them would relabel runs (issue 31).
    const std::string head = key.substr(0, key.find_first_of(".["));
    if (head == "engine" &&
        (key == "engine" || key.rfind("engine.type", 0) == 0 || key.rfind("engine.name", 0) == 0 || key[6] == '[')) {
      v.error("sweep." + key,
              "cannot be swept: the engines list chooses each run's engine and its name; sweep an "
              "engine's parameter as engine.<parameter>");
      continue;
    }
    if (head == "run") {
      v.error("sweep." + key, "is not a config key (asgdsim writes each run's `run` record itself)");
      continue;
    }
    // 2 and 2.0 are one value (JSON's numbers compare by value, in lists and objects too):
    // runs would repeat under two ids
    bool repeated = false;
    for (size_t a = 0; a < values.size() && !repeated; ++a)
      for (size_t b = a + 1; b < values.size() && !repeated; ++b)
        if (values[a] == values[b] && values[a].dump() != values[b].dump()) {  // (the same text: "the same point
                                                                               // twice" below)
          v.error(index_path("sweep." + key, b), brief(values[b]) + " is the same value as " + brief(values[a]) +
                                                     " (item " + std::to_string(a) + "): each point would run twice");
          repeated = true;
        }
    if (repeated) continue;
    sweep.emplace_back(key, values);
  }
  return sweep;
}

// Each engine's label as run ids write it: its name, else its type, else engine<i>.
std::vector<std::string> engine_labels(const std::vector<EngineEntry>& engines, Validator& v) {
  // Engine labels must be distinct as written in run ids (after sanitising): "a b" and
  // "a_b" would share every run folder.
  std::vector<std::string> labels, raw_labels;
  for (size_t i = 0; i < engines.size(); ++i) {
    const std::string label = engines[i].label(i);
    auto same = std::find(labels.begin(), labels.end(), sanitize(label));
    if (same != labels.end()) {
      const std::string& other = raw_labels[size_t(same - labels.begin())];
      v.error(index_path("engines", i),
              (other == label ? "two engines are labelled '" + label + "'"
                              : "engines labelled '" + other + "' and '" + label + "' both become '" + sanitize(label) +
                                    "' in run ids (which keep only letters, digits and . - _ =)") +
                  ": give each a distinct \"name\"");
    }
    labels.push_back(sanitize(label));
    raw_labels.push_back(label);
  }
  return labels;
}

void check_run_count(const json& user, size_t engines, int64_t repeats, const Sweep& sweep, Validator& v,
                     const std::string& source) {
  // The number of runs, before making any: each holds a resolved config.
  double run_count = double(std::max<size_t>(1, engines)) * double(repeats);
  for (const auto& [k, vals] : sweep) run_count *= double(vals.size());
  if (run_count > kMaxRuns) {
    std::string product = std::to_string(engines) + " engine(s)";
    for (const auto& [k, vals] : sweep) product += " x " + std::to_string(vals.size()) + " " + k;
    product += " x " + std::to_string(repeats) + " repeat(s)";
    v.error(user.contains("repeats") && repeats > 1 ? "repeats"
            : sweep.empty()                         ? "engines"
                                                    : "sweep",
            "the config makes " + whole(run_count) + " runs (" + product + "), more than " + whole(kMaxRuns) +
                ": split it into several configs");
    v.throw_if_failed(source);
  }
}

// By engine and sweep key: whether the key applies to the engine.
std::vector<std::vector<bool>> sweep_applies(const std::vector<EngineEntry>& engines, const Sweep& sweep,
                                             Validator& v) {
  // An engine.* key applies to the engines whose type has that parameter (every engine for
  // "name"); the others run without it: one run per point of the other keys, its run id
  // and sweep values without the key. A key no engine has is an error, reported once.
  std::vector<std::vector<bool>> applies(engines.size(), std::vector<bool>(sweep.size(), true));
  for (size_t k = 0; k < sweep.size(); ++k) {
    const std::string& key = sweep[k].first;
    if (key.rfind("engine.", 0) != 0) continue;
    std::string param = key.substr(
        7, key.find_first_of(".[", 7) == std::string::npos ? std::string::npos : key.find_first_of(".[", 7) - 7);
    if (param == "name" || param == "type" || param == "train") continue;  // every engine's keys
    bool any = false, all_known = true;
    std::string types;
    for (size_t e = 0; e < engines.size(); ++e) {
      const ComponentInfo* info = nullptr;
      for (const auto& c : engine_catalog())
        if (c.name == engines[e].type) info = &c;
      if (!info) {  // an unknown or missing type: reported by the run's validation
        all_known = false;
        continue;
      }
      bool has =
          std::any_of(info->params.begin(), info->params.end(), [&](const ParamInfo& p) { return p.name == param; });
      applies[e][k] = has;
      any = any || has;
      types += (types.empty() ? "" : ", ") + info->name;
    }
    if (!any && all_known) {
      std::string owners;
      for (const auto& c : engine_catalog())
        for (const auto& p : c.params)
          if (p.name == param) owners += (owners.empty() ? "" : ", ") + c.name;
      v.error("sweep." + key, "no engine of this experiment (" + types + ") has the parameter '" + param + "'" +
                                  (owners.empty() ? std::string(" (asgdsim list shows each engine's)")
                                                  : " (engines that have it: " + owners + ")"));
    }
  }
  return applies;
}

void check_train_overrides(const std::vector<EngineEntry>& engines, const Sweep& sweep, Validator& v) {
  // A train key an engine overrides is that engine's: a sweep of train.<key> would not reach
  // its runs (the engine's value wins), so the two together are refused.
  for (size_t e = 0; e < engines.size(); ++e) {
    const json& own = engines[e].train;
    for (const auto& [key, values] : sweep) {
      if (key != "train" && key.rfind("train.", 0) != 0) continue;
      const std::string first = key == "train" ? ""
                                               : key.substr(6, key.find_first_of(".[", 6) == std::string::npos
                                                                   ? std::string::npos
                                                                   : key.find_first_of(".[", 6) - 6);
      for (const auto& [k, value] : own.items())
        if (first.empty() || k == first)
          v.error(index_path("engines", e) + ".train." + k,
                  "overrides train." + k + " for this engine, but the sweep sets " + key +
                      " in every run, which would not reach this engine's runs: sweep engine.train." +
                      (first.empty() ? k : key.substr(6)) + " to vary it per engine, or remove one of the two");
    }
  }
}

// A run's issues, reported on the experiment: engine.* paths as the engines list's entry,
// sweep-set keys as sweep.<key>; the run's own internal keys' "unknown key" dropped.
void report_run_issues(const Validator& rv, size_t e, const Sweep& sweep, const std::string& sweepable_top,
                       Validator& v) {
  for (const auto& issue : rv.issues()) {
    std::string path = issue.path, message = issue.message;
    if (path.rfind("engine", 0) == 0 && (path.size() == 6 || path[6] == '.'))
      path = index_path("engines", e) + path.substr(6);
    const size_t with = message.rfind(kWithEngineTrain);
    if (with != std::string::npos)
      message =
          message.substr(0, with) + " (train with this engine's overrides, " + index_path("engines", e) + ".train)";
    bool from_sweep = false;
    for (const auto& [k, vals] : sweep)
      if (path == k || path.rfind(k + ".", 0) == 0) from_sweep = true;
    bool top_level = path.find_first_of(".[") == std::string::npos;
    if (top_level && issue.message.rfind("unknown key", 0) == 0) {
      // The run's own keys (engine, run) are internal: the experiment's check above
      // reported a key of the config; one set by the sweep is named with the keys a
      // sweep may set.
      if (from_sweep)
        v.error("sweep." + path, "unknown key (a sweep key is a dotted path to a config key: " + sweepable_top +
                                     ", or engine.<parameter>)");
      continue;
    }
    v.error(from_sweep ? "sweep." + path : path, message);
  }
}

void check_run_ids(const Experiment& exp, const std::vector<size_t>& engine_of_run, Validator& v) {
  // Run ids name folders: two runs with one id would share (and overwrite) one folder.
  std::map<std::string, size_t> id_owner;
  for (size_t i = 0; i < exp.runs.size(); ++i) {
    const RunSpec& run = exp.runs[i];
    if (run.run_id.size() > kMaxRunIdBytes)
      v.error("sweep", "run id '" + run.run_id.substr(0, 60) + "...' is " + std::to_string(run.run_id.size()) +
                           " bytes, too long for a folder name (at most " + std::to_string(kMaxRunIdBytes) +
                           "): shorten the engine names or sweep values");
    auto [it, fresh] = id_owner.emplace(run.run_id, i);
    if (fresh) continue;
    const RunSpec& first = exp.runs[it->second];
    if (engine_of_run[it->second] != engine_of_run[i]) {
      if (first.engine != run.engine)  // distinct labels whose ids meet once a sweep value is added
        v.error("engines", "runs of engines '" + first.engine + "' and '" + run.engine + "' get the same run id '" +
                               run.run_id + "' " + describe_run(first) + " " + describe_run(run) +
                               ": they would share one folder; rename one of the engines");
      continue;  // equal labels: reported above
    }
    if (first.sweep_values == run.sweep_values)
      v.error("sweep", "the sweep lists the same point twice: " + describe_run(run) + " would run twice as '" +
                           run.run_id + "'; remove the repeated value");
    else
      v.error("sweep", "two runs get the same run id '" + run.run_id +
                           "' (run ids keep only letters, digits and . - _ =): " + describe_run(first) + " and " +
                           describe_run(run) + "; make the sweep values distinct after that");
  }
}

// What the runs read from files, read now, so a missing or bad file is invalid input:
// PyTorch sources, data sets, populations' devices.
void check_run_inputs(Experiment& exp, const std::string& base_dir, Validator& v) {
  // PyTorch sources (model.module, model.loss, data.module) exist, and each run's record
  // holds their text's fingerprint: an edited model file is a changed config (a re-run
  // does not skip its runs as done; they hold another config).
  std::map<std::string, std::string> sources_read;
  for (RunSpec& run : exp.runs) {
    json sources = external_sources(run.config, base_dir, v, sources_read);
    if (!sources.empty()) run.config["run"]["sources"] = std::move(sources);
  }

  // The data's files exist (a missing data set is invalid input, said before any run).
  std::vector<json> data_checked;
  for (const auto& run : exp.runs) {
    const json d = run.bound_data->object();
    if (std::find(data_checked.begin(), data_checked.end(), d) != data_checked.end()) continue;
    data_checked.push_back(d);
    run.bound_data->check_files(base_dir, v);
  }

  // A population's devices are read now, as the data's files are (a missing file or a bad
  // line is invalid input), and clients that come and go need an engine that takes back the
  // jobs they leave. Each folder is read once per client count.
  std::map<std::pair<std::string, int64_t>, bool> devices_read;  // -> whether it has availability
  for (const auto& run : exp.runs) {
    const ClientsSpec& c = run.settings.clients;
    if (c.devices.empty() || c.count <= 0 || !run.bound_engine) continue;
    const auto key = std::make_pair(data_path(c.devices, base_dir), c.count);
    if (!devices_read.count(key)) {
      try {
        devices_read[key] = !read_client_devices(key.first, size_t(c.count)).always_available();
      } catch (const ConfigError& e) {
        v.error("clients.devices", e.what());
        devices_read[key] = false;
      }
    }
    const EngineType* type = find_engine_type(run.bound_engine->type());
    if (devices_read[key] && type && !type->departures) {
      std::string able;
      for (const auto& t : engine_types())
        if (t.departures) able += (able.empty() ? "" : ", ") + t.name;
      v.error("clients.devices", "its clients come and go (availability.csv), and engine " + type->name + " " +
                                     describe_run(run) +
                                     " cannot take back a job its client leaves unfinished; "
                                     "engines that can: " +
                                     able);
    }
  }
}

void resolve_compute(Experiment& exp, const std::string& base_dir, Validator& v) {
  // Trace files are read now, so a missing file or a bad line is invalid input, not a
  // failure half-way through an experiment; then what each run will cost is checked
  // (a run that cannot advance, or that needs more memory than there is).
  std::vector<std::pair<json, std::shared_ptr<Distribution>>> built;  // by BoundDistribution::spec
  std::vector<std::pair<json, size_t>> checked;                       // trace files read: their per-worker sequences
  std::vector<json> failed_specs;
  const bool valid = v.ok();  // the cost checks read the runs' settings, which needs valid configs
  for (auto& run : exp.runs) {
    // What the run draws: its distribution, or what "flops" and "measured" resolve to with
    // the run's model (a PyTorch module's FLOPs and a measured trace: when `asgdsim run`
    // starts, with_measured_compute); its cost is checked then.
    bool resolved = false;
    if (valid) {
      const ComputeResolution r = run.settings.compute_dist->resolve(compute_run_view(run));
      if (!r.error.empty()) {
        v.error("cluster.compute.dist", r.error);
        continue;
      }
      resolved = r.draw != nullptr;
      apply_compute(run, r, exp.notes);
    }
    const std::pair<const char*, const BoundDistribution*> dists[] = {{"compute", run.settings.compute_dist.get()},
                                                                      {"speeds", run.settings.speeds_dist.get()}};
    for (const auto& [key, dist] : dists) {
      const json spec = dist ? dist->spec() : json::object();
      if (spec.value("file", "").empty()) continue;  // a trace's file (no other dist has one)
      auto seen = std::find_if(checked.begin(), checked.end(), [&](const auto& c) { return c.first == spec; });
      if (seen == checked.end()) {
        size_t sequences = 0;
        try {
          sequences = dist->make(base_dir)->worker_sequences();
        } catch (const std::exception& e) {
          v.error(std::string("cluster.") + key + ".file", e.what());
          failed_specs.push_back(spec);
        }
        seen = checked.insert(checked.end(), {spec, sequences});
      }
      // a per-worker trace replays one sequence per worker: one for each, no more, no fewer
      if (valid && seen->second > 0 && seen->second != size_t(run.settings.workers))
        v.error(std::string("cluster.") + key + ".file",
                "trace file " + spec.value("file", "") + " holds " + std::to_string(seen->second) +
                    " workers' sequences (a per-worker trace); the run has " + std::to_string(run.settings.workers) +
                    " workers (cluster.workers)");
    }
    if (valid && run.settings.compute_model.value("dist", "") == "trace") {
      // how a trace is replayed: every worker's steps drawn from it, or each worker its own
      const json spec = run.settings.compute_dist->spec();
      auto seen = std::find_if(checked.begin(), checked.end(), [&](const auto& c) { return c.first == spec; });
      const bool per_worker = seen != checked.end() && seen->second > 0;
      run.settings.compute_model["replay"] = per_worker ? "per_worker" : "draw";
    }
    if (!resolved) continue;
    // a repeat is its first run's config with another seed: what it costs was checked with that one
    if (run.repeat > 0) continue;
    const json compute_spec = run.settings.compute_dist->spec();
    if (std::find(failed_specs.begin(), failed_specs.end(), compute_spec) != failed_specs.end()) continue;
    std::shared_ptr<Distribution> compute;
    for (const auto& [spec, dist] : built)
      if (spec == compute_spec) compute = dist;
    if (!compute) {
      try {
        compute = run.settings.compute_dist->make(base_dir);
      } catch (const std::exception& e) {
        v.error("cluster.compute", e.what());
        continue;
      }
      built.emplace_back(compute_spec, compute);
    }
    check_run_resources(run, *compute, v);
    if (v.ok()) warn_of_rounds_past_the_budget(exp, run, *compute);
  }
}

// Expands engine x sweep point x repeat into exp.runs, every run validated whole (its
// issues reported on the experiment); returns each engine as resolved (for
// experiment.json), and fills engine_of_run (an index into engines, per run).
json expand_runs(const json& base, const std::vector<EngineEntry>& engines, const std::vector<std::string>& labels,
                 const Sweep& sweep, const std::vector<std::vector<bool>>& applies, const std::string& sweepable_top,
                 const std::string& name, uint64_t seed, int64_t repeats, Experiment& exp,
                 std::vector<size_t>& engine_of_run, Validator& v) {
  size_t points = 1;
  for (const auto& [k, vals] : sweep) points *= vals.size();
  std::vector<std::string> sweep_keys;
  for (const auto& [k, vals] : sweep) sweep_keys.push_back(k);
  const std::vector<std::string> short_names = run_id_key_names(sweep_keys);

  json resolved_engines = json::array();
  for (size_t e = 0; e < engines.size(); ++e) {
    for (size_t p = 0; p < points; ++p) {
      json run_user = base;
      run_user["engine"] = engines[e].object;
      json sweep_values = json::object();
      std::string id = labels[e];
      size_t rest = p;
      std::vector<size_t> idx(sweep.size());
      bool repeated_point = false;  // a key that does not apply to this engine past its first value
      for (size_t k = sweep.size(); k-- > 0;) {
        idx[k] = rest % sweep[k].second.size();
        rest /= sweep[k].second.size();
        repeated_point = repeated_point || (!applies[e][k] && idx[k] != 0);
      }
      if (repeated_point) continue;
      std::string point_text;
      for (size_t k = 0; k < sweep.size(); ++k) {
        if (!applies[e][k]) continue;
        const json& val = sweep[k].second[idx[k]];
        sweep_values[sweep[k].first] = val;
        id += "-" + sanitize(short_names[k] + "=" + value_label(val));
        point_text += (point_text.empty() ? "" : ", ") + sweep[k].first + "=" + value_text(val);
        try {
          set_path(run_user, sweep[k].first, val);
        } catch (const std::exception& ex) {
          v.error("sweep." + sweep[k].first, ex.what());
        }
      }
      Validator rv;
      RunSettings settings;
      std::shared_ptr<const BoundEngine> bound;
      std::shared_ptr<const BoundModel> bound_model;
      std::shared_ptr<const BoundData> bound_data;
      json resolved = resolve_run(run_user, rv, settings, bound, bound_model, bound_data);
      report_run_issues(rv, e, sweep, sweepable_top, v);
      if (!rv.ok()) continue;
      if (p == 0) {  // the engine as resolved, for experiment.json
        json engine = resolved["engine"];
        engine["name"] = labels[e];
        resolved_engines.push_back(engine);
      }
      for (int r = 0; r < int(repeats); ++r) {
        RunSpec run;
        run.engine = labels[e];
        run.sweep_values = sweep_values;
        run.seed = seed + uint64_t(r);
        run.repeat = r;
        run.run_id = id + "-seed" + std::to_string(run.seed);
        run.config = resolved;
        run.config["seed"] = run.seed;
        run.settings = settings;
        run.settings.seed = run.seed;
        run.bound_engine = bound;
        run.bound_model = bound_model;
        run.bound_data = bound_data;
        run.config["name"] = name;
        run.config["run"] =
            get_fields(run_record().fields, RunRecord{run.run_id, name, run.engine, sweep_values, run.seed, r});
        exp.runs.push_back(std::move(run));
        engine_of_run.push_back(e);
      }
    }
  }
  return resolved_engines;
}

}  // namespace

Experiment resolve_experiment(const json& user, const std::string& source, const std::string& base_dir) {
  Validator v;
  Experiment exp;
  exp.source = source;
  exp.base_dir = base_dir;
  if (!user.is_object()) {
    v.error("", "the config must be a JSON object, got " + brief(user));
    v.throw_if_failed(source);
  }
  // The run-level keys common to every run, checked once on the experiment.
  json base = user;
  base.erase("engines");
  base.erase("sweep");
  const IssueMark top_mark(v);
  json top_checked = v.object(user, "", top_section().params(), with_sections({"engines", "sweep"}));
  const bool top_clean = top_mark.clean();

  const ExperimentKeys keys = read_experiment_keys(user, v);
  const std::vector<EngineEntry>& engines = keys.engines;
  const Sweep sweep = check_sweep(keys.sweep, v);
  std::string name = user.contains("name") ? text_of(top_checked, "name") : kDefaultExperimentName;
  check_name(name, user.contains("name") && top_clean, v);
  const uint64_t seed = uint64_t(top_integer(top_checked, top_clean, "seed"));
  const int64_t repeats = top_integer(top_checked, top_clean, "repeats");

  const std::vector<std::string> labels = engine_labels(engines, v);

  check_run_count(user, engines.size(), repeats, sweep, v, source);

  std::string sweepable_top;
  for (const std::string& k : kRunSections) sweepable_top += (sweepable_top.empty() ? "" : ", ") + k;
  for (const auto& p : top_section().params())
    if (p.name != "name" && p.name != "seed" && p.name != "repeats") sweepable_top += ", " + p.name;

  const std::vector<std::vector<bool>> applies = sweep_applies(engines, sweep, v);
  check_train_overrides(engines, sweep, v);
  v.throw_if_failed(source);

  std::vector<size_t> engine_of_run;  // index into engines, per run
  const json resolved_engines =
      expand_runs(base, engines, labels, sweep, applies, sweepable_top, name, seed, repeats, exp, engine_of_run, v);
  check_run_ids(exp, engine_of_run, v);

  check_run_inputs(exp, base_dir, v);

  resolve_compute(exp, base_dir, v);
  v.throw_if_failed(source);
  warn_of_fixed_compute_in_sweeps(sweep, exp);
  warn_of_free_network(exp);

  exp.resolved = top_checked;
  exp.resolved["name"] = name;
  exp.resolved["engines"] = resolved_engines;
  json sweep_json = json::object();
  for (const auto& [k, vals] : sweep) {
    sweep_json[k] = vals;
    exp.sweep_keys.push_back(k);
  }
  exp.resolved["sweep"] = sweep_json;
  // Sections as resolved for the first run (sweeps vary them per run; see each config.json).
  if (!exp.runs.empty())
    for (const std::string& k : kRunSections) exp.resolved[k] = exp.runs.front().config[k];
  return exp;
}

}  // namespace asgd
