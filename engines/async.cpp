// engines/async.cpp — asynchronous SGD with a parameter server (Downpour; Dean et al.
// 2012). Each worker reads the current parameters, computes a gradient, and the server
// applies it on arrival: w <- w - lr * g(w_read); the worker then reads again.
// Staleness tau of a gradient = updates applied between its read and its application.
// Two remedies for stale gradients, off by default:
//   lr_staleness = "divide"   staleness-aware rate (Zhang, Gupta, Lian & Liu 2016, arXiv
//                             1511.05950): lr / max(tau, 1). tau = 0 (nothing applied since
//                             the read: the first gradients, or a single worker) keeps the
//                             full rate, as tau = 1 does.
//   delay_compensation = lambda > 0   DC-ASGD (Zheng et al. 2017):
//                             w <- w - lr * (g + lambda * g (.) g (.) (w - w_read)), where
//                             w_read is the copy this worker read (its backup), kept with
//                             the job (keeps_read_params). Plain SGD only (no momentum).
//   staleness_weight = w      the rate times w(tau) (engines/staleness_weight.h: FedBuff's
//                             1/sqrt(1+tau), FedAsync's polynomial and hinge).
// They combine: lr * w(tau) / max(tau, 1), and the compensated step uses that rate. With
// train.optimizer adam/adamw, "divide" and the weight scale the step size lr (the moments
// take the gradient in full).
// Messages: each step pulls the parameters (read when the server serves the pull), computes
// and pushes its gradient; the server applies gradients one at a time in arrival order
// (Runtime::server_update), and a worker pulls again once its gradient is applied.
#include "engines/async.h"
#include <algorithm>
#include "engines/engine_registry.h"
#include "engines/server_update.h"

namespace asgd {

EngineType async_engine_type() {
  using C = AsyncConfig;
  std::vector<Field<C>> fields = {
      field<C>(
          keys::str("lr_staleness", "none",
                    "\"divide\": a gradient of staleness tau is applied with lr / max(tau, 1) (Zhang et al. 2016)",
                    {"none", "divide"}),
          [](C& c, const json& v) { c.divide_by_staleness = v == "divide"; },
          [](const C& c) { return json(c.divide_by_staleness ? "divide" : "none"); }),
      field(&C::delay_compensation,
            keys::num("delay_compensation", 0.0,
                      "lambda of DC-ASGD: g + lambda g*g*(w - w_read) (0 = off; MXNet's default is 0.04; "
                      "needs train.momentum 0)",
                      0))};
  for (auto& f : staleness_weight_fields(&C::weight)) fields.push_back(std::move(f));
  EngineType t = engine_type<C>(
      "async",
      "asynchronous SGD, parameter server (Dean et al. 2012): apply each gradient on arrival; optionally "
      "staleness-aware (Zhang et al. 2016) and delay-compensated (DC-ASGD, Zheng et al. 2017)",
      std::move(fields),
      {[](const C& c) { return std::make_unique<AsyncEngine>(c); },
       {},
       [](const C& c, const EngineRunView& run, Validator& v) {
         if (c.delay_compensation > 0 && run.momentum && *run.momentum > 0)
           v.error("engine.delay_compensation",
                   "DC-ASGD is implemented for plain SGD: set train.momentum to 0 or "
                   "delay_compensation to 0 (train.momentum is " +
                       json(*run.momentum).dump() + ")");
         if (c.delay_compensation > 0 && !run.optimizer.empty() && run.optimizer != "sgd")
           v.error("engine.delay_compensation", "DC-ASGD is defined for plain SGD, not for train.optimizer " +
                                                    json(run.optimizer).dump() + ": set delay_compensation to 0");
       }});
  t.population = true;
  return t;
}

AsyncEngine::AsyncEngine(const AsyncConfig& config)
    : type_(config.type),
      divide_by_staleness_(config.divide_by_staleness),
      lambda_(float(config.delay_compensation)),
      weight_(config.weight),
      threshold_(uint64_t(std::max<int64_t>(config.delay_threshold, 0))),
      stop_stale_(config.stop_stale) {}

void AsyncEngine::start(Runtime& sim) {
  store_ = std::make_unique<ParameterStore>(sim.initial_params(), sim.history_needed(), sim.model().row_layout());
  server_ = std::make_unique<ServerUpdate>(sim.settings().optimizer);
  at_server_.assign(sim.workers(), false);
  busy_.assign(sim.workers(), false);
  launched_at_.assign(sim.workers(), 0);
  queued_ = 0;
  for (int w = 0; w < sim.workers(); ++w)  // (after a warm-up some may be down)
    if (sim.worker_alive(w)) launch_next(sim, w);
}

void AsyncEngine::launch_next(Runtime& sim, int worker) {
  Step step = sim.next_step(worker, ids_);
  step.pull = store_.get();
  step.gradient = true;  // the push is this gradient (sparse rows, compression)
  busy_[worker] = true;
  launched_at_[worker] = store_->version();
  sim.launch(step);
}

void AsyncEngine::on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) {
  const int worker = job->worker;
  busy_[worker] = false;
  // Ringmaster: the delay it would be applied with (the updates queued at the server
  // ahead of it included) reaches R: ignored on arrival, and the worker reads again.
  if (threshold_ > 0 && store_->version() + queued_ - job->read_version >= threshold_) {
    sim.dropped(*job);
    sim.recycle(std::move(job));
    if (!sim.stopping() && sim.worker_alive(worker)) launch_next(sim, worker);
    return;
  }
  at_server_[worker] = true;
  ++queued_;
  sim.server_update([this, &sim, job = std::move(job)]() mutable { apply(sim, std::move(job)); });
}

void AsyncEngine::apply(Runtime& sim, std::unique_ptr<GradientJob> job) {
  --queued_;
  uint64_t staleness = store_->version() - job->read_version;
  sim.applied(*job, staleness);  // (its samples count toward the epoch, and so the rate)
  float lr = float(sim.lr());
  if (divide_by_staleness_) lr /= float(std::max<uint64_t>(staleness, 1));
  if (weight_.active()) lr = float(double(lr) * weight_(staleness));
  if (lambda_ > 0.0f)
    server_->apply_delay_compensated(sim, *store_, job->grad.data(), job->read.data(), lr, lambda_, job->touched());
  else
    server_->apply(sim, *store_, job->grad.data(), lr, job->touched());
  int worker = job->worker;
  sim.recycle(std::move(job));
  at_server_[worker] = false;
  sim.updated();
  if (!sim.stopping() && sim.worker_alive(worker)) launch_next(sim, worker);
  if (stop_stale_) stop_stale_steps(sim);
}

// Ringmaster ASGD with calculation stops (Maranjyan et al. 2025, Algorithm 5): once the
// model has moved R updates past the version a worker's step was launched on, that step's
// gradient could only be ignored, so it is stopped (Runtime::cancel: its time so far is
// wasted_time) and the worker starts again on the current version. The delay is counted
// from the version current at the launch, the one its pull reads unless the pull queues
// on a link (then it reads a newer one, and is stopped a little early).
void AsyncEngine::stop_stale_steps(Runtime& sim) {
  if (sim.stopping()) return;
  for (int w = 0; w < sim.workers(); ++w)
    if (busy_[w] && sim.worker_alive(w) && store_->version() - launched_at_[w] >= threshold_) {
      sim.cancel(w);
      busy_[w] = false;
      launch_next(sim, w);
    }
}

void AsyncEngine::on_worker_down(Runtime&, int worker) { busy_[worker] = false; }  // its step is lost

void AsyncEngine::on_worker_up(Runtime& sim, int worker) {
  if (!at_server_[worker]) launch_next(sim, worker);  // else it pulls once its gradient is applied
}

Snapshot AsyncEngine::model_of_record() const { return store_->current(); }

void AsyncEngine::checkpoint(Runtime& sim, StateArchive& a) {
  a.tag("async");
  checkpoint_server(sim, a, sim.history_needed(), store_, server_);
  a.io(at_server_);
  a.io(queued_);
  a.io(busy_);
  a.io(launched_at_);
}

}  // namespace asgd
