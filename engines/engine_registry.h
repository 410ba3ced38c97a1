// engines/engine_registry.h — the engine family keyed by the config's "type". Each engine
// describes itself in its own file (engines/<name>.cpp: its config struct, keys with
// defaults, ranges and docs, the checks that involve other config keys, what it costs
// and its factory) as an EngineType; engines/registry.cpp lists them, one line each.
// make_engine throws on an unknown type naming the valid ones.
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/config/field.h"
#include "sim/core/engine.h"

namespace asgd {

// What one step of an engine costs, for the run-scale and memory estimates
// (experiments/run/resources): messages a worker sends per gradient, gradients computed
// per update of the model of record, and parameter-sized vectors held per worker.
struct EngineCost {
  double messages_per_step = 2;      // a pull and a push per gradient
  double gradients_per_update = 1;   // async: one
  double vectors_per_worker = 2;     // a gradient in flight and the parameters it read
  // Whether each worker also holds a train.optimizer state (local SGD, DiLoCo): its
  // vectors (a velocity, Adam's two moments) are added per worker.
  bool optimizer_per_worker = false;
};

struct EngineType {
  std::string name;
  std::string doc;
  std::vector<ParamInfo> params;
  // Checks across keys, reported at "engine.<key>" (experiments/ renames the path to
  // engines[i]): `engine` is the engine's object with defaults filled, `run` the run's
  // resolved config (its sections may hold values already reported as invalid).
  std::function<void(const nlohmann::json& engine, const nlohmann::json& run, Validator& v)> check;
  // What it costs (engine validated), for `workers` workers.
  std::function<EngineCost(const nlohmann::json& engine, int workers)> cost;
  // Builds the engine from its validated object.
  std::function<std::unique_ptr<Engine>(const nlohmann::json& engine)> make;
  // What a real run (`asgdsim cluster`) cannot do of this engine's keys (a collective, a
  // cancelled step: simulated only), reported at "engine.<key>" (engine validated). Optional.
  std::function<void(const nlohmann::json& engine, Validator& v)> check_real;
  // Host placement over several boxes (each box's sum exchanged with the servers).
  bool sums_across_boxes = false;
  // It all-reduces gradients (sync's collectives), so PowerSGD (compression "powersgd")
  // can compress them; the engine's own check says in which modes.
  bool all_reduces = false;
};

// For an engine (or a mode of one) that pushes no gradients: compression of pushed
// gradients (cluster.network.compression: topk, int8) would not be applied, so it is
// refused, naming `what` sends instead. (powersgd is checked once for every engine by
// the config binding: EngineType::all_reduces.)
inline void refuse_compression(const nlohmann::json& run, const std::string& what, Validator& v) {
  const nlohmann::json& net = run.value("cluster", nlohmann::json::object()).value("network", nlohmann::json::object());
  const nlohmann::json& c = net.is_object() ? net.value("compression", nlohmann::json::object()) : nlohmann::json();
  if (c.is_object() && c.contains("type") && c["type"].is_string() && c["type"] != "none" && c["type"] != "powersgd")
    v.error("cluster.network.compression.type",
            "compresses pushed gradients, but " + what + ": use \"none\" (got " + c["type"].dump() + ")");
}

// For an engine's check_real whose late steps are cancelled (late "cancel"): a real worker
// rank cannot abandon a step under way, so a real run refuses it.
inline void refuse_cancel_in_real_run(Validator& v) {
  v.error("engine.late", "\"cancel\": a real worker rank cannot abandon a step under way in this protocol "
                         "(cancellation is simulated only; use \"drop\")");
}

// An EngineType whose keys fill `Config` (declared with field(), sim/config/field.h):
// make binds a Config from the validated object and calls `build(config, engine)`;
// cost likewise calls `cost(config, workers)` (left out: EngineCost's defaults), and
// check_real `real(config, v)` (left out: a real run can do all of it).
template <class Config>
EngineType engine_type(std::string name, std::string doc, std::vector<Field<Config>> fields,
                       std::function<std::unique_ptr<Engine>(const Config&, const nlohmann::json& engine)> build,
                       std::function<EngineCost(const Config&, int workers)> cost = {},
                       std::function<void(const Config&, Validator& v)> real = {}) {
  EngineType t;
  t.name = std::move(name);
  t.doc = std::move(doc);
  t.params = params_of(fields);
  auto bind = [fields](const nlohmann::json& engine) {
    Config c;
    set_fields(fields, engine, c);
    return c;
  };
  t.make = [bind, build](const nlohmann::json& engine) { return build(bind(engine), engine); };
  t.cost = [bind, cost](const nlohmann::json& engine, int workers) {
    return cost ? cost(bind(engine), workers) : EngineCost{};
  };
  if (real) t.check_real = [bind, real](const nlohmann::json& engine, Validator& v) { real(bind(engine), v); };
  return t;
}

// Every engine, in the order `asgdsim list` shows them.
const std::vector<EngineType>& engine_types();
// nullptr for an unknown name.
const EngineType* find_engine_type(const std::string& name);
// The engines and their keys, as the validator and `asgdsim list` read them.
const std::vector<ComponentInfo>& engine_catalog();
// What the engine a validated object names costs for `workers` workers (EngineCost's
// defaults for an engine that declares none).
EngineCost engine_cost(const nlohmann::json& engine, int workers);
// spec: a validated engine object {"type": ..., params with defaults filled}.
std::unique_ptr<Engine> make_engine(const nlohmann::json& spec);

}  // namespace asgd
