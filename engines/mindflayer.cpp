// engines/mindflayer.cpp — MindFlayer SGD (Maranjyan, Omar & Richtárik 2024, arXiv
// 2410.04285, Algorithm 1): parallel SGD for random, heterogeneous compute times. Each
// round the server sends x^k to every worker; worker i makes B = `trials` attempts at a
// stochastic gradient at x^k, each with a time allowance t_i (`budget`, or `budgets[i]`; 0: none):
// an attempt whose compute time exceeds t_i is abandoned when t_i runs out (the worker
// restarts, with a fresh compute-time draw), one that finishes in time sends its gradient.
// When every worker has made its B attempts the server steps on the gradients received,
//   x^{k+1} = x^k - lr * (1/S) sum g     (S: how many arrived; train.aggregate "sum": no 1/S)
// summed in (worker, attempt) order through train.optimizer. A departure: the paper scales
// the sum by 1/sum_i p_i B_i, p_i = P(tau_i <= t_i), the expected count, which needs the
// compute-time distribution; the engine does not know it, and averages what arrived. A
// round in which no attempt finished changes nothing (x^{k+1} = x^k, no update).
// Virtual time (Step::time_budget, sim/core/runtime.h): an attempt lasts min(tau, t_i),
// tau its compute draw (speed and straggler factors included); an abandoned one is counted
// in workers.csv's `cancelled` and its pull and allowance in `wasted_time`, and pushes
// nothing. So a worker's round lasts sum over its B attempts of min(tau, t_i) (plus its
// messages), and with tau drawn from a heavy tail an attempt never costs more than t_i
// (tested in closed form against a trace of compute times).
// Messages: a worker's first attempt of a round pulls x^k; later attempts compute on the
// x^k it holds; each finished attempt pushes its gradient. The update is one server
// update; the round (iteration_time) runs from one update to the next.
// Simulated only: a real worker rank cannot be cut off mid-step (asgdsim cluster refuses it).
#include <algorithm>
#include "engines/engine_registry.h"
#include "engines/server_update.h"
#include "sim/base/errors.h"

namespace asgd {

namespace {

// Rounds in a row without one finished attempt before a run limited by updates, gradients
// or epochs is declared unable to progress (its allowances cut every step).
constexpr int kEmptyRoundsLimit = 1000;

struct MindFlayerConfig {
  double budget{};              // t_i for every worker, virtual seconds
  std::vector<double> budgets;  // t_i per worker (overrides budget when given)
  int trials{};                 // B: attempts per worker and round
};

class MindFlayerEngine final : public Engine {
 public:
  MindFlayerEngine(const MindFlayerConfig& c) : config_(c) {}
  std::string type() const override { return "mindflayer"; }
  Snapshot model_of_record() const override { return store_->current(); }

  void start(Runtime& sim) override {
    const int n = sim.workers();
    store_ = std::make_unique<ParameterStore>(sim.initial_params(), sim.history_needed(), sim.model().row_layout());
    server_ = std::make_unique<ServerUpdate>(sim.settings().optimizer);
    auto allowance = [](double seconds) { return seconds > 0 ? seconds_to_sim(seconds) : kNever; };
    budget_.assign(n, allowance(config_.budget));
    for (int w = 0; w < n && w < int(config_.budgets.size()); ++w) budget_[w] = allowance(config_.budgets[w]);
    attempts_.assign(n, 0);
    in_round_.assign(n, false);
    busy_.assign(n, false);
    round_start_ = sim.now();
    start_round(sim);
  }

  void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) override {
    const int w = job->worker;
    busy_[w] = false;
    if (!in_round_[w] || job->tag != round_) {  // its worker left the round (it went down meanwhile)
      if (!job->timed_out) sim.dropped(*job);
      sim.recycle(std::move(job));
      return;
    }
    if (job->timed_out)
      sim.recycle(std::move(job));
    else
      received_.push_back(std::move(job));
    if (++attempts_[w] < config_.trials)
      launch(sim, w);
    else
      finish_round_if_done(sim);
  }

  std::string checkpoint_refusal() const override { return ""; }
  std::vector<const ParameterStore*> pull_stores() const override { return {store_.get()}; }
  void checkpoint(Runtime& sim, StateArchive& a) override {
    a.tag("mindflayer");
    checkpoint_server(sim, a, sim.history_needed(), store_, server_);
    a.io(budget_);
    asgd::checkpoint(a, round_params_);
    asgd::checkpoint(a, received_, pull_stores());
    a.io(attempts_);
    a.io(in_round_);
    a.io(busy_);
    a.io(round_);
    a.io(round_start_);
    a.io(round_open_);
    a.io(updating_);
    a.io(empty_rounds_);
  }

  void on_worker_down(Runtime& sim, int w) override {
    busy_[w] = false;
    if (!in_round_[w]) return;
    in_round_[w] = false;
    finish_round_if_done(sim);
  }
  void on_worker_up(Runtime& sim, int) override {
    if (!round_open_ && !updating_ && !sim.stopping()) start_round(sim);  // else it joins the next round
  }

 private:
  void start_round(Runtime& sim) {
    round_params_ = store_->current();
    round_open_ = false;
    ++round_;
    for (int w = 0; w < sim.workers(); ++w) {
      in_round_[w] = sim.worker_alive(w);
      attempts_[w] = 0;
      if (!in_round_[w]) continue;
      round_open_ = true;
      launch(sim, w);
    }
  }
  // The worker's next attempt: the first of a round pulls x^k, the others compute on the
  // x^k it received (the store does not change during a round).
  void launch(Runtime& sim, int w) {
    Step step = sim.next_step(w, ids_);
    step.tag = round_;
    if (attempts_[w] == 0)
      step.pull = store_.get();
    else
      step.own = round_params_;
    step.gradient = true;
    step.time_budget = budget_[w];
    sim.launch(step);
    busy_[w] = true;
  }
  void finish_round_if_done(Runtime& sim) {
    if (!round_open_) return;
    for (int w = 0; w < sim.workers(); ++w)
      if (in_round_[w] && (busy_[w] || attempts_[w] < config_.trials)) return;
    round_open_ = false;
    sim.iteration_done(sim.now() - round_start_);
    round_start_ = sim.now();
    empty_rounds_ = received_.empty() ? empty_rounds_ + 1 : 0;
    if (empty_rounds_ >= kEmptyRoundsLimit && sim.settings().stop_time == kNever)
      throw NoProgress(std::to_string(kEmptyRoundsLimit) +
                       " mindflayer rounds in a row without one attempt that "
                       "finished within its time allowance: the run would never reach its stop limit; raise the "
                       "engine's budget (or budgets) above the compute times of cluster.compute");
    updating_ = true;
    sim.server_update([this, &sim] { apply(sim); });
  }
  void apply(Runtime& sim) {
    updating_ = false;
    round_params_ = Snapshot{};  // let the store update in place
    if (!received_.empty()) {
      apply_gradient_jobs(sim, *store_, *server_, received_);
      sim.updated();
    }
    if (!sim.stopping()) start_round(sim);
  }
  MindFlayerConfig config_;
  std::unique_ptr<ParameterStore> store_;
  std::unique_ptr<ServerUpdate> server_;
  std::vector<SimTime> budget_;                         // t_i, by worker
  Snapshot round_params_;                               // x^k of the round in progress
  std::vector<std::unique_ptr<GradientJob>> received_;  // the round's finished attempts, in arrival order
  std::vector<int> attempts_;                           // by worker: attempts ended this round
  std::vector<bool> in_round_, busy_;
  std::vector<int32_t> ids_;
  uint64_t round_ = 0;
  SimTime round_start_ = 0;
  bool round_open_ = false;
  bool updating_ = false;
  int empty_rounds_ = 0;
};

}  // namespace

EngineType mindflayer_engine_type() {
  using C = MindFlayerConfig;
  return engine_type<C>(
      "mindflayer",
      "MindFlayer SGD (Maranjyan et al. 2024): every round each worker makes `trials` attempts at a gradient on "
      "x^k, each abandoned (and restarted) when its compute exceeds the worker's time allowance `budget`; the "
      "server then steps on the mean of the gradients that finished",
      {field(&C::budget, keys::seconds("budget", 0.0,
                                       "t_i: the time allowance of one attempt (virtual seconds, the worker's speed "
                                       "included); an attempt whose compute exceeds it is abandoned at t_i (0: none)")),
       field(&C::budgets,
             keys::list("budgets", ParamType::NumberList, json::array(),
                        "t_i per worker (one per cluster.workers, 0: none; replaces budget when given)", 0)),
       field(&C::trials, keys::integer("trials", 1, "B_i: attempts per worker and round", 1))},
      {[](const C& c) { return std::make_unique<MindFlayerEngine>(c); },
       [](const C& c, int workers) {
         return EngineCost{1.0 + 1.0 / c.trials, double(workers * c.trials), 2};
       },
       [](const C& c, const EngineRunView& run, Validator& v) {
         if (!c.budgets.empty() && run.workers && int64_t(c.budgets.size()) != *run.workers)
           v.error("engine.budgets", "one allowance per worker: " + std::to_string(c.budgets.size()) +
                                         " given, cluster.workers is " + std::to_string(*run.workers));
         if (!run.staleness.empty() && run.staleness != "emergent")
           v.error("staleness.mode",
                   "mindflayer's attempts all compute on the round's x^k (the server's broadcast): "
                   "forced staleness does not apply; use \"emergent\" (got " +
                       json(run.staleness).dump() + ")");
       },
       [](const C&, Validator& v) {
         v.error("engine.budget",
                 "mindflayer cuts an attempt off at its time allowance: a real worker rank "
                 "computing cannot be cut off in this protocol (simulated only)");
       }});
}

}  // namespace asgd
