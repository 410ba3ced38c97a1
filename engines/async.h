// engines/async.h — asynchronous parameter-server SGD, with the staleness-aware rate and
// DC-ASGD delay compensation as options (see async.cpp).
#pragma once
#include <memory>
#include <vector>
#include "engines/staleness_weight.h"
#include "sim/core/engine.h"
#include "sim/core/runtime.h"

namespace asgd {

class ServerUpdate;

// The engine's keys (their defaults are written once, in their declarations in async.cpp).
struct AsyncConfig {
  std::string type = "async";   // the engine's name (ringmaster builds this engine too)
  bool divide_by_staleness{};   // lr_staleness "divide": lr / max(tau, 1)
  double delay_compensation{};  // lambda of DC-ASGD (0: off)
  StalenessWeight weight;       // staleness_weight: lr * w(tau) (engines/staleness_weight.h)
  int64_t delay_threshold{};    // Ringmaster's R: a gradient of delay >= R is ignored (0: none)
  bool stop_stale{};            // Ringmaster's calculation stops: a step whose delay reaches R is cancelled
};

class AsyncEngine final : public Engine {
 public:
  AsyncEngine(const AsyncConfig& config);
  std::string type() const override { return type_; }
  void start(Runtime& sim) override;
  void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) override;
  void on_worker_down(Runtime& sim, int worker) override;
  void on_worker_up(Runtime& sim, int worker) override;
  Snapshot model_of_record() const override;
  // DC-ASGD needs the parameters each gradient was computed on when it arrives.
  bool keeps_read_params() const override { return lambda_ > 0.0f; }
  std::string checkpoint_refusal() const override { return ""; }
  void checkpoint(Runtime& sim, StateArchive& a) override;
  std::vector<const ParameterStore*> pull_stores() const override { return {store_.get()}; }

 private:
  void launch_next(Runtime& sim, int worker);
  void apply(Runtime& sim, std::unique_ptr<GradientJob> job);  // the server's update for one gradient
  void stop_stale_steps(Runtime& sim);                         // Ringmaster's calculation stops, after an update
  std::string type_;
  bool divide_by_staleness_;  // lr_staleness = "divide": lr / max(tau, 1)
  float lambda_;              // delay_compensation (0: off)
  StalenessWeight weight_;    // staleness_weight (none: the rate is untouched)
  std::unique_ptr<ParameterStore> store_;
  std::shared_ptr<ServerUpdate> server_;
  std::vector<int32_t> ids_;
  std::vector<bool> at_server_;  // by worker: its gradient arrived and is not applied yet
  uint64_t threshold_;           // Ringmaster's R (0: every gradient is applied)
  bool stop_stale_;
  uint64_t queued_ = 0;                // updates asked of the server and not yet applied
  std::vector<bool> busy_;             // by worker: a step in flight
  std::vector<uint64_t> launched_at_;  // by worker: the version current when its step in flight was launched
};

}  // namespace asgd
