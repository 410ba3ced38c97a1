// engines/local_sgd.cpp — local SGD / periodic model averaging (Stich 2019, "Local SGD
// Converges Fast and Communicates Little"; Lin, Stich, Patel & Jaggi 2020, "Don't Use
// Large Mini-Batches, Use Local SGD"), with an outer optimizer on the averaged
// pseudo-gradient; DiLoCo (Douillard et al. 2023) is this engine with AdamW inside and
// Nesterov outside (engines/diloco.cpp). Each round every live worker reads the model of
// record w and runs H = `steps` inner steps on its own copy, each on its own minibatch of
// the run's sample stream, with its own inner optimizer (train.optimizer: sgd, momentum,
// nesterov, adam, adamw; lr in force when the gradient arrives):  x_i <- x_i - lr * d_k,
// d_k the optimizer's direction for g(x_i) (plain SGD: d_k = g). When every worker of the
// round has done its H steps, the pseudo-gradient Delta = w - mean_i x_i (summed in
// worker-index order) is applied to w by the outer optimizer at the server:
//   v <- outer_momentum v + Delta;  w <- w - outer_lr v   (outer_nesterov: w - outer_lr (Delta + mu v))
// so outer_lr 1 without momentum makes w the models' average (plain local SGD).
//
// Representation: a worker's copy is kept as its displacement from the point it read,
//   x_i = base_i - lr_ref * D_i,   D_i = sum over its local steps of (lr_k / lr_ref) d_k,
// with lr_ref the rate in force at the round's start (1 if that is 0). Then
// Delta = lr_ref * (1/N) sum_i D_i (exact when every worker read w), applied through
// ServerUpdate with the same weights as sync (train.aggregate = sum drops the 1/N): without
// outer momentum as w <- w - (outer_lr lr_ref) * mean D, so outer_lr 1 is exactly today's
// average and H = 1 computes exactly what sync computes, bit for bit, whenever the rate
// does not change inside an iteration (each local step uses the rate at its own arrival,
// sync the rate at the iteration's end); with outer momentum the server's velocity takes
// Delta itself (lr_ref folded into the weight), so the outer step does not depend on the
// inner rate's schedule. The inner optimizer state is each worker's own and survives the
// rounds (as in DiLoCo); Adam's weight decay reads x_i from the copy. A worker that fails
// loses its state: it starts again at 0 when the worker is back (the state lived on it).
// Under forced staleness a worker's round starts from an older w (base_i); the averaged
// displacement is applied to the current w, as stale gradients are in every engine.
// One round is one update of the model of record and one iteration (iteration_time).
// A local step's staleness is how many updates base_i lags w (0 without forced staleness).
// Failures: a worker that goes down leaves the round (its displacement is dropped); the
// round ends when the live workers in it are done; a returning worker joins the next round.
// Messages: a round's first step pulls w (read when the server serves the pull: that is
// base_i), the local steps send nothing, and the H-th step pushes the worker's model (its
// displacement: one parameter-sized message). When the last worker's push arrives the round
// ends (iteration_time runs from one such end to the next), the server averages as one
// update (Runtime::server_update), and the next round's pulls follow it. With H = 1
// every step pulls and pushes, as sync's do: the same messages, times and counters.
#include "engines/local_sgd.h"
#include <algorithm>
#include <cmath>
#include "engines/engine_registry.h"
#include "engines/optimizer.h"
#include "engines/server_update.h"

namespace asgd {

std::vector<Field<LocalSgdConfig>> local_sgd_fields(int steps, double outer_lr, double outer_momentum,
                                                    bool outer_nesterov) {
  using C = LocalSgdConfig;
  return {field(&C::steps, keys::integer("steps", steps, "H: inner steps per worker between averagings", 1)),
          field(&C::outer_lr, keys::num("outer_lr", outer_lr,
                                        "outer step size on the pseudo-gradient w - mean_i x_i (1 without momentum: "
                                        "w becomes the workers' average)",
                                        0, true)),
          field(&C::outer_momentum,
                keys::num("outer_momentum", outer_momentum,
                          "outer heavy-ball momentum: v = mu v + Delta; w -= outer_lr v", 0, false, 0.999999)),
          field(&C::outer_nesterov,
                keys::boolean("outer_nesterov", outer_nesterov,
                              "outer Nesterov momentum (PyTorch's form): w -= outer_lr (Delta + mu v); needs "
                              "outer_momentum > 0"))};
}

// Its pushes are each worker's model (its displacement), not gradients, so compression
// would not be applied (local_sgd and diloco alike).
void check_local_sgd(const LocalSgdConfig& c, const EngineRunView& run, Validator& v) {
  refuse_compression(run, "local_sgd and diloco push each worker's model for the averaging, not gradients", v);
  if (c.outer_nesterov && c.outer_momentum <= 0)
    v.error("engine.outer_nesterov", "outer Nesterov momentum needs outer_momentum > 0 (outer_momentum is " +
                                         json(c.outer_momentum).dump() + ")");
}

// A round: H local steps per worker, one pull and one push per worker, one update; each
// worker keeps its copy and its displacement besides the usual two vectors, and its inner
// optimizer's state.
EngineCost local_sgd_cost(const LocalSgdConfig& c, int workers) {
  const double h = std::max(1, c.steps);
  return EngineCost{2 / h, workers * h, 4, /*optimizer_per_worker=*/true};
}

EngineType local_sgd_engine_type() {
  using C = LocalSgdConfig;
  return engine_type<C>(
      "local_sgd",
      "local SGD (Stich 2019; Lin et al. 2020): every worker takes `steps` steps of train.optimizer on its own "
      "copy, then the copies' average pseudo-gradient is applied by an outer SGD step (outer_lr 1: the average); "
      "steps 1 is sync",
      local_sgd_fields(4, 1.0, 0.0, false),
      {[](const C& c) { return std::make_unique<LocalSgdEngine>("local_sgd", c); }, local_sgd_cost, check_local_sgd});
}

LocalSgdEngine::LocalSgdEngine(std::string type, const LocalSgdConfig& config)
    : type_(std::move(type)), config_(config), steps_(config.steps) {}

LocalSgdEngine::~LocalSgdEngine() = default;

void LocalSgdEngine::start(Runtime& sim) {
  const int n = sim.workers();
  configure(sim, sim.initial_params());
  round_start_ = sim.now();
  if (!config_.asynchronous) {
    start_round(sim);
    return;
  }
  window_steps_.assign(n, steps_);
  window_lr_ref_.assign(n, 1.0f);
  window_start_.assign(n, 0);
  speed_.assign(n, 0.0);
  pushes_ = 0;
  if (config_.outer_momentum > 0 && config_.nesterov_period > 1) {
    dn_buffer_.resize_discard(sim.num_params());
    dn_buffer_.fill(0.0f);
    dn_momentum_.resize_discard(sim.num_params());
    dn_momentum_.fill(0.0f);
  }
  for (int w = 0; w < n; ++w)
    if (sim.worker_alive(w)) start_window(sim, w);
}

// What start() sets up before the first steps: the stores, the optimizers, the per-worker
// state (each worker's copy, displacement and inner optimizer).
void LocalSgdEngine::configure(Runtime& sim, const std::vector<float>& init) {
  const int n = sim.workers();
  store_ = std::make_unique<ParameterStore>(init, sim.history_needed());
  OptimizerSpec outer;  // SGD with the engine's outer momentum
  outer.momentum = config_.outer_momentum;
  outer.nesterov = config_.outer_nesterov;
  server_ = std::make_shared<ServerUpdate>(outer);
  inner_.clear();
  reset_inner_.assign(n, false);
  base_.assign(n, Snapshot{});
  local_.clear();
  disp_.clear();
  disp_.resize(n);
  for (int w = 0; w < n; ++w) {
    local_.push_back(std::make_unique<ParameterStore>(std::vector<float>(sim.num_params()), 0));
    disp_[w].resize_discard(sim.num_params());
    if (sim.settings().optimizer.stateful()) {
      inner_.push_back(std::make_unique<Optimizer>(sim.settings().optimizer));
      inner_.back()->reset(sim.num_params());
    }
  }
  done_.assign(n, 0);
  in_round_.assign(n, false);
  busy_.assign(n, false);
}

void LocalSgdEngine::checkpoint(Runtime& sim, StateArchive& a) {
  a.tag("local_sgd");
  if (!a.saving()) configure(sim, std::vector<float>(sim.num_params()));
  store_->checkpoint(a);
  server_->checkpoint(a);
  a.io(lr_ref_);
  for (Snapshot& b : base_) asgd::checkpoint(a, b);
  for (auto& x : local_) x->checkpoint(a);
  a.io(disp_);
  for (auto& o : inner_) o->checkpoint(a);
  a.io(reset_inner_);
  a.io(done_);
  a.io(in_round_);
  a.io(busy_);
  a.io(round_open_);
  a.io(averaging_);
  a.io(round_start_);
  a.io(window_steps_);
  a.io(window_lr_ref_);
  a.io(window_start_);
  a.io(speed_);
  a.io(dn_buffer_);
  a.io(dn_momentum_);
  a.io(pushes_);
  if (!a.saving() && disp_.size() != size_t(sim.workers())) a.fail("the workers' copies do not match this run's");
}

// Asynchronous local SGD: worker w reads the server's w now and starts its window of
// H_w local steps (its pseudo-gradient is applied when it arrives: apply_window).
void LocalSgdEngine::start_window(Runtime& sim, int w) {
  const double lr = sim.lr();
  window_lr_ref_[w] = lr > 0 ? float(lr) : 1.0f;
  in_round_[w] = true;
  done_[w] = 0;
  if (reset_inner_[w] && !inner_.empty()) inner_[w]->reset(sim.num_params());
  reset_inner_[w] = false;
  window_start_[w] = sim.now();
  Step step = sim.next_step(w, ids_);  // the first step computes at base_w, the w it pulls
  step.pull = store_.get();
  step.push = window_steps_[w] == 1;
  sim.launch(step);
  busy_[w] = true;
}

// The server's update for worker w's pseudo-gradient Delta_w = base_w - x_w = lr_ref D_w,
// applied in full to the current w (it may be stale: the updates of other workers'
// windows since base_w): outer SGD (v <- mu v + Delta; w <- w - outer_lr v, or Nesterov's
// w <- w - outer_lr (Delta + mu v)) through the shared server step, or Delayed Nesterov.
// Then w's next window starts, its H_w from its measured speed under DyLU.
void LocalSgdEngine::apply_window(Runtime& sim, int w) {
  in_round_[w] = false;
  base_[w] = Snapshot{};
  const size_t n = store_->size();
  float* d = disp_[w].data();
  const float ref = window_lr_ref_[w];
  if (config_.outer_momentum > 0 && config_.nesterov_period > 1) {
    ops::scale(sim.exec(), d, ref, n);  // Delta_w itself
    delayed_nesterov(sim, d);
  } else {
    parts_.assign(1, d);
    if (config_.outer_momentum > 0)
      server_->apply_sum(sim, *store_, parts_, ref, float(config_.outer_lr));
    else
      server_->apply_sum(sim, *store_, parts_, 1.0f, float(config_.outer_lr) * ref);
  }
  ++pushes_;
  sim.updated();
  if (config_.dynamic_local_updates) {  // DyLU: H_w = floor(v_w / max_j v_j * H), at least 1
    const double fastest = *std::max_element(speed_.begin(), speed_.end());
    if (fastest > 0 && speed_[w] > 0)
      window_steps_[w] = std::max(1, int(std::floor(speed_[w] / fastest * double(steps_))));
  }
  if (!sim.stopping() && sim.worker_alive(w)) start_window(sim, w);
}

// Delayed Nesterov (Liu et al. 2024, Algorithm 3, momentum activation c = 0), with t the
// push count (this push included), N = nesterov_period, eps = outer_lr, beta = outer_momentum:
//   buffer <- buffer + Delta_t
//   t mod N == 0:  m <- beta m + buffer / N;  w <- w - eps (Delta_t / N + beta m);  buffer <- 0
//   otherwise:     w <- w - eps Delta_t / N
// so N pushes move w by what one Nesterov step on their mean would, and the momentum is
// updated once in N. N = 1 is Nesterov at every push (the shared server step takes it).
// Rounding: Delta_t / N is applied as (eps / N) Delta_t, then eps beta m.
void LocalSgdEngine::delayed_nesterov(Runtime& sim, float* delta) {
  ExecContext& ctx = sim.exec();
  const size_t n = store_->size();
  const int period = config_.nesterov_period;
  const float eps = float(config_.outer_lr), beta = float(config_.outer_momentum);
  const bool milestone = (pushes_ + 1) % uint64_t(period) == 0;
  ops::add_into(ctx, dn_buffer_.data(), delta, n);
  if (milestone) {
    ops::scale(ctx, dn_buffer_.data(), 1.0f / float(period), n);
    ops::momentum_direction(ctx, dn_buffer_.data(), dn_momentum_.data(), beta, false, n);  // m <- beta m + mean
  }
  store_->update([&](float* out, const float* in) {
    ops::sgd_step(ctx, out, in, delta, eps / float(period), n);
    if (milestone) ops::sgd_step(ctx, out, out, dn_momentum_.data(), eps * beta, n);
  });
  if (milestone) dn_buffer_.fill(0.0f);
}

void LocalSgdEngine::start_round(Runtime& sim) {
  double lr = sim.lr();
  lr_ref_ = lr > 0 ? float(lr) : 1.0f;
  round_open_ = false;
  for (int w = 0; w < sim.workers(); ++w) {
    in_round_[w] = false;
    if (!sim.worker_alive(w)) continue;
    in_round_[w] = true;
    round_open_ = true;
    done_[w] = 0;
    if (reset_inner_[w] && !inner_.empty()) inner_[w]->reset(sim.num_params());
    reset_inner_[w] = false;
    Step step = sim.next_step(w, ids_);  // the first step computes at base_i, the w it pulls
    step.pull = store_.get();
    step.push = steps_ == 1;
    sim.launch(step);
    busy_[w] = true;
  }
}

void LocalSgdEngine::launch_local_step(Runtime& sim, int w) {
  const size_t n = store_->size();
  ExecContext& ctx = sim.exec();
  const float* base = base_[w].data();
  const float* d = disp_[w].data();
  const float lr_ref = lr_ref_of(w);
  local_[w]->update([&](float* out, const float*) { ops::sgd_step(ctx, out, base, d, lr_ref, n); });
  Step step = sim.next_step(w, ids_);
  step.own = local_[w]->current();
  step.own.version = base_[w].version;      // the model-of-record version this copy descends from
  step.push = done_[w] + 1 == steps_of(w);  // the round's last step sends the worker's model
  sim.launch(step);
  busy_[w] = true;
}

void LocalSgdEngine::on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) {
  const int w = job->worker;
  busy_[w] = false;
  if (!in_round_[w]) {  // left the round (went down) while computing: nothing to add to
    sim.dropped(*job);
    sim.recycle(std::move(job));
    return;
  }
  if (done_[w] == 0) base_[w] = job->read;                  // what the round's pull delivered
  sim.applied(*job, store_->version() - base_[w].version);  // (before the rate: its samples count)
  accumulate_local_step(sim, inner_.empty() ? nullptr : inner_[w].get(), *job,
                        done_[w] == 0 ? base_[w].data() : local_[w]->current().data(), lr_ref_of(w), done_[w] == 0,
                        disp_[w].data());
  sim.recycle(std::move(job));
  if (++done_[w] < steps_of(w)) {
    launch_local_step(sim, w);
  } else if (config_.asynchronous) {  // its pseudo-gradient is at the server: applied in turn
    const double seconds = sim_to_seconds(sim.now() - window_start_[w]);
    if (seconds > 0) speed_[w] = double(window_steps_[w]) / seconds;  // (DyLU's measured speed)
    sim.server_update([this, &sim, w] { apply_window(sim, w); });
  } else {
    finish_round_if_done(sim);
  }
}

void LocalSgdEngine::finish_round_if_done(Runtime& sim) {
  if (!round_open_) return;
  parts_.clear();
  for (int w = 0; w < sim.workers(); ++w) {
    if (!in_round_[w]) continue;
    if (done_[w] < steps_) return;  // someone is still stepping
    parts_.push_back(disp_[w].data());
  }
  round_open_ = false;
  averaging_ = true;
  sim.iteration_done(sim.now() - round_start_);
  round_start_ = sim.now();
  sim.server_update([this, &sim] { average(sim); });
}

void LocalSgdEngine::average(Runtime& sim) {
  averaging_ = false;
  for (auto& b : base_) b = Snapshot{};  // let w be updated in place
  if (!parts_.empty()) {
    const float weight = aggregate_weight(sim, int(parts_.size()));
    if (config_.outer_momentum > 0)  // the velocity takes Delta = lr_ref * mean D
      server_->apply_sum(sim, *store_, parts_, weight * lr_ref_, float(config_.outer_lr));
    else  // w - outer_lr * Delta, as (outer_lr lr_ref) * mean D: outer_lr 1 is the plain average
      server_->apply_sum(sim, *store_, parts_, weight, float(config_.outer_lr) * lr_ref_);
  }
  sim.updated();
  if (!sim.stopping()) start_round(sim);
}

void LocalSgdEngine::on_worker_down(Runtime& sim, int w) {
  busy_[w] = false;            // its gradient in flight is lost
  reset_inner_[w] = true;      // and its inner optimizer's state
  if (config_.asynchronous) {  // its window is lost, unless its push already reached the server
    if (in_round_[w] && done_[w] < steps_of(w)) in_round_[w] = false;
    return;
  }
  if (!in_round_[w]) return;
  in_round_[w] = false;
  bool anyone = false;
  for (int v = 0; v < sim.workers(); ++v) anyone = anyone || in_round_[v];
  if (!anyone) {
    round_open_ = false;  // nobody left: wait for a worker to come back
    return;
  }
  finish_round_if_done(sim);
}

void LocalSgdEngine::on_worker_up(Runtime& sim, int w) {
  if (config_.asynchronous) {  // (a window whose push reached the server restarts after its update)
    if (!in_round_[w] && !sim.stopping()) start_window(sim, w);
    return;
  }
  // else it joins the next round (also when the server is averaging the last one)
  if (!round_open_ && !averaging_ && !sim.stopping()) start_round(sim);
}

Snapshot LocalSgdEngine::model_of_record() const { return store_->current(); }

void accumulate_local_step(Runtime& sim, Optimizer* inner, GradientJob& job, const float* x, float lr_ref, bool first,
                           float* disp) {
  ExecContext& ctx = sim.exec();
  const size_t n = sim.num_params();
  if (inner) {  // the inner optimizer's direction at x (the copy this gradient was computed at)
    inner->begin_step(float(sim.lr()));
    inner->direction(ctx, job.grad.data(), x, n);
  }
  const float ratio = float(sim.lr()) / lr_ref;
  if (ratio != 1.0f) ops::scale(ctx, job.grad.data(), ratio, n);
  if (first)
    ops::copy(ctx, disp, job.grad.data(), n);
  else
    ops::add_into(ctx, disp, job.grad.data(), n);
}

}  // namespace asgd
