// engines/sync.h — the synchronous family: sync and sync_backup are one engine.
#pragma once
#include <memory>
#include <vector>
#include "sim/core/engine.h"
#include "sim/core/runtime.h"

namespace asgd {

class ServerUpdate;
class PowerSgd;

// The keys of sync and sync_backup (their defaults are written once, in sync.cpp).
struct SyncConfig {
  std::string type = "sync";  // or sync_backup (the engine's name, not a key)
  std::string comm;           // ps | allreduce | hierarchical
  int backups{};              // b: aggregate the first workers - b gradients (0: sync)
  bool cancel_late{};         // late "cancel": the iteration's end abandons the steps under way
};

class SyncEngine final : public Engine {
 public:
  SyncEngine(const SyncConfig& config);
  ~SyncEngine() override;
  std::string type() const override { return type_; }
  void start(Runtime& sim) override;
  void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) override;
  void on_worker_down(Runtime& sim, int worker) override;
  void on_worker_up(Runtime& sim, int worker) override { launch_idle(sim); }
  void on_timer(Runtime& sim, const Timer& e) override;
  Snapshot model_of_record() const override;
  std::string checkpoint_refusal() const override { return ""; }
  void checkpoint(Runtime& sim, StateArchive& a) override;
  std::vector<const ParameterStore*> pull_stores() const override { return {store_.get()}; }

 private:
  // What start() sets up before the first steps (store, server, how it communicates).
  void configure(Runtime& sim, const std::vector<float>& init);
  void launch_idle(Runtime& sim);
  void finish_iteration(Runtime& sim);  // the last needed gradient arrived
  void apply_iteration(Runtime& sim);   // the server's update for it
  void finish_if_complete(Runtime& sim);
  // Where worker w, whose replica is behind, gets the current parameters (collectives).
  int catch_up_source(const Runtime& sim, int w) const;
  // How an iteration communicates (docs/architecture.md, "Collectives"): per-step pulls
  // and pushes (ps, servers placement or one box), or a collective at the iteration's end
  // on replicas the workers keep: a ring, the hierarchical all-reduce, or (host placement
  // over several boxes) each box's sum exchanged with the servers.
  enum class Comm { Ps, AllReduce, Hierarchical, HostExchange } comm_ = Comm::Ps;
  std::vector<bool> current_;                 // collectives: the worker's replica holds the current parameters
  std::vector<int> members_;                  // the workers in the iteration's collective
  std::vector<int> caught_up_;                // launched behind: current once launch_idle is done
  static constexpr int kNoSource = -1000000;  // catch_up_source: no message (w is alone)
  std::string type_;
  std::string comm_key_;  // the configured comm (resolved into comm_ at start)
  int backups_;
  bool cancel_late_;  // late "cancel" (K-sync): else late gradients are dropped on arrival
  int needed_ = 0;    // gradients aggregated per iteration
  std::unique_ptr<ParameterStore> store_;
  std::shared_ptr<ServerUpdate> server_;
  std::vector<int32_t> ids_;
  std::vector<std::unique_ptr<GradientJob>> accepted_;  // this iteration's, by worker index
  std::vector<float*> parts_;                           // their gradients, to sum
  std::vector<const std::vector<int32_t>*> part_rows_;  // the rows each touches (ServerUpdate::apply_sum)
  std::vector<bool> busy_;                              // computing, or accepted and waiting for the iteration to end
  std::vector<bool> computing_;                         // a gradient of the current iteration is in flight
  int pending_ = 0;                                     // how many: the iteration can still receive these
  int received_ = 0;
  uint64_t iteration_ = 0;
  SimTime iteration_start_ = 0;
  bool updating_ = false;  // the server is applying the finished iteration
  // compression "powersgd" (engines/powersgd.h): the collective's gradients compressed;
  // its three all-reduces' bytes per member (the whole tensors, P, Q)
  std::unique_ptr<PowerSgd> powersgd_;
  double powersgd_bytes_[3] = {0, 0, 0};
  DeviceArray<float> reduced_;  // the all-reduce's result
  std::vector<const float*> inputs_;
};

}  // namespace asgd
