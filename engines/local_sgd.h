// engines/local_sgd.h — local SGD with periodic model averaging and an outer optimizer
// (see local_sgd.cpp); DiLoCo (engines/diloco.cpp) is this engine with other defaults.
#pragma once
#include <memory>
#include <vector>
#include "engines/engine_registry.h"
#include "sim/core/engine.h"
#include "sim/core/runtime.h"

namespace asgd {

class ServerUpdate;
class Optimizer;

// The keys of local_sgd and diloco (declared in each engine's file, with its defaults).
struct LocalSgdConfig {
  int steps{};        // H
  double outer_lr{};  // the outer step size on the pseudo-gradient
  double outer_momentum{};
  bool outer_nesterov{};
  // Asynchronous local SGD (engines/async_local_sgd.cpp; Liu et al. 2024): no round
  // barrier, each worker's pseudo-gradient is applied when it arrives.
  bool asynchronous{};
  int nesterov_period{1};        // N of Delayed Nesterov (1: Nesterov at every push)
  bool dynamic_local_updates{};  // DyLU: H_i from the worker's measured speed
};
// The keys both engines declare (their defaults differ) and their checks.
std::vector<Field<LocalSgdConfig>> local_sgd_fields(int steps, double outer_lr, double outer_momentum,
                                                    bool outer_nesterov);
struct EngineRunView;
void check_local_sgd(const LocalSgdConfig& c, const EngineRunView& run, Validator& v);
EngineCost local_sgd_cost(const LocalSgdConfig& c, int workers);

// One local step's gradient (job.grad, computed at x) into a worker's displacement D from
// the point it read (x = base - lr_ref D): the inner optimizer's direction at x (null:
// plain SGD, the gradient itself), times lr / lr_ref (lr the rate in force now), copied into
// D on the job's first step, else added. local_sgd, diloco and the federated clients step so.
void accumulate_local_step(Runtime& sim, Optimizer* inner, GradientJob& job, const float* x, float lr_ref, bool first,
                           float* disp);

class LocalSgdEngine final : public Engine {
 public:
  LocalSgdEngine(std::string type, const LocalSgdConfig& config);
  ~LocalSgdEngine() override;
  std::string type() const override { return type_; }
  void start(Runtime& sim) override;
  void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) override;
  void on_worker_down(Runtime& sim, int worker) override;
  void on_worker_up(Runtime& sim, int worker) override;
  Snapshot model_of_record() const override;
  // The round's first step hands on what its pull delivered (base_i).
  bool keeps_read_params() const override { return true; }
  std::string checkpoint_refusal() const override { return ""; }
  void checkpoint(Runtime& sim, StateArchive& a) override;
  std::vector<const ParameterStore*> pull_stores() const override { return {store_.get()}; }

 private:
  void configure(Runtime& sim, const std::vector<float>& init);
  void start_round(Runtime& sim);
  void launch_local_step(Runtime& sim, int worker);
  void finish_round_if_done(Runtime& sim);
  void average(Runtime& sim);  // the server's update: w <- the workers' average
  // Asynchronous mode: one worker's window of local steps, and the server's update for it.
  void start_window(Runtime& sim, int worker);
  void apply_window(Runtime& sim, int worker);
  void delayed_nesterov(Runtime& sim, float* delta);  // Liu et al. 2024, Algorithm 3
  int steps_of(int worker) const { return config_.asynchronous ? window_steps_[worker] : steps_; }
  float lr_ref_of(int worker) const { return config_.asynchronous ? window_lr_ref_[worker] : lr_ref_; }
  std::string type_;
  LocalSgdConfig config_;
  int steps_;                              // H
  std::unique_ptr<ParameterStore> store_;  // w, the model of record
  std::shared_ptr<ServerUpdate> server_;
  float lr_ref_ = 1.0f;                                 // the displacements' unit (see .cpp)
  std::vector<Snapshot> base_;                          // what each worker read at the round's start
  std::vector<std::unique_ptr<ParameterStore>> local_;  // x_i = base_i - lr_ref * D_i
  std::vector<DeviceArray<float>> disp_;                // D_i (num_params), by worker
  std::vector<std::unique_ptr<Optimizer>> inner_;       // each worker's own (stateful only)
  std::vector<bool> reset_inner_;                       // its state starts again (it was down)
  std::vector<int> done_;                               // local steps done this round
  std::vector<bool> in_round_, busy_;
  bool round_open_ = false;
  bool averaging_ = false;  // the server is averaging the last round
  SimTime round_start_ = 0;
  std::vector<float*> parts_;
  std::vector<int32_t> ids_;
  // asynchronous mode
  std::vector<int> window_steps_;               // H_i of the worker's window in progress
  std::vector<float> window_lr_ref_;            // lr_ref of its window (the rate at its start)
  std::vector<SimTime> window_start_;           // when its window's first step was launched
  std::vector<double> speed_;                   // its local steps per second, measured (0: not yet)
  DeviceArray<float> dn_buffer_, dn_momentum_;  // Delayed Nesterov: pseudo-gradients since the last milestone; m
  uint64_t pushes_ = 0;                         // pseudo-gradients applied so far
};

}  // namespace asgd
