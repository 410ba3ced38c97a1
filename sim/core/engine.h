// sim/core/engine.h — the interface every algorithm (engines/) implements. A runtime (the
// simulator, or the MPI server of asgdsim cluster: sim/core/runtime.h) calls it; an engine
// decides what happens when a gradient arrives and who waits for whom, and tells the
// runtime what it applied, dropped or updated.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/core/parameter_store.h"

namespace asgd {

class Runtime;
struct GradientJob;

// A timer the engine set (Runtime::schedule_timer) has come due: for `worker`, with the
// engine's own tag `payload` (what to do). Data, not a callback, so a checkpoint can keep
// the timers waiting in the event queue.
struct Timer {
  int worker = 0;
  uint64_t payload = 0;
};

class Engine {
 public:
  virtual ~Engine() = default;
  virtual std::string type() const = 0;
  // Schedule the first work (launch gradients) at time 0.
  virtual void start(Runtime& sim) = 0;
  // A gradient arrived (computed and pushed). The engine owns the job now and gives it
  // back with sim.recycle() when done with it.
  virtual void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) = 0;
  virtual void on_timer(Runtime& sim, const Timer& e) {}
  // Failure model: worker went down (its in-flight gradient is lost) or came back.
  virtual void on_worker_down(Runtime& sim, int worker) {}
  virtual void on_worker_up(Runtime& sim, int worker) {}
  // The parameters train_loss/test_loss are measured on.
  virtual Snapshot model_of_record() const = 0;
  // Whether jobs must keep the parameters they read after arrival (DC-ASGD backups).
  virtual bool keeps_read_params() const { return false; }
  // What its staleness counts (summary.json staleness.unit): updates of the model of record
  // by default.
  virtual const char* staleness_unit() const { return "updates"; }
  // What it resolved when it started beyond its configured keys (easgd's alpha_used), added
  // to them in the run's summary (engine_config); the keys themselves are read back from
  // its typed config by the registry (make_engine). Nothing by default.
  virtual nlohmann::json describe() const { return nlohmann::json::object(); }

  // Checkpoints (docs/reliability.md, "Checkpoints"). Why this engine, as configured,
  // cannot write its whole state and read it back ("" when it can).
  virtual std::string checkpoint_refusal() const { return "engine " + type() + " has no checkpoint yet"; }
  // Its whole state, written or read back by `a` (a.saving()); read back, it takes the
  // place of start(). Called between events, with no server update under way and every
  // gradient in flight computed.
  virtual void checkpoint(Runtime& sim, StateArchive& a) {}
  // The stores its steps pull from (Step::pull), by which a checkpoint names a job's.
  virtual std::vector<const ParameterStore*> pull_stores() const { return {}; }
};

}  // namespace asgd
