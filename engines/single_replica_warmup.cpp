// engines/single_replica_warmup.cpp — a warm-up phase shared by every engine: for the
// first E = train.single_replica_epochs epochs a single replica (worker 0) trains alone,
// as async SGD with one worker does (plain sequential SGD on the server's parameters,
// minibatches of the per-worker batch from the run's sample stream, train.momentum on the
// server); the other workers are idle. At the first update at which the epoch reached is
// >= E, the replica's parameters become the engine's starting point
// (Runtime::set_initial_params) and the engine starts, at that virtual time, with every
// worker. The run's counters go on: epochs, samples and updates include the warm-up, so
// the learning-rate schedule simply continues by epoch and stop limits count the whole
// run. The warm-up's momentum velocity is not handed on (the engine starts its own).
// This is the remedy for early staleness that the seed material recommends: the first
// epochs, where gradients change fastest, are trained without stale gradients: forced
// staleness (staleness.mode) does not apply to the replica either. The replica trains on
// its own parameters: it sends no message and asks nothing of the server (no network or
// server time), only its compute takes time.
// Failures during the warm-up: the replica runs on the lowest-index live worker; if that
// worker goes down, its gradient in flight is lost and the next live worker carries on
// from the replica's parameters (or the first to come back, if none is live).
#include "engines/single_replica_warmup.h"
#include "engines/server_update.h"

namespace asgd {

SingleReplicaWarmup::SingleReplicaWarmup(std::unique_ptr<Engine> engine, nlohmann::json config)
    : engine_(std::move(engine)), config_(std::move(config)) {}

void SingleReplicaWarmup::start(Runtime& sim) {
  epochs_ = sim.settings().single_replica_epochs;
  if (epochs_ <= 0) {
    engine_started_ = true;
    engine_->start(sim);
    return;
  }
  store_ = std::make_unique<ParameterStore>(sim.initial_params(), 0, sim.model().row_layout());
  server_ = std::make_shared<ServerUpdate>(sim.settings().optimizer);
  launch(sim);
}

void SingleReplicaWarmup::launch(Runtime& sim) {
  if (busy_) return;
  replica_ = -1;  // the lowest-index live worker: worker 0 unless it has failed
  for (int w = 0; w < sim.workers() && replica_ < 0; ++w)
    if (sim.worker_alive(w)) replica_ = w;
  if (replica_ < 0) return;  // every worker is down: wait for one to come back
  Step step = sim.next_step(replica_, ids_);
  step.own = store_->current();
  step.push = false;
  sim.launch(step);
  busy_ = true;
}

void SingleReplicaWarmup::on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) {
  if (engine_started_) {
    engine_->on_gradient(sim, std::move(job));
    return;
  }
  busy_ = false;
  sim.applied(*job, store_->version() - job->read_version);  // (before the rate: its samples count)
  server_->apply(sim, *store_, job->grad.data(), float(sim.lr()), job->touched());
  sim.recycle(std::move(job));
  sim.updated();
  if (sim.stopping()) return;
  if (sim.epoch() >= epochs_ - 1e-12)
    hand_over(sim);
  else
    launch(sim);
}

void SingleReplicaWarmup::hand_over(Runtime& sim) {
  sim.set_initial_params(store_->current().params->to_host());
  engine_started_ = true;
  engine_->start(sim);
  store_.reset();
  server_.reset();
}

void SingleReplicaWarmup::on_timer(Runtime& sim, const Timer& e) {
  if (engine_started_) engine_->on_timer(sim, e);
}

void SingleReplicaWarmup::on_worker_down(Runtime& sim, int worker) {
  if (engine_started_) {
    engine_->on_worker_down(sim, worker);
  } else if (busy_ && worker == replica_) {
    busy_ = false;  // the replica's gradient in flight is lost: another live worker takes over
    launch(sim);
  }
}

void SingleReplicaWarmup::on_worker_up(Runtime& sim, int worker) {
  if (engine_started_)
    engine_->on_worker_up(sim, worker);
  else
    launch(sim);  // only if the replica is not running
}

Snapshot SingleReplicaWarmup::model_of_record() const {
  return engine_started_ ? engine_->model_of_record() : store_->current();
}

void SingleReplicaWarmup::checkpoint(Runtime& sim, StateArchive& a) {
  a.tag("single_replica_warmup");
  a.io(epochs_);
  a.io(engine_started_);
  a.io(busy_);
  a.io(replica_);
  bool warming = bool(store_);
  a.io(warming);
  if (warming) checkpoint_server(sim, a, 0, store_, server_);
  if (engine_started_) engine_->checkpoint(sim, a);
}

nlohmann::json SingleReplicaWarmup::describe() const {
  nlohmann::json d = config_;
  d.update(engine_->describe());
  if (epochs_ > 0) d["single_replica_epochs"] = epochs_;
  return d;
}

}  // namespace asgd
