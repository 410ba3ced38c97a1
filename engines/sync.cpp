// engines/sync.cpp — synchronous SGD: every iteration all N workers compute on the same
// parameters, worker i on slice i of the next N*M sample ids; once all have arrived the
// server sums their gradients in worker-index order and applies
// w <- w - lr * (1/N) sum_i g_i   (no 1/N with aggregate = sum).
// Hence N workers x batch M computes what 1 worker x batch N*M computes.
#include "engines/sync.h"
#include "engines/server_update.h"

namespace asgd {

SyncEngine::SyncEngine(const nlohmann::json& spec) : spec_(spec) {}

void SyncEngine::start(Simulation& sim) {
  store_ = std::make_unique<ParameterStore>(sim.initial_params(), sim.history_needed());
  server_ = std::make_unique<ServerUpdate>(sim.settings().momentum);
  arrived_.resize(sim.workers());
  begin_iteration(sim);
}

void SyncEngine::begin_iteration(Simulation& sim) {
  const size_t m = sim.settings().batch_size;
  const int n = sim.workers();
  iteration_start_ = sim.now();
  ids_.clear();
  sim.take_samples(m * size_t(n), ids_);
  expected_ = 0;
  received_ = 0;
  for (int w = 0; w < n; ++w) {
    if (!sim.worker_alive(w)) continue;
    sim.launch(w, sim.read_for(w, *store_), ids_.data() + size_t(w) * m, m, iteration_);
    ++expected_;
  }
}

void SyncEngine::on_gradient(Simulation& sim, std::unique_ptr<GradientJob> job) {
  int w = job->worker;
  arrived_[w] = std::move(job);
  if (++received_ == expected_) finish_iteration(sim);
}

void SyncEngine::finish_iteration(Simulation& sim) {
  ExecContext& ctx = sim.exec();
  size_t n = store_->size();
  GradientJob* acc = nullptr;
  int count = 0;
  for (auto& job : arrived_) {  // worker-index order: fixed summation order
    if (!job) continue;
    if (!acc) acc = job.get();
    else ops::add_into(ctx, acc->grad.data(), job->grad.data(), n);
    ++count;
  }
  if (acc) {
    float factor = sim.settings().aggregate_sum ? 1.0f : 1.0f / float(count);
    if (factor != 1.0f) ops::scale(ctx, acc->grad.data(), factor, n);
    server_->apply(sim, *store_, acc->grad.data(), float(sim.lr()));
  }
  for (auto& job : arrived_) {
    if (!job) continue;
    sim.applied(*job, store_->version() - 1 - job->read_version);
    sim.recycle(std::move(job));
  }
  sim.iteration_done(sim.now() - iteration_start_);
  ++iteration_;
  sim.updated();
  if (!sim.stopping()) begin_iteration(sim);
}

Snapshot SyncEngine::model_of_record() const { return store_->current(); }

}  // namespace asgd
