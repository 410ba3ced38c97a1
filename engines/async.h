// engines/async.h — asynchronous parameter-server SGD (see async.cpp).
#pragma once
#include <memory>
#include <vector>
#include "sim/engine.h"
#include "sim/simulation.h"

namespace asgd {

class ServerUpdate;

class AsyncEngine final : public Engine {
 public:
  explicit AsyncEngine(const nlohmann::json& spec);
  std::string type() const override { return "async"; }
  void start(Simulation& sim) override;
  void on_gradient(Simulation& sim, std::unique_ptr<GradientJob> job) override;
  Snapshot model_of_record() const override;
  nlohmann::json describe() const override { return spec_; }

 private:
  void launch_next(Simulation& sim, int worker);
  nlohmann::json spec_;
  std::unique_ptr<ParameterStore> store_;
  std::shared_ptr<ServerUpdate> server_;
  std::vector<int32_t> ids_;
};

}  // namespace asgd
