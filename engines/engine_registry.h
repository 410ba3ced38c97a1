// engines/engine_registry.h — the engine family keyed by the config's "type". Each engine
// describes itself in its own file (engines/<name>.cpp: its config struct, keys with
// defaults, ranges and docs, and its typed hooks: the checks that involve other config
// sections, what it costs, what a real run refuses, its factory) as an EngineType;
// engines/registry.cpp lists them, one line each. An engine object is bound to its typed
// config once, at validation (bind_engine: a BoundEngine), and the run carries that.
#pragma once
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/config/field.h"
#include "sim/config/type_family.h"
#include "sim/core/engine.h"
#include "sim/net/catalog.h"

namespace asgd {

// What one step of an engine costs, for the run-scale and memory estimates
// (experiments/config/resources): messages a worker sends per gradient, gradients computed
// per update of the model of record, and parameter-sized vectors held per worker.
struct EngineCost {
  double messages_per_step = 2;     // a pull and a push per gradient
  double gradients_per_update = 1;  // async: one
  double vectors_per_worker = 2;    // a gradient in flight and the parameters it read
  // Whether each worker also holds a train.optimizer state (local SGD, DiLoCo): its
  // vectors (a velocity, Adam's two moments) are added per worker.
  bool optimizer_per_worker = false;
};

// What engines' checks across sections read of the run: typed, read from the run's bound
// settings (experiments/config) of the sections that bound with no error of their own; a
// section with an error leaves its part empty (unset, "", false), and the checks that need
// it skip (they show once that error is fixed).
struct EngineRunView {
  std::optional<int64_t> workers;  // cluster.workers (given, or fixed by the topology)
  std::optional<double> momentum;  // train.momentum
  std::string optimizer;           // train.optimizer
  bool nesterov = false;           // train.nesterov is true
  std::string compression;         // cluster.network.compression.type
  bool host_placement = false;     // cluster.placement is "host"
  TopologyFacts topology;          // whether its boxes have hosts, how many boxes
  bool failures = false;           // cluster.failures has events or a rate > 0
  std::string staleness;           // staleness.mode
};

// An engine object bound once (at validation) to its typed config: what the run's
// components ask of the engine, each hook reading the typed config (EngineTypeOf).
class BoundEngine {
 public:
  virtual ~BoundEngine() = default;
  virtual const std::string& type() const = 0;
  // Checks across sections, reported at "engine.<key>" or at the other section's key
  // (experiments/ renames "engine" to engines[i]).
  virtual void check(const EngineRunView& run, Validator& v) const = 0;
  // What it costs for `workers` workers.
  virtual EngineCost cost(int workers) const = 0;
  virtual std::unique_ptr<Engine> make() const = 0;
  // What a real run (`asgdsim cluster`) cannot do of its keys (a collective, a cancelled
  // step: simulated only), reported at "engine.<key>".
  virtual void check_real(Validator& v) const = 0;
  // Its keys, read back from the typed config (Field::get).
  virtual nlohmann::json keys() const = 0;
  // Its label (the object's "name"; absent in an object built in code) and what its runs
  // changed of train (the object's "train", an object; empty: nothing): config.json and
  // summary.json show them beside its keys.
  std::optional<std::string> name;
  nlohmann::json train = nlohmann::json::object();
};

// An engine's typed hooks over its config struct: `make` builds the engine; `cost` (left
// out: EngineCost's defaults), `check` (checks across sections) and `check_real` (left out:
// a real run can do all of it) are optional.
template <class Config>
struct EngineHooks {
  std::function<std::unique_ptr<Engine>(const Config&)> make;
  std::function<EngineCost(const Config&, int workers)> cost;
  std::function<void(const Config&, const EngineRunView& run, Validator& v)> check;
  std::function<void(const Config&, Validator& v)> check_real;
};

template <class Config>
class BoundEngineOf final : public BoundEngine {
 public:
  struct Declared {
    std::string type;
    std::vector<Field<Config>> fields;
    EngineHooks<Config> hooks;
  };
  BoundEngineOf(std::shared_ptr<const Declared> d, Config c) : d_(std::move(d)), c_(std::move(c)) {}
  const std::string& type() const override { return d_->type; }
  void check(const EngineRunView& run, Validator& v) const override {
    if (d_->hooks.check) d_->hooks.check(c_, run, v);
  }
  EngineCost cost(int workers) const override { return d_->hooks.cost ? d_->hooks.cost(c_, workers) : EngineCost{}; }
  std::unique_ptr<Engine> make() const override { return d_->hooks.make(c_); }
  void check_real(Validator& v) const override {
    if (d_->hooks.check_real) d_->hooks.check_real(c_, v);
  }
  nlohmann::json keys() const override { return get_fields(d_->fields, c_); }

 private:
  std::shared_ptr<const Declared> d_;
  Config c_;
};

struct EngineType {
  std::string name;
  std::string doc;
  std::vector<ParamInfo> params;
  // Binds a validated engine object (defaults filled; a key it lacks takes its default,
  // as in an object built in code) to the engine's typed config, with its `name` and
  // `train` (bind_entry). Each key's own value check (Field::why_not) is the validator's
  // business before (check_values). `self`: this type (TypeFamily::bind).
  std::function<std::shared_ptr<BoundEngine>(const EngineType& self, const nlohmann::json& engine)> bind;
  // The keys whose values the ParamInfos cannot describe, checked by Field::why_not.
  std::function<void(const nlohmann::json& engine, Validator& v)> check_values;
  // Host placement over several boxes (each box's sum exchanged with the servers).
  bool sums_across_boxes = false;
  // It all-reduces gradients (sync's collectives), so PowerSGD (compression "powersgd")
  // can compress them; the engine's own check says in which modes.
  bool all_reduces = false;
  // It runs on a population of clients (section clients): each step it launches from a
  // fresh Runtime::next_step draws a client, and a client's multi-step job says so
  // (Step::keep_client). The others keep a state per worker that a client would have to
  // carry from slot to slot, and refuse a population.
  bool population = false;
  // It runs only on a population: its jobs are clients' (their sample counts weigh its
  // updates), so clients.count 0 (no population) is refused.
  bool needs_population = false;
  // On a population whose clients come and go (clients.devices with availability.csv): it
  // takes back a client job its client left unfinished (GradientJob::timed_out) and waits
  // for a client when none is available (Step::no_client_until).
  bool departures = false;
};

// The keys every engine object may have beside its type's (`name`, `train`: the
// experiment's engine entry, declared in experiments/config) set on its bound engine.
void bind_entry(const nlohmann::json& engine, BoundEngine& bound);

// For an engine (or a mode of one) that pushes no gradients: compression of pushed
// gradients (cluster.network.compression: topk, int8) would not be applied, so it is
// refused, naming `what` sends instead. (powersgd is checked once for every engine by
// the config binding: EngineType::all_reduces.)
inline void refuse_compression(const EngineRunView& run, const std::string& what, Validator& v) {
  if (!run.compression.empty() && run.compression != "none" && run.compression != "powersgd")
    v.error("cluster.network.compression.type", "compresses pushed gradients, but " + what + ": use \"none\" (got " +
                                                    nlohmann::json(run.compression).dump() + ")");
}

// For an engine's check_real whose late steps are cancelled (late "cancel"): a real worker
// rank cannot abandon a step under way, so a real run refuses it.
inline void refuse_cancel_in_real_run(Validator& v) {
  v.error("engine.late",
          "\"cancel\": a real worker rank cannot abandon a step under way in this protocol "
          "(cancellation is simulated only; use \"drop\")");
}

// An EngineType whose keys fill `Config` (declared with field(), sim/config/field.h: every
// field with a getter): bind sets a Config from the validated object once, and the hooks
// read it.
template <class Config>
EngineType engine_type(std::string name, std::string doc, std::vector<Field<Config>> fields,
                       EngineHooks<Config> hooks) {
  using Bound = BoundEngineOf<Config>;
  EngineType t;
  t.name = name;
  t.doc = std::move(doc);
  t.params = params_of(fields);
  auto d = std::make_shared<const typename Bound::Declared>(typename Bound::Declared{name, fields, std::move(hooks)});
  t.bind = [d](const EngineType&, const nlohmann::json& engine) -> std::shared_ptr<BoundEngine> {
    Config c;
    set_fields(d->fields, engine, c);
    auto bound = std::make_shared<Bound>(d, std::move(c));
    bind_entry(engine, *bound);
    return bound;
  };
  t.check_values = [d](const nlohmann::json& engine, Validator& v) { check_values(d->fields, engine, "engine", v); };
  return t;
}

// Every engine, in the order `asgdsim list` shows them (engines/registry.cpp).
const TypeFamily<EngineType>& engine_family();
// engine_family()'s types, find (nullptr for an unknown name) and catalog.
const std::vector<EngineType>& engine_types();
const EngineType* find_engine_type(const std::string& name);
const std::vector<ComponentInfo>& engine_catalog();
// Binds a validated engine object {"type": ..., params with defaults filled, "name",
// "train"} to its typed config (an object built in code: a key it lacks takes its
// default); throws std::invalid_argument on an unknown type naming the valid ones.
std::shared_ptr<const BoundEngine> bind_engine(const nlohmann::json& spec);
// The engine, wrapped in the single-replica warm-up; its describe() is the bound keys, its
// type, name and train where it has them, and what it resolved at start.
std::unique_ptr<Engine> make_engine(const BoundEngine& engine);
// For objects built in code (tests, bench): make_engine(*bind_engine(spec)).
std::unique_ptr<Engine> make_engine(const nlohmann::json& spec);

}  // namespace asgd
