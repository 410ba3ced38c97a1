// engines/registry.cpp — engine types, their parameters, and the factory. The ParamInfo
// entries drive config validation (type, range, choices), `asgdsim list` and the error
// messages; checks that involve other config keys are in check_engine
// (experiments/config.cpp).
#include "engines/engine_registry.h"
#include <stdexcept>
#include "engines/async.h"
#include "engines/easgd.h"
#include "engines/local_sgd.h"
#include "engines/single_replica_warmup.h"
#include "engines/ssp.h"
#include "engines/sync.h"

namespace asgd {
namespace {
ParamInfo choice(std::string name, std::string def, std::string doc, std::vector<std::string> choices) {
  ParamInfo p{std::move(name), ParamType::String, std::move(def), std::move(doc)};
  p.choices = std::move(choices);
  return p;
}
}  // namespace

namespace {
// The synchronous family's communication (docs/architecture.md, "Collectives").
ParamInfo comm_param() {
  return choice("comm", "ps",
                "how an iteration's gradients are combined: \"ps\" the parameter server (each worker pulls and "
                "pushes); \"allreduce\" a ring all-reduce among the aggregated workers; \"hierarchical\" reduce "
                "to each box's host, ring among the hosts, broadcast (needs cluster.topology)",
                {"ps", "allreduce", "hierarchical"});
}
}  // namespace

const std::vector<ComponentInfo>& engine_catalog() {
  static const std::vector<ComponentInfo> catalog = {
      {"async",
       "asynchronous SGD, parameter server (Dean et al. 2012): apply each gradient on arrival; optionally "
       "staleness-aware (Zhang et al. 2016) and delay-compensated (DC-ASGD, Zheng et al. 2017)",
       {choice("lr_staleness", "none",
               "\"divide\": a gradient of staleness tau is applied with lr / max(tau, 1) (Zhang et al. 2016)",
               {"none", "divide"}),
        ParamInfo{"delay_compensation", ParamType::Number, 0.0,
                  "lambda of DC-ASGD: g + lambda g*g*(w - w_read) (0 = off; MXNet's default is 0.04; "
                  "needs train.momentum 0)",
                  0}}},
      {"sync", "synchronous SGD: all workers compute on the same parameters; apply the mean once all arrive",
       {comm_param()}},
      {"sync_backup",
       "synchronous SGD with b backup replicas (Chen et al. 2016): apply the mean of the first "
       "workers - b gradients, drop the late ones",
       {ParamInfo{"backups", ParamType::Integer, 1, "b: replicas whose late gradients are dropped (< workers)", 0},
        comm_param()}},
      {"ssp",
       "stale-synchronous parallel (Ho et al. 2013): a worker may run at most `bound` clocks ahead of the "
       "slowest; gradients are applied as they arrive; bound 0 is sync",
       {ParamInfo{"bound", ParamType::Integer, 3, "s: how many clocks a worker may lead the slowest live worker", 0}}},
      {"local_sgd",
       "local SGD (Stich 2019; Lin et al. 2020): every worker takes `steps` SGD steps on its own copy, then "
       "the copies are averaged into the model of record; steps 1 is sync",
       {ParamInfo{"steps", ParamType::Integer, 4, "H: local steps per worker between averagings", 1}}},
      {"easgd",
       "elastic-averaged SGD (Zhang, Choromanska & LeCun 2015), asynchronous or synchronous; delta > 0 gives "
       "EAMSGD",
       {choice("mode", "async",
               "\"async\": each worker exchanges with the center on its own; \"sync\": all workers at once, "
               "center += N alpha (mean - center)",
               {"async", "sync"}),
        ParamInfo{"period", ParamType::Integer, 4, "local steps between exchanges with the center", 1},
        ParamInfo{"alpha", ParamType::Any, "auto",
                  "elastic coefficient in [0, 1], or \"auto\" = 0.9 / workers (sync: beta = workers * alpha <= 1)"},
        ParamInfo{"delta", ParamType::Number, 0.0, "Nesterov momentum of the local steps (EAMSGD)", 0, 0.999999},
        choice("order", "paper",
               "\"paper\": the step after an exchange computes its gradient at x_i as the exchange read it "
               "(x - lr g(x) - alpha (x - c), the paper's order); \"local_first\": at x_i after the elastic move",
               {"paper", "local_first"})}},
  };
  return catalog;
}

namespace {
std::unique_ptr<Engine> make_bare_engine(const nlohmann::json& spec) {
  const std::string type = spec.at("type").get<std::string>();
  if (type == "async") return std::make_unique<AsyncEngine>(spec);
  if (type == "sync") return std::make_unique<SyncEngine>(spec, 0);
  if (type == "sync_backup") return std::make_unique<SyncEngine>(spec, spec.at("backups").get<int>());
  if (type == "ssp") return std::make_unique<SspEngine>(spec);
  if (type == "local_sgd") return std::make_unique<LocalSgdEngine>(spec);
  if (type == "easgd") return std::make_unique<EasgdEngine>(spec);
  std::string valid;
  for (const auto& e : engine_catalog()) valid += (valid.empty() ? "" : ", ") + e.name;
  throw std::invalid_argument("unknown engine type '" + type + "' (valid: " + valid + ")");
}
}  // namespace

// Every engine is wrapped in the single-replica warm-up, which only forwards unless
// train.single_replica_epochs > 0 (it reads that from the run's settings at start).
std::unique_ptr<Engine> make_engine(const nlohmann::json& spec) {
  return std::make_unique<SingleReplicaWarmup>(make_bare_engine(spec));
}

}  // namespace asgd
