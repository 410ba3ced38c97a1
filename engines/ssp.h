// engines/ssp.h — stale-synchronous parallel SGD with staleness bound s (see ssp.cpp).
#pragma once
#include <deque>
#include <memory>
#include <vector>
#include "engines/staleness_weight.h"
#include "sim/core/engine.h"
#include "sim/core/runtime.h"

namespace asgd {

class ServerUpdate;

class SspEngine final : public Engine {
 public:
  SspEngine(uint64_t bound, const StalenessWeight& weight);
  std::string type() const override { return "ssp"; }
  void start(Runtime& sim) override;
  void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) override;
  void on_worker_down(Runtime& sim, int worker) override;
  void on_worker_up(Runtime& sim, int worker) override;
  Snapshot model_of_record() const override;
  std::string checkpoint_refusal() const override { return ""; }
  void checkpoint(Runtime& sim, StateArchive& a) override;
  std::vector<const ParameterStore*> pull_stores() const override { return {store_.get()}; }

 private:
  // One update of the server: the gradients it applies, then the workers it lets go.
  struct Update {
    std::vector<std::unique_ptr<GradientJob>> jobs;  // worker-index order
    std::vector<int> launch;
  };
  bool may_start(int worker) const;
  void find_slowest(Runtime& sim);
  // Every idle worker the bound lets go, in worker order: launched at once, or after the
  // server has applied the gradients pending now.
  void let_go_ready(Runtime& sim);
  void apply_oldest(Runtime& sim);  // the server's next update
  void launch_all(Runtime& sim, const std::vector<int>& workers);
  uint64_t bound_;          // s
  StalenessWeight weight_;  // each gradient scaled by w(tau) (none: untouched)
  std::unique_ptr<ParameterStore> store_;
  std::shared_ptr<ServerUpdate> server_;
  std::vector<uint64_t> clock_;                        // gradients pushed, by worker
  std::vector<bool> busy_;                             // computing a gradient
  std::vector<bool> let_go_;                           // may start: launched when its update is done
  std::vector<std::unique_ptr<GradientJob>> pending_;  // arrived, not applied yet, by worker
  size_t pending_count_ = 0;
  std::deque<Update> updates_;  // asked of the server, in order
  uint64_t slowest_ = 0;        // min clock over live workers
  int at_slowest_ = 0;          // live workers at that clock
  SimTime slowest_since_ = 0;   // when the slowest clock last advanced
  std::vector<float*> parts_;
  std::vector<const std::vector<int32_t>*> part_rows_;  // the rows each touches (ServerUpdate::apply_sum)
  std::vector<int32_t> ids_;
};

}  // namespace asgd
