// engines/easgd.h — elastic-averaged SGD (see easgd.cpp).
#pragma once
#include <memory>
#include <vector>
#include "sim/engine.h"
#include "sim/simulation.h"

namespace asgd {

class EasgdEngine final : public Engine {
 public:
  explicit EasgdEngine(const nlohmann::json& spec);
  std::string type() const override { return "easgd"; }
  void start(Simulation& sim) override;
  void on_gradient(Simulation& sim, std::unique_ptr<GradientJob> job) override;
  Snapshot model_of_record() const override { return center_->current(); }
  nlohmann::json describe() const override;

 private:
  void launch_next(Simulation& sim, int worker);
  nlohmann::json spec_;
  int period_;
  double alpha_ = 0;   // resolved at start ("auto" = 0.9 / workers)
  float delta_;        // EAMSGD Nesterov momentum (0: plain EASGD)
  std::unique_ptr<ParameterStore> center_;
  std::vector<std::unique_ptr<ParameterStore>> local_;  // x_i
  std::vector<DeviceArray<float>> velocity_;            // V_i (EAMSGD)
  std::vector<DeviceArray<float>> lookahead_;           // x_i - lr*delta*V_i
  std::vector<uint64_t> local_steps_;
  std::vector<int32_t> ids_;
};

}  // namespace asgd
