// engines/single_replica_warmup.h — the single-replica warm-up phase every engine can be
// preceded by (train.single_replica_epochs; see single_replica_warmup.cpp).
#pragma once
#include <memory>
#include <vector>
#include "sim/core/engine.h"
#include "sim/core/runtime.h"

namespace asgd {

class ServerUpdate;

// Wraps the configured engine: with train.single_replica_epochs = 0 it only forwards.
class SingleReplicaWarmup final : public Engine {
 public:
  // `config`: the engine's configuration (its keys read back from its typed config), the
  // base of describe().
  SingleReplicaWarmup(std::unique_ptr<Engine> engine, nlohmann::json config);
  std::string type() const override { return engine_->type(); }
  void start(Runtime& sim) override;
  void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) override;
  void on_timer(Runtime& sim, const Timer& e) override;
  void on_worker_down(Runtime& sim, int worker) override;
  void on_worker_up(Runtime& sim, int worker) override;
  Snapshot model_of_record() const override;
  bool keeps_read_params() const override { return engine_->keeps_read_params(); }
  const char* staleness_unit() const override { return engine_->staleness_unit(); }
  nlohmann::json describe() const override;
  std::string checkpoint_refusal() const override { return engine_->checkpoint_refusal(); }
  void checkpoint(Runtime& sim, StateArchive& a) override;
  std::vector<const ParameterStore*> pull_stores() const override {
    return engine_started_ ? engine_->pull_stores() : std::vector<const ParameterStore*>{};
  }

 private:
  void launch(Runtime& sim);
  void hand_over(Runtime& sim);

  std::unique_ptr<Engine> engine_;
  nlohmann::json config_;
  double epochs_ = 0;  // E
  bool engine_started_ = false;
  bool busy_ = false;                      // the replica's gradient is in flight
  int replica_ = 0;                        // the worker running the replica
  std::unique_ptr<ParameterStore> store_;  // the replica's parameters during the warm-up
  std::shared_ptr<ServerUpdate> server_;
  std::vector<int32_t> ids_;
};

}  // namespace asgd
