// engines/async.cpp — asynchronous SGD with a parameter server (Downpour; Dean et al.
// 2012). Each worker reads the current parameters, computes a gradient, and the server
// applies it on arrival: w <- w - lr * g(w_read); the worker then reads again.
// Staleness of a gradient = updates applied between its read and its application.
#include "engines/async.h"
#include "engines/server_update.h"

namespace asgd {

AsyncEngine::AsyncEngine(const nlohmann::json& spec) : spec_(spec) {}

void AsyncEngine::start(Simulation& sim) {
  store_ = std::make_unique<ParameterStore>(sim.initial_params(), sim.history_needed());
  server_ = std::make_unique<ServerUpdate>(sim.settings().momentum);
  for (int w = 0; w < sim.workers(); ++w) launch_next(sim, w);
}

void AsyncEngine::launch_next(Simulation& sim, int worker) {
  ids_.clear();
  sim.take_samples(sim.settings().batch_size, ids_);
  sim.launch(worker, sim.read_for(worker, *store_), ids_.data(), ids_.size());
}

void AsyncEngine::on_gradient(Simulation& sim, std::unique_ptr<GradientJob> job) {
  uint64_t staleness = store_->version() - job->read_version;
  server_->apply(sim, *store_, job->grad.data(), float(sim.lr()));
  sim.applied(*job, staleness);
  int worker = job->worker;
  sim.recycle(std::move(job));
  sim.updated();
  if (!sim.stopping()) launch_next(sim, worker);
}

Snapshot AsyncEngine::model_of_record() const { return store_->current(); }

}  // namespace asgd
