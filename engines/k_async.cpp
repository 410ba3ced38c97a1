// engines/k_async.cpp — K-async and K-batch-async SGD (Dutta, Joshi, Ghosh, Dube &
// Nagpurkar 2018, AISTATS, arXiv 1803.01113): the server applies one update once K
// gradients have arrived, each computed on whatever version its worker read (stale ones
// allowed, nothing cancelled):
//   w <- w - lr * (1/K) sum_i w(tau_i) g_i     (no 1/K with train.aggregate = sum)
// where w(tau) is the staleness weight (staleness_weight, engines/staleness_weight.h; none:
// every gradient as it is). With weights and batch true this is FedBuff (Nguyen et al.
// 2022), whose server applies the buffer's weighted sum with a server rate (here lr, and
// train.aggregate sum drops the 1/K).
//   batch false  K-async: the gradients of the first K distinct workers; a worker whose
//                gradient is in the buffer waits for the update and pulls it; the others
//                keep computing. Under exponential compute of rate mu per worker an update
//                takes (H_P - H_{P-K}) / mu on average (Dutta et al.'s K-async lemma).
//   batch true   K-batch-async: any K gradients; a worker pulls the current parameters and
//                goes on right after each push (so one worker may give several gradients of
//                an update). An update every K / (P mu) on average under exponential compute.
// K = 1 is async bit for bit (batch false always; batch true while updates take no server
// time, since async's worker waits for its update): the same calls in the same order, and
// the single gradient applied with lr * w(tau) as async's is.
// Summation order: the update's gradients sorted by (worker, step). Messages: as async, a
// pull before each step and a push after; each update is one server update. Failures: a
// failed worker's step in flight is lost; an arrived gradient stays in the buffer; with
// batch false, once every live worker's gradient is in the buffer it is applied as it is
// (fewer than K), so the run cannot stall with fewer than K live workers.
#include <algorithm>
#include "engines/engine_registry.h"
#include "engines/server_update.h"
#include "engines/staleness_weight.h"

namespace asgd {

namespace {

struct KAsyncConfig {
  int k{};
  bool batch{};
  StalenessWeight weight;
};

class KAsyncEngine final : public Engine {
 public:
  KAsyncEngine(const KAsyncConfig& c) : k_(c.k), batch_(c.batch), weight_(c.weight) {}
  std::string type() const override { return "k_async"; }
  Snapshot model_of_record() const override { return store_->current(); }

  void start(Runtime& sim) override {
    store_ = std::make_unique<ParameterStore>(sim.initial_params(), sim.history_needed(), sim.model().row_layout());
    server_ = std::make_unique<ServerUpdate>(sim.settings().optimizer);
    busy_.assign(sim.workers(), false);
    waiting_.assign(sim.workers(), false);
    in_buffer_.assign(sim.workers(), false);
    for (int w = 0; w < sim.workers(); ++w)
      if (sim.worker_alive(w)) launch(sim, w);
  }

  void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) override {
    const int w = job->worker;
    busy_[w] = false;
    waiting_[w] = !batch_;  // K-async: waits for the update its gradient is in
    in_buffer_[w] = !batch_;
    buffer_.push_back(std::move(job));
    if (int(buffer_.size()) >= k_ || (!batch_ && all_live_buffered(sim))) flush(sim);
    if (batch_ && !sim.stopping() && sim.worker_alive(w)) launch(sim, w);  // goes on at once
  }

  void on_worker_down(Runtime& sim, int w) override {
    busy_[w] = false;  // its step in flight is lost
    if (!batch_ && !buffer_.empty() && all_live_buffered(sim)) flush(sim);
  }
  void on_worker_up(Runtime& sim, int w) override {
    if (!busy_[w] && !waiting_[w]) launch(sim, w);  // else it pulls once its update is applied
  }

  std::string checkpoint_refusal() const override { return ""; }
  std::vector<const ParameterStore*> pull_stores() const override { return {store_.get()}; }
  void checkpoint(Runtime& sim, StateArchive& a) override {
    a.tag("k_async");
    checkpoint_server(sim, a, sim.history_needed(), store_, server_);
    asgd::checkpoint(a, buffer_, pull_stores());
    a.io(busy_);
    a.io(waiting_);
    a.io(in_buffer_);
  }

 private:
  // batch false: no live worker can add to the buffer before it is applied.
  bool all_live_buffered(const Runtime& sim) const {
    for (int w = 0; w < sim.workers(); ++w)
      if (sim.worker_alive(w) && !in_buffer_[w]) return false;
    return true;
  }
  void launch(Runtime& sim, int w) {
    Step step = sim.next_step(w, ids_);
    step.pull = store_.get();
    step.gradient = true;
    sim.launch(step);
    busy_[w] = true;
  }
  // Hands the buffer to the server as one update.
  void flush(Runtime& sim) {
    std::vector<std::unique_ptr<GradientJob>> jobs = std::move(buffer_);
    buffer_.clear();
    std::fill(in_buffer_.begin(), in_buffer_.end(), false);
    sim.server_update([this, &sim, jobs = std::move(jobs)]() mutable { apply(sim, std::move(jobs)); });
  }
  void apply(Runtime& sim, std::vector<std::unique_ptr<GradientJob>> jobs) {
    std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) {
      return a->worker != b->worker ? a->worker < b->worker : a->step < b->step;
    });
    taus_.clear();
    for (auto& job : jobs) {
      taus_.push_back(store_->version() - job->read_version);
      sim.applied(*job, taus_.back());  // (before the rate: its samples count)
    }
    float lr = float(sim.lr());
    if (jobs.size() == 1) {  // async's step exactly
      if (weight_.active()) lr = float(double(lr) * weight_(taus_[0]));
      server_->apply(sim, *store_, jobs[0]->grad.data(), lr, jobs[0]->touched());
    } else {
      parts_.clear();
      part_rows_.clear();
      for (size_t i = 0; i < jobs.size(); ++i) {
        GradientJob& job = *jobs[i];
        if (weight_.active()) ops::scale(sim.exec(), job.grad.data(), float(weight_(taus_[i])), job.grad.size());
        parts_.push_back(job.grad.data());
        part_rows_.push_back(job.touched());
      }
      server_->apply_sum(sim, *store_, parts_, aggregate_weight(sim, int(jobs.size())), lr, part_rows_);
    }
    released_.clear();
    for (auto& job : jobs) {
      if (!batch_) released_.push_back(job->worker);
      sim.recycle(std::move(job));
    }
    sim.updated();
    for (int w : released_) {  // K-async: the update's workers pull it and go on
      waiting_[w] = false;
      if (!sim.stopping() && sim.worker_alive(w)) launch(sim, w);
    }
  }
  int k_;
  bool batch_;
  StalenessWeight weight_;
  std::unique_ptr<ParameterStore> store_;
  std::unique_ptr<ServerUpdate> server_;
  std::vector<std::unique_ptr<GradientJob>> buffer_;  // arrived, not yet handed to the server
  std::vector<bool> busy_;                            // a step of the worker's current life is in flight
  std::vector<bool> waiting_;                         // batch false: its gradient is in an update not yet applied
  std::vector<bool> in_buffer_;                       // batch false: its gradient is in buffer_
  std::vector<uint64_t> taus_;
  std::vector<int> released_;
  std::vector<float*> parts_;
  std::vector<const std::vector<int32_t>*> part_rows_;
  std::vector<int32_t> ids_;
};

}  // namespace

EngineType k_async_engine_type() {
  using C = KAsyncConfig;
  std::vector<Field<C>> fields = {
      field(&C::k, keys::integer("k", 1, "K: gradients per update (1 = async)", 1)),
      field(&C::batch, keys::boolean("batch", false,
                                     "false: the first k distinct workers, which wait for the update (K-async); true: "
                                     "any k gradients, each worker goes on after its push (K-batch-async; FedBuff "
                                     "with staleness_weight)"))};
  for (auto& f : staleness_weight_fields(&C::weight)) fields.push_back(std::move(f));
  EngineType t = engine_type<C>(
      "k_async",
      "K-async SGD (Dutta et al. 2018): one update after k gradients have arrived, stale ones allowed; "
      "batch: any k (K-batch-async, FedBuff with staleness weights)",
      std::move(fields),
      {[](const C& c) { return std::make_unique<KAsyncEngine>(c); },
       [](const C& c, int) {
         return EngineCost{2, double(c.k), 2};
       },
       [](const C& c, const EngineRunView& run, Validator& v) {
         if (!c.batch && run.workers && c.k > *run.workers)
           v.error("engine.k", "must be <= cluster.workers (" + std::to_string(*run.workers) +
                                   ") with batch false: an update takes k distinct workers' gradients; got " +
                                   std::to_string(c.k) + " (or set batch true)");
       }});
  t.population = true;
  return t;
}

}  // namespace asgd
