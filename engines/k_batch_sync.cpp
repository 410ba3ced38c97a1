// engines/k_batch_sync.cpp — K-batch-sync SGD (Dutta, Joshi, Ghosh, Dube & Nagpurkar 2018,
// AISTATS, arXiv 1803.01113): every worker computes on the current parameters w; the
// first K gradients to arrive, from any workers, make the iteration:
//   w <- w - lr * (1/K) sum g      (no 1/K with train.aggregate = sum)
// A worker whose gradient is accepted and whose iteration still needs more pulls w again
// (the same version: nothing has been applied since) and computes another on the next M
// ids, so a fast worker may contribute several gradients to one iteration.
// When the K-th arrives, `late` says what the steps still under way become:
//   cancel  (the default, as Dutta et al. define it) abandoned at once (Runtime::cancel:
//           their time so far is wasted_time, an unsent push is never sent); every worker
//           starts the next iteration on the new w. Under exponential compute of rate mu
//           per worker an iteration then lasts K / (P mu) on average (memoryless).
//   drop    they run on, and their gradients are dropped when they arrive (as sync_backup's
//           late ones); the worker then pulls and joins the iteration in progress.
// Summation order: the K gradients sorted by (worker, step), so the sum does not depend on
// arrival ties or thread counts. The iteration runs from one end to the next (summary
// iteration_time); the update is one server update, and the idle workers pull after it.
// Only the parameter server (no collectives). Failures: a failed worker's step is lost;
// the others go on (an iteration needs K arrivals from whoever is alive).
#include <algorithm>
#include "engines/engine_registry.h"
#include "engines/server_update.h"

namespace asgd {

namespace {

struct KBatchSyncConfig {
  int k{};
  bool cancel_late{};
};

class KBatchSyncEngine final : public Engine {
 public:
  KBatchSyncEngine(const KBatchSyncConfig& c) : k_(c.k), cancel_late_(c.cancel_late) {}
  std::string type() const override { return "k_batch_sync"; }
  Snapshot model_of_record() const override { return store_->current(); }

  void start(Runtime& sim) override {
    store_ = std::make_unique<ParameterStore>(sim.initial_params(), sim.history_needed(), sim.model().row_layout());
    server_ = std::make_unique<ServerUpdate>(sim.settings().optimizer);
    busy_.assign(sim.workers(), false);
    iteration_start_ = sim.now();
    launch_idle(sim);
  }

  void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) override {
    const int w = job->worker;
    busy_[w] = false;
    if (job->tag != iteration_ || updating_) {  // late: its iteration is over
      sim.dropped(*job);
      sim.recycle(std::move(job));
      launch_idle(sim);  // (after the update, if one is under way)
      return;
    }
    accepted_.push_back(std::move(job));
    if (int(accepted_.size()) < k_) {
      launch(sim, w);  // on the same w: nothing is applied before the iteration ends
      return;
    }
    sim.iteration_done(sim.now() - iteration_start_);
    iteration_start_ = sim.now();
    if (cancel_late_)
      for (int v = 0; v < sim.workers(); ++v)
        if (busy_[v] && sim.worker_alive(v)) {
          sim.cancel(v);
          busy_[v] = false;
        }
    ++iteration_;
    updating_ = true;
    sim.server_update([this, &sim] { apply(sim); });
  }

  void on_worker_down(Runtime&, int w) override { busy_[w] = false; }  // its step is lost
  void on_worker_up(Runtime& sim, int) override { launch_idle(sim); }

  std::string checkpoint_refusal() const override { return ""; }
  std::vector<const ParameterStore*> pull_stores() const override { return {store_.get()}; }
  void checkpoint(Runtime& sim, StateArchive& a) override {
    a.tag("k_batch_sync");
    checkpoint_server(sim, a, sim.history_needed(), store_, server_);
    asgd::checkpoint(a, accepted_, pull_stores());
    a.io(busy_);
    a.io(iteration_);
    a.io(iteration_start_);
    a.io(updating_);
  }

 private:
  void launch(Runtime& sim, int w) {
    Step step = sim.next_step(w, ids_);
    step.tag = iteration_;
    step.pull = store_.get();
    step.gradient = true;
    sim.launch(step);
    busy_[w] = true;
  }
  void launch_idle(Runtime& sim) {
    if (updating_ || sim.stopping()) return;
    for (int w = 0; w < sim.workers(); ++w)
      if (!busy_[w] && sim.worker_alive(w)) launch(sim, w);
  }
  void apply(Runtime& sim) {
    apply_gradient_jobs(sim, *store_, *server_, accepted_);
    sim.updated();
    updating_ = false;
    launch_idle(sim);
  }
  int k_;
  bool cancel_late_;
  std::unique_ptr<ParameterStore> store_;
  std::unique_ptr<ServerUpdate> server_;
  std::vector<std::unique_ptr<GradientJob>> accepted_;  // this iteration's, in arrival order
  std::vector<bool> busy_;                              // a step of the worker's current life is in flight
  std::vector<int32_t> ids_;
  uint64_t iteration_ = 0;
  SimTime iteration_start_ = 0;
  bool updating_ = false;  // the server is applying the finished iteration
};

}  // namespace

EngineType k_batch_sync_engine_type() {
  using C = KBatchSyncConfig;
  return engine_type<C>(
      "k_batch_sync",
      "K-batch-sync SGD (Dutta et al. 2018): the first k gradients from any workers, all on the same "
      "parameters, make an iteration; the steps under way are cancelled (or their gradients dropped)",
      {field(&C::k,
             keys::integer("k", 1, "K: gradients per iteration, from any workers (a fast one may give several)", 1)),
       field<C>(
           keys::str("late", "cancel",
                     "the steps under way when the k-th gradient arrives: \"cancel\" them (Dutta et al.), all "
                     "workers start the next iteration; \"drop\" their gradients when they arrive",
                     {"drop", "cancel"}),
           [](C& c, const json& v) { c.cancel_late = v == "cancel"; },
           [](const C& c) { return json(c.cancel_late ? "cancel" : "drop"); })},
      {[](const C& c) { return std::make_unique<KBatchSyncEngine>(c); },
       [](const C& c, int) {
         return EngineCost{2, double(c.k), 2};
       },
       {},
       [](const C& c, Validator& v) {
         if (c.cancel_late) refuse_cancel_in_real_run(v);
       }});
}

}  // namespace asgd
