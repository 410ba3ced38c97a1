// engines/local_sgd.cpp — local SGD / periodic model averaging (Stich 2019, "Local SGD
// Converges Fast and Communicates Little"; Lin, Stich, Patel & Jaggi 2020, "Don't Use
// Large Mini-Batches, Use Local SGD"). Each round every live worker reads the model of
// record w and runs H = `steps` SGD steps on its own copy, each on its own minibatch of
// the run's sample stream:  x_i <- x_i - lr * g(x_i)  (lr in force when the gradient
// arrives). When every worker of the round has done its H steps, the models are averaged
// in worker-index order and the average becomes w (and every worker's next start).
//
// Representation: a worker's copy is kept as its displacement from the point it read,
//   x_i = base_i - lr_ref * D_i,   D_i = sum over its local steps of (lr_k / lr_ref) g_k,
// with lr_ref the rate in force at the round's start (1 if that is 0). The average of the
// models is then  w <- w - lr_ref * (1/N) sum_i D_i  (exact when every worker read w),
// applied through ServerUpdate with the same weights as sync (train.aggregate = sum drops
// the 1/N). So H = 1 computes exactly what sync computes, bit for bit, whenever the rate
// does not change inside an iteration (each local step uses the rate at its own arrival,
// sync the rate at the iteration's end). train.momentum acts on the server, on the averaged
// displacement (block momentum); with 0 the new w is plainly the models' average.
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
#include "engines/engine_registry.h"
#include "engines/server_update.h"

namespace asgd {

namespace {
struct LocalSgdConfig {
  int steps{};
};
}  // namespace

EngineType local_sgd_engine_type() {
  using C = LocalSgdConfig;
  EngineType t = engine_type<C>(
      "local_sgd",
      "local SGD (Stich 2019; Lin et al. 2020): every worker takes `steps` SGD steps on its own copy, then "
      "the copies are averaged into the model of record; steps 1 is sync",
      {field(&C::steps, keys::integer("steps", 4, "H: local steps per worker between averagings", 1))},
      [](const C& c, const json& spec) { return std::make_unique<LocalSgdEngine>(c.steps, spec); },
      // A round: H local steps per worker, one pull and one push per worker, one update;
      // each worker keeps its copy and its displacement besides the usual two vectors.
      [](const C& c, int workers) {
        const double h = std::max(1, c.steps);
        return EngineCost{2 / h, workers * h, 4};
      });
  t.check = [](const json&, const json& run, Validator& v) {
    refuse_compression(run, "local_sgd pushes each worker's model for the averaging, not gradients", v);
  };
  return t;
}

LocalSgdEngine::LocalSgdEngine(int steps, const nlohmann::json& spec) : spec_(spec), steps_(steps) {}

void LocalSgdEngine::start(Runtime& sim) {
  const int n = sim.workers();
  store_ = std::make_unique<ParameterStore>(sim.initial_params(), sim.history_needed());
  server_ = std::make_shared<ServerUpdate>(sim.settings().momentum);
  base_.assign(n, Snapshot{});
  local_.clear();
  disp_.clear();
  disp_.resize(n);
  for (int w = 0; w < n; ++w) {
    local_.push_back(std::make_unique<ParameterStore>(std::vector<float>(sim.num_params()), 0));
    disp_[w].resize_discard(sim.num_params());
  }
  done_.assign(n, 0);
  in_round_.assign(n, false);
  busy_.assign(n, false);
  round_start_ = sim.now();
  start_round(sim);
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
  const float lr_ref = lr_ref_;
  local_[w]->update([&](float* out, const float*) { ops::sgd_step(ctx, out, base, d, lr_ref, n); });
  Step step = sim.next_step(w, ids_);
  step.own = local_[w]->current();
  step.own.version = base_[w].version;  // the model-of-record version this copy descends from
  step.push = done_[w] + 1 == steps_;   // the round's last step sends the worker's model
  sim.launch(step);
  busy_[w] = true;
}

void LocalSgdEngine::on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) {
  const int w = job->worker;
  const size_t n = store_->size();
  ExecContext& ctx = sim.exec();
  busy_[w] = false;
  if (!in_round_[w]) {  // left the round (went down) while computing: nothing to add to
    sim.dropped(*job);
    sim.recycle(std::move(job));
    return;
  }
  if (done_[w] == 0) base_[w] = job->read;  // what the round's pull delivered
  sim.applied(*job, store_->version() - base_[w].version);  // (before the rate: its samples count)
  float ratio = float(sim.lr()) / lr_ref_;
  if (ratio != 1.0f) ops::scale(ctx, job->grad.data(), ratio, n);
  if (done_[w] == 0) ops::copy(ctx, disp_[w].data(), job->grad.data(), n);
  else ops::add_into(ctx, disp_[w].data(), job->grad.data(), n);
  sim.recycle(std::move(job));
  if (++done_[w] < steps_) launch_local_step(sim, w);
  else finish_round_if_done(sim);
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
  if (!parts_.empty())
    server_->apply_sum(sim, *store_, parts_, aggregate_weight(sim, int(parts_.size())), lr_ref_);
  sim.updated();
  if (!sim.stopping()) start_round(sim);
}

void LocalSgdEngine::on_worker_down(Runtime& sim, int w) {
  busy_[w] = false;  // its gradient in flight is lost
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

void LocalSgdEngine::on_worker_up(Runtime& sim, int) {
  // else it joins the next round (also when the server is averaging the last one)
  if (!round_open_ && !averaging_ && !sim.stopping()) start_round(sim);
}

Snapshot LocalSgdEngine::model_of_record() const { return store_->current(); }

}  // namespace asgd
