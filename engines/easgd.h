// engines/easgd.h — elastic-averaged SGD, asynchronous or synchronous (see easgd.cpp).
#pragma once
#include <memory>
#include <vector>
#include "sim/core/engine.h"
#include "sim/core/runtime.h"

namespace asgd {

// The engine's keys (their defaults are written once, in their declarations in easgd.cpp).
struct EasgdConfig {
  bool sync{};  // mode "sync": all workers exchange together
  int period{};
  double alpha{};      // < 0: "auto" = 0.9 / workers
  double delta{};      // EAMSGD Nesterov momentum
  bool paper_order{};  // order "paper" (else "local_first")
};

class EasgdEngine final : public Engine {
 public:
  EasgdEngine(const EasgdConfig& config);
  std::string type() const override { return "easgd"; }
  void start(Runtime& sim) override;
  void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) override;
  void on_worker_down(Runtime& sim, int worker) override;
  void on_worker_up(Runtime& sim, int worker) override;
  Snapshot model_of_record() const override { return center_->current(); }
  const char* staleness_unit() const override { return "exchanges"; }
  nlohmann::json describe() const override;
  std::string checkpoint_refusal() const override { return ""; }
  void checkpoint(Runtime& sim, StateArchive& a) override;

 private:
  void launch_next(Runtime& sim, int worker, const DeferredStep& before = {});
  void exchange_one(Runtime& sim, int worker);                       // mode async: the server's update for one exchange
  void exchange_all_if_ready(Runtime& sim);                          // mode sync: the barrier, then the exchange
  void exchange_group(Runtime& sim, const std::vector<int>& group);  // mode sync: the server's update
  void keep_exchanged(Runtime& sim, int worker);                     // order "paper": x_i before the exchange moves it
  void replied(int worker);  // the worker's exchange is done: its next step receives the reply
  bool sync_;                // mode "sync": all workers exchange together
  bool paper_;               // order "paper": the step after an exchange computes at the pre-exchange x_i
  int period_;
  int workers_ = 0;
  double alpha_config_;  // as configured (< 0: "auto")
  double alpha_ = 0;     // resolved at start ("auto" = 0.9 / workers)
  float delta_;          // EAMSGD Nesterov momentum (0: plain EASGD)
  std::unique_ptr<ParameterStore> center_;
  // x_i, (num_params) each, updated in place: only worker i's own job reads it, and it is
  // changed only while none is computing (or by that job itself: a deferred step)
  std::vector<std::shared_ptr<Params>> local_;
  std::vector<uint64_t> local_version_;             // updates of x_i so far
  std::vector<DeviceArray<float>> deferred_grad_;   // g of x_i's step deferred to its next job
  std::vector<DeviceArray<float>> velocity_;        // V_i (EAMSGD)
  std::vector<std::shared_ptr<Params>> lookahead_;  // EAMSGD: x_i - lr delta V_i, reused
  std::vector<uint64_t> local_steps_;
  // order "paper": x_i as the exchange read it (before its elastic move), which the
  // worker's next gradient is computed at; at_exchange_[i] while that step is not launched
  std::vector<std::shared_ptr<Params>> exchanged_;
  std::vector<bool> at_exchange_;
  std::vector<bool> waiting_;      // sync: done its period, at the barrier
  std::vector<bool> in_exchange_;  // pushed for an exchange the server has not answered
  std::vector<bool> reply_due_;    // its next step first receives the server's reply
  std::vector<uint64_t> seen_;     // center version at the worker's last exchange
  std::vector<int> group_;         // sync: the workers of this exchange
  DeviceArray<float> mean_;        // sync: mean_i x_i (num_params)
  std::vector<int32_t> ids_;
};

}  // namespace asgd
