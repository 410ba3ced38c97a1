// engines/sync.h — synchronous SGD (see sync.cpp).
#pragma once
#include <memory>
#include <vector>
#include "sim/engine.h"
#include "sim/simulation.h"

namespace asgd {

class ServerUpdate;

class SyncEngine final : public Engine {
 public:
  explicit SyncEngine(const nlohmann::json& spec);
  std::string type() const override { return "sync"; }
  void start(Simulation& sim) override;
  void on_gradient(Simulation& sim, std::unique_ptr<GradientJob> job) override;
  Snapshot model_of_record() const override;
  nlohmann::json describe() const override { return spec_; }

 private:
  void begin_iteration(Simulation& sim);
  void finish_iteration(Simulation& sim);
  nlohmann::json spec_;
  std::unique_ptr<ParameterStore> store_;
  std::shared_ptr<ServerUpdate> server_;
  std::vector<int32_t> ids_;
  std::vector<std::unique_ptr<GradientJob>> arrived_;  // by worker index
  int expected_ = 0, received_ = 0;
  uint64_t iteration_ = 0;
  SimTime iteration_start_ = 0;
};

}  // namespace asgd
