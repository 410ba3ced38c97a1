// engines/easgd.cpp — elastic-averaged SGD (Zhang, Choromanska & LeCun 2015, "Deep
// learning with Elastic Averaging SGD"). Worker i keeps its own parameters x_i and takes
// local steps x_i <- x_i - lr * g(x_i) (lr in force when the gradient arrives). The center
// c is the model of record. After every `period` local steps the worker's x_i goes to the
// server, which makes the exchange as one update (the elastic difference uses x_i and c as
// they are then):
//   mode "async": worker i alone exchanges with the center, then carries on:
//       e = alpha * (x_i - c);  x_i <- x_i - e;  c <- c + e.
//   mode "sync":  worker i waits until every live worker has done its `period` steps; then,
//       all from the values before the exchange (the paper's simultaneous update),
//       x_i <- x_i - alpha (x_i - c) for every i,  c <- c + beta (mean_i x_i - c),
//       beta = N alpha (N = workers in this exchange: fewer than cluster.workers while some
//       are down; the mean is summed in worker-index order). The workers then go on together.
// Which x_i the local step after an exchange computes its gradient at (engine key "order"):
//   "paper" (default): at x_i as the exchange read it, before its elastic move, so that the
//       two together are the paper's combined step x - lr g(x) - alpha (x - c), both at the
//       same x (eq. 5-6; Algorithm 1 reads one snapshot x for the exchange and the step;
//       EAMSGD's Algorithm 2 likewise takes the look-ahead x + delta v from that snapshot).
//       The paper's exchange at t = 0 is not made: every worker starts at the center, so it
//       moves nothing.
//   "local_first": at x_i after its elastic move (the step, then the exchange from the
//       stepped x), the order this engine used before; stable for larger lr.
// The orders differ only in that one gradient's point: when the exchange happens, what it
// sends and what the server computes are the same.
// With alpha = 0 nothing is exchanged: each worker runs independent SGD and c stays put.
// EAMSGD (delta > 0): the local step uses Nesterov momentum, v <- delta v - lr g(x + delta v);
// x <- x + v, kept here as V = -v / lr: V <- delta V + g(x - lr delta V); x <- x - lr V.
// alpha = "auto" is 0.9 / N (beta = N alpha = 0.9, the paper's common choice).
// Failures: a worker that goes down loses its gradient in flight; in mode sync it leaves
// the barrier until it comes back, and then restarts its period. (Order "paper": a step
// that is lost after an exchange is taken again at x_i as it is, after the elastic move.)
// Messages: local steps send nothing. The step that ends a period pushes the worker's
// parameters (the exchange); the server computes the exchange as one update
// (Runtime::server_update: in mode sync once every live worker's parameters are in) and
// replies, and the worker's next step first receives that reply (one message; a worker's
// very first step likewise receives the center it starts from).
// Staleness (unit: exchanges) of a local gradient = exchanges the center has taken since
// the worker last exchanged with it: how old the worker's view of the model of record is
// (always 0 in mode sync, where everyone exchanges together).
// Where the work runs: a local step that no exchange follows (plain EASGD) is deferred to
// the worker's next gradient job (DeferredStep), which applies it on its pool thread just
// before computing at the result: the same arithmetic, in the same order for x_i, without
// the scheduler thread making a pass over x_i and g per gradient.
#include "engines/easgd.h"
#include <algorithm>
#include "engines/engine_registry.h"
#include "kernels/ops.h"

namespace asgd {

EngineType easgd_engine_type() {
  using C = EasgdConfig;
  Field<C> alpha = number_or_word<C>(keys::any("alpha", "auto",
                                               "elastic coefficient in [0, 1], or \"auto\" = 0.9 / workers (sync: "
                                               "beta = workers * alpha <= 1)"),
                                     {keys::num("", nullptr, "", 0, false, 1),
                                      {"auto"},
                                      [](C& c, double a) { c.alpha = a; },
                                      [](C& c, const std::string&) { c.alpha = -1; },
                                      [](const C& c) { return c.alpha < 0 ? json("auto") : json(c.alpha); },
                                      "",
                                      " (= 0.9 / workers)"});
  return engine_type<C>(
      "easgd",
      "elastic-averaged SGD (Zhang, Choromanska & LeCun 2015), asynchronous or synchronous; delta > 0 gives "
      "EAMSGD",
      {field<C>(
           keys::str("mode", "async",
                     "\"async\": each worker exchanges with the center on its own; \"sync\": all workers at "
                     "once, center += N alpha (mean - center)",
                     {"async", "sync"}),
           [](C& c, const json& v) { c.sync = v == "sync"; },
           [](const C& c) { return json(c.sync ? "sync" : "async"); }),
       field(&C::period, keys::integer("period", 4, "local steps between exchanges with the center", 1)), alpha,
       field(&C::delta, keys::num("delta", 0.0, "Nesterov momentum of the local steps (EAMSGD)", 0, false, 0.999999)),
       field<C>(
           keys::str("order", "paper",
                     "\"paper\": the step after an exchange computes its gradient at x_i as the exchange read "
                     "it (x - lr g(x) - alpha (x - c), the paper's order); \"local_first\": at x_i after the "
                     "elastic move",
                     {"paper", "local_first"}),
           [](C& c, const json& v) { c.paper_order = v == "paper"; },
           [](const C& c) { return json(c.paper_order ? "paper" : "local_first"); })},
      {[](const C& c) { return std::make_unique<EasgdEngine>(c); },
       // A period: `period` local steps per worker, one exchange (a push and a reply); each
       // worker keeps x_i and a deferred gradient (EAMSGD: its velocity and look-ahead too;
       // the paper's order: x_i as its last exchange read it).
       [](const C& c, int workers) {
         const double period = std::max(1, c.period);
         return EngineCost{2 / period, workers * period, (c.delta > 0 ? 6.0 : 4.0) + (c.paper_order ? 1 : 0)};
       },
       [](const C& c, const EngineRunView& run, Validator& v) {
         refuse_compression(run, "easgd pushes its parameters for the exchange, not gradients", v);
         // The local steps are plain SGD or EAMSGD's (delta); train's optimizer keys are not
         // applied to them (train.momentum never was): refuse the ones that would be ignored.
         if (!run.optimizer.empty() && run.optimizer != "sgd")
           v.error("train.optimizer", "easgd's local steps are SGD (EAMSGD: engine delta); train.optimizer " +
                                          json(run.optimizer).dump() + " is not implemented for easgd");
         if (run.nesterov)
           v.error("train.nesterov",
                   "easgd's local steps take Nesterov momentum from engine delta (EAMSGD), not "
                   "from train.nesterov");
         if (c.alpha >= 0 && c.sync && run.workers && c.alpha * double(*run.workers) > 1)
           v.error("engine.alpha",
                   "mode \"sync\" moves the center by beta = workers * alpha, which must be <= 1 (the "
                   "center would overshoot the workers' mean): use alpha <= 1/" +
                       std::to_string(*run.workers) + " or \"auto\"; got " + brief(json(c.alpha)));
       }});
}

EasgdEngine::EasgdEngine(const EasgdConfig& config)
    : sync_(config.sync),
      paper_(config.paper_order),
      period_(config.period),
      alpha_config_(config.alpha),
      delta_(float(config.delta)) {}

nlohmann::json EasgdEngine::describe() const {
  nlohmann::json d = nlohmann::json::object();
  d["alpha_used"] = alpha_;
  if (sync_) d["beta_used"] = alpha_ * workers_;
  return d;
}

void EasgdEngine::start(Runtime& sim) {
  const int n = sim.workers();
  workers_ = n;
  alpha_ = alpha_config_ < 0 ? 0.9 / n : alpha_config_;
  std::vector<float> init = sim.initial_params();
  center_ = std::make_unique<ParameterStore>(init, 0);
  local_.clear();
  for (int w = 0; w < n; ++w) {
    local_.push_back(std::make_shared<Params>());
    local_.back()->upload(init);
  }
  local_version_.assign(n, 0);
  deferred_grad_.clear();
  deferred_grad_.resize(delta_ > 0 ? 0 : n);
  local_steps_.assign(n, 0);
  exchanged_.clear();
  exchanged_.resize(n);
  at_exchange_.assign(n, false);
  waiting_.assign(n, false);
  in_exchange_.assign(n, false);
  reply_due_.assign(n, true);  // each worker first receives the center it starts from
  seen_.assign(n, 0);
  if (delta_ > 0) {
    velocity_.resize(n);
    lookahead_.resize(n);
    for (int w = 0; w < n; ++w) {
      velocity_[w].resize_discard(init.size());
      velocity_[w].fill(0.0f);
    }
  }
  for (int w = 0; w < n; ++w)  // (after a warm-up some may be down)
    if (sim.worker_alive(w)) launch_next(sim, w);
}

// Between events every job has computed, so its deferred step is in x_i already: the
// workers' copies and buffers are values, read back into buffers of their own.
void EasgdEngine::checkpoint(Runtime& sim, StateArchive& a) {
  a.tag("easgd");
  a.io(workers_);
  a.io(alpha_);
  if (!a.saving()) center_ = std::make_unique<ParameterStore>(std::vector<float>(sim.num_params()), 0);
  center_->checkpoint(a);
  for (auto* buffers : {&local_, &lookahead_, &exchanged_}) {
    uint64_t n = buffers->size();
    a.io(n);
    if (!a.saving()) {
      if (n > uint64_t(sim.workers())) a.fail("EASGD's copies do not match the workers");
      buffers->assign(size_t(n), nullptr);
    }
    for (auto& p : *buffers) {
      bool present = bool(p);
      a.io(present);
      if (!present) continue;
      if (!a.saving()) p = std::make_shared<Params>();
      a.io(*p);
    }
  }
  a.io(local_version_);
  a.io(deferred_grad_);
  a.io(velocity_);
  a.io(local_steps_);
  a.io(at_exchange_);
  a.io(waiting_);
  a.io(in_exchange_);
  a.io(reply_due_);
  a.io(seen_);
  a.io(group_);
}

// Called only when no job of `worker` is computing (its last one arrived, or settled).
void EasgdEngine::launch_next(Runtime& sim, int worker, const DeferredStep& before) {
  Step step = sim.next_step(worker, ids_);
  Snapshot at{local_[worker], local_version_[worker]};
  if (at_exchange_[worker]) {  // order "paper": the gradient at x_i as the exchange read it
    at.params = exchanged_[worker];
    at_exchange_[worker] = false;
  }
  if (delta_ > 0) {
    // gradient at the look-ahead point x - lr * delta * V, in the worker's own buffer
    const size_t n = center_->size();
    std::shared_ptr<Params>& buf = lookahead_[worker];
    if (!buf) buf = std::make_shared<Params>(n);
    ops::sgd_step(sim.exec(), buf->data(), at.data(), velocity_[worker].data(), float(sim.lr()) * delta_, n);
    at = Snapshot{buf, at.version};
  }
  step.own = std::move(at);
  step.reply = reply_due_[worker];
  step.push = (local_steps_[worker] + 1) % uint64_t(period_) == 0;  // it ends a period: the exchange
  step.before = before;
  reply_due_[worker] = false;
  sim.launch(step);
}

void EasgdEngine::on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) {
  const int w = job->worker;
  const size_t n = center_->size();
  ExecContext& ctx = sim.exec();
  float* x = local_[w]->data();
  sim.applied(*job, center_->version() - seen_[w]);  // (before the rate: its samples count)
  const float lr = float(sim.lr());
  const bool exchange = (local_steps_[w] + 1) % uint64_t(period_) == 0;
  if (delta_ == 0 && !exchange && !sim.stopping()) {
    // x_i <- x_i - lr g, applied by the worker's next job (launched now) before it computes
    std::swap(deferred_grad_[w], job->grad);
    sim.recycle(std::move(job));
    ++local_steps_[w];
    ++local_version_[w];
    // (the job computes its gradient into the buffer its step reads first)
    launch_next(sim, w, DeferredStep{x, deferred_grad_[w].data(), lr, &deferred_grad_[w]});
    return;
  }
  if (delta_ > 0)
    ops::momentum_step(ctx, x, x, velocity_[w].data(), job->grad.data(), lr, delta_, n);
  else
    ops::sgd_step(ctx, x, x, job->grad.data(), lr, n);
  ++local_version_[w];
  sim.recycle(std::move(job));

  if (++local_steps_[w] % uint64_t(period_) == 0) {  // its parameters are at the server now
    if (sync_) {
      waiting_[w] = true;
      exchange_all_if_ready(sim);
    } else {
      in_exchange_[w] = true;
      sim.server_update([this, &sim, w] { exchange_one(sim, w); });
    }
    return;
  }
  if (!sim.stopping()) launch_next(sim, w);
}

void EasgdEngine::exchange_one(Runtime& sim, int w) {
  // elastic exchange: both x_i and the center move towards each other
  const size_t n = center_->size();
  ExecContext& ctx = sim.exec();
  float* x = local_[w]->data();
  keep_exchanged(sim, w);
  ++local_version_[w];
  center_->update([&](float* co, const float* ci) {
    ops::copy(ctx, co, ci, n);
    ops::elastic_exchange(ctx, x, co, float(alpha_), n);
  });
  replied(w);
  sim.updated();
  if (!sim.stopping() && sim.worker_alive(w)) launch_next(sim, w);
}

void EasgdEngine::keep_exchanged(Runtime& sim, int w) {
  if (!paper_) return;
  // No job of w reads exchanged_[w] now: the one launched from it has come back (or been
  // settled) before w can end another period.
  const size_t n = center_->size();
  std::shared_ptr<Params>& b = exchanged_[w];
  if (!b) b = std::make_shared<Params>(n);
  ops::copy(sim.exec(), b->data(), local_[w]->data(), n);
  at_exchange_[w] = true;
}

void EasgdEngine::replied(int w) {
  in_exchange_[w] = false;
  seen_[w] = center_->version();
  reply_due_[w] = true;
}

void EasgdEngine::exchange_all_if_ready(Runtime& sim) {
  group_.clear();
  for (int w = 0; w < workers_; ++w) {
    if (!sim.worker_alive(w)) continue;
    if (!waiting_[w]) return;  // someone is still stepping
    group_.push_back(w);
  }
  if (group_.empty()) return;
  for (int w : group_) {
    waiting_[w] = false;
    in_exchange_[w] = true;
  }
  sim.server_update([this, &sim, group = group_] { exchange_group(sim, group); });
}

void EasgdEngine::exchange_group(Runtime& sim, const std::vector<int>& group) {
  const size_t n = center_->size();
  ExecContext& ctx = sim.exec();
  // mean_i x_i, summed in worker-index order, before anything moves
  mean_.resize_discard(n);
  ops::copy(ctx, mean_.data(), local_[group[0]]->data(), n);
  for (size_t k = 1; k < group.size(); ++k) ops::add_into(ctx, mean_.data(), local_[group[k]]->data(), n);
  ops::scale(ctx, mean_.data(), 1.0f / float(group.size()), n);
  // x_i <- x_i + alpha (c - x_i), with the center before the exchange
  const float* c = center_->current().data();
  for (int w : group) {
    keep_exchanged(sim, w);
    ops::move_towards(ctx, local_[w]->data(), c, float(alpha_), n);
    ++local_version_[w];
  }
  // c <- c + beta (mean - c), beta = N alpha
  const float beta = float(alpha_ * double(group.size()));
  center_->update([&](float* out, const float* in) {
    ops::copy(ctx, out, in, n);
    ops::move_towards(ctx, out, mean_.data(), beta, n);
  });
  for (int w : group) replied(w);
  sim.updated();
  if (sim.stopping()) return;
  for (int w : group)
    if (sim.worker_alive(w)) launch_next(sim, w);
}

void EasgdEngine::on_worker_down(Runtime& sim, int w) {
  if (!sync_) return;  // async: its gradient in flight is lost, nothing else changes
  // it leaves the barrier, and restarts its period when it comes back
  local_steps_[w] -= local_steps_[w] % uint64_t(period_);
  waiting_[w] = false;
  exchange_all_if_ready(sim);
}

void EasgdEngine::on_worker_up(Runtime& sim, int w) {
  sim.settle(w);  // its lost job may still be applying a deferred step to x_i, or reading it
  // from its own copy, where it left off (or, in an exchange, once the server replies)
  if (!in_exchange_[w] && !sim.stopping()) launch_next(sim, w);
}

}  // namespace asgd
