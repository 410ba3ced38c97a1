// engines/federated.cpp — the federated server rules on a population of clients (section
// clients; sim/core/population.h): fedavg, fedbuff and fedasync. Each slot (cluster.workers)
// trains one client at a time; a client's job is its local work: it reads the model of record
// w (its job's first step pulls it: base), takes H local steps of train.optimizer on its own
// data (a fresh optimizer state per job: a client keeps nothing between its jobs), H =
// local_steps, or ceil(local_epochs x its samples / train.batch_size) when local_epochs > 0,
// and its last step pushes its model delta Delta = base - x_H (one parameter-sized message;
// the local steps send nothing). Where the rules differ is what the server does with deltas:
//
//   fedavg   (McMahan et al. 2017, "Communication-Efficient Learning of Deep Networks from
//            Decentralized Data", Algorithm 1 FederatedAveraging): rounds. Every live slot
//            draws a client and trains it from the round's w; the round ends when `report`
//            clients (0: every slot's) have pushed; the later ones are cancelled (over-
//            selection, Bonawitz et al. 2019: their time counts as wasted, their deltas are
//            never sent). w <- w - server_lr sum_k (n_k / sum_j n_j) Delta_k, n_k the client's
//            samples: server_lr 1 is McMahan's w <- sum_k (n_k/n) w_k exactly; server_momentum
//            > 0 is FedAvgM (Hsu, Qi & Brown 2019). One round is one update and one iteration.
//   fedbuff  (Nguyen et al. 2022, "Federated Learning with Buffered Asynchronous Aggregation",
//            Algorithm 1): no rounds; a slot draws its next client as soon as its push has
//            left. The server adds each delta to a buffer weighted by s(tau) (staleness_weight,
//            1/sqrt(1 + tau) by default: the paper's), tau = updates of w since the client's
//            base; at the K-th it applies the buffer's mean (Algorithm 1 divides the buffer by
//            K; aggregate "sum" drops the 1/K) with the server optimizer: v <- mu v + mean;
//            w <- w - server_lr v.
//   fedasync (Xie, Koyejo & Gupta 2019, "Asynchronous Federated Optimization", Algorithm 1):
//            each delta is applied on arrival by mixing the client's model into w:
//            w <- (1 - a_t) w + a_t x_client, x_client = base - Delta, a_t = alpha s(tau),
//            s polynomial (tau + 1)^-a (default, a = 0.5) or hinge (staleness_weight). The
//            client's proximal term (rho/2 |x - base|^2 in the paper's local objective) is not
//            applied: local steps are train.optimizer's (rho = 0, which the paper also runs).
//
// local_steps 1 with an SGD client is the one-gradient client: fedbuff then is k_async's
// K-batch-async with staleness weights on a population (docs/algorithms.md says what differs).
// Representation (as local_sgd's): x = base - lr_ref D, D = sum over local steps of
// (lr_k / lr_ref) d_k, lr_ref the rate at the job's start, so Delta = lr_ref D.
// A local step's staleness is how many updates base lags w (a push's: its tau).
#include <algorithm>
#include <cmath>
#include "engines/engine_registry.h"
#include "engines/local_sgd.h"
#include "engines/optimizer.h"
#include "engines/server_update.h"
#include "engines/staleness_weight.h"

namespace asgd {
namespace {

enum class Rule { FedAvg, FedBuff, FedAsync };

struct FederatedConfig {
  Rule rule{};
  int local_steps{};
  double local_epochs{};
  double server_lr{};
  double server_momentum{};
  int report{};            // fedavg: pushes a round takes (0: every slot's)
  int k{};                 // fedbuff: deltas per update
  bool sum{};              // fedbuff: aggregate "sum"
  double alpha{};          // fedasync: the mixing weight
  StalenessWeight weight;  // fedbuff, fedasync
};

class FederatedEngine final : public Engine {
 public:
  FederatedEngine(std::string type, const FederatedConfig& c) : type_(std::move(type)), c_(c) {}
  std::string type() const override { return type_; }
  void start(Runtime& sim) override;
  void on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) override;
  void on_worker_down(Runtime& sim, int w) override;
  void on_worker_up(Runtime& sim, int w) override;
  void on_timer(Runtime& sim, const Timer& e) override;
  Snapshot model_of_record() const override { return store_->current(); }
  bool keeps_read_params() const override { return true; }  // a job's first step hands on its base
  std::string checkpoint_refusal() const override { return ""; }
  std::vector<const ParameterStore*> pull_stores() const override { return {store_.get()}; }
  void checkpoint(Runtime& sim, StateArchive& a) override;

 private:
  // What start() sets up before the first jobs: the stores, the server, each slot's state.
  void configure(Runtime& sim, const std::vector<float>& init);
  // Slot w's next client job: the first step pulls w.
  void start_job(Runtime& sim, int w);
  void launch_local_step(Runtime& sim, int w);
  // The job's delta is at the server: what the rule does with it.
  void deliver(Runtime& sim, int w);
  void start_round(Runtime& sim);
  void finish_round(Runtime& sim);
  int steps_for(const Runtime& sim, int64_t client) const;
  bool asynchronous() const { return c_.rule != Rule::FedAvg; }
  bool none_in_job(const Runtime& sim) const;
  static constexpr uint64_t kWaitForClient = 1;  // a timer's payload: a slot waited for a client

  std::string type_;
  FederatedConfig c_;
  std::unique_ptr<ParameterStore> store_;
  std::shared_ptr<ServerUpdate> server_;
  // per slot
  std::vector<Snapshot> base_;
  std::vector<std::unique_ptr<ParameterStore>> local_;  // x = base - lr_ref D
  std::vector<DeviceArray<float>> disp_;                // D
  std::vector<std::unique_ptr<Optimizer>> inner_;       // stateful train.optimizer only; reset per job
  std::vector<int> steps_, done_;
  std::vector<int64_t> client_;
  std::vector<float> lr_ref_;
  std::vector<bool> in_job_;
  std::vector<int32_t> ids_;
  // fedbuff
  DeviceArray<float> buffer_;
  int buffered_ = 0;
  // fedavg
  std::vector<int> reported_;  // slots whose deltas this round takes, in arrival order
  bool round_open_ = false, averaging_ = false;
  SimTime round_start_ = 0;
  std::vector<float*> parts_;
};

int FederatedEngine::steps_for(const Runtime& sim, int64_t client) const {
  if (c_.local_epochs <= 0 || client < 0) return c_.local_steps;
  const double batch = double(sim.settings().batch_size);
  return std::max(1, int(std::ceil(c_.local_epochs * double(sim.client_samples(client)) / batch)));
}

void FederatedEngine::start(Runtime& sim) {
  configure(sim, sim.initial_params());
  round_start_ = sim.now();
  if (c_.rule == Rule::FedAvg) {
    start_round(sim);
    return;
  }
  for (int w = 0; w < sim.workers(); ++w)
    if (sim.worker_alive(w)) start_job(sim, w);
}

void FederatedEngine::checkpoint(Runtime& sim, StateArchive& a) {
  a.tag("federated");
  if (!a.saving()) configure(sim, std::vector<float>(sim.num_params()));
  store_->checkpoint(a);
  server_->checkpoint(a);
  for (Snapshot& b : base_) asgd::checkpoint(a, b);
  for (auto& x : local_) x->checkpoint(a);
  a.io(disp_);
  for (auto& o : inner_) o->checkpoint(a);
  a.io(steps_);
  a.io(done_);
  a.io(client_);
  a.io(lr_ref_);
  a.io(in_job_);
  a.io(buffer_);
  a.io(buffered_);
  a.io(reported_);
  a.io(round_open_);
  a.io(averaging_);
  a.io(round_start_);
  if (!a.saving() && disp_.size() != size_t(sim.workers())) a.fail("the slots' copies do not match this run's");
}

void FederatedEngine::configure(Runtime& sim, const std::vector<float>& init) {
  const int n = sim.workers();
  const size_t p = sim.num_params();
  store_ = std::make_unique<ParameterStore>(init, sim.history_needed());
  OptimizerSpec server;
  server.momentum = c_.server_momentum;
  server_ = std::make_shared<ServerUpdate>(server);
  base_.assign(n, Snapshot{});
  local_.clear();
  disp_.clear();
  disp_.resize(n);
  inner_.clear();
  for (int w = 0; w < n; ++w) {
    local_.push_back(std::make_unique<ParameterStore>(std::vector<float>(p), 0));
    disp_[w].resize_discard(p);
    if (sim.settings().optimizer.stateful()) inner_.push_back(std::make_unique<Optimizer>(sim.settings().optimizer));
  }
  steps_.assign(n, 0);
  done_.assign(n, 0);
  client_.assign(n, -1);
  lr_ref_.assign(n, 1.0f);
  in_job_.assign(n, false);
  if (c_.rule == Rule::FedBuff) {
    buffer_.resize_discard(p);
    buffer_.fill(0.0f);
    buffered_ = 0;
  }
}

void FederatedEngine::start_job(Runtime& sim, int w) {
  const double lr = sim.lr();
  lr_ref_[w] = lr > 0 ? float(lr) : 1.0f;
  done_[w] = 0;
  in_job_[w] = true;
  if (!inner_.empty()) inner_[w]->reset(sim.num_params());
  Step step = sim.next_step(w, ids_);  // draws the slot's client
  if (step.client < 0) {               // none available: the slot waits for one
    in_job_[w] = false;
    if (step.no_client_until != kNever) sim.schedule_timer(step.no_client_until, w, kWaitForClient);
    return;
  }
  client_[w] = step.client;
  steps_[w] = steps_for(sim, step.client);
  step.pull = store_.get();
  step.push = steps_[w] == 1;
  step.keep_client = steps_[w] > 1;
  sim.launch(step);
}

void FederatedEngine::launch_local_step(Runtime& sim, int w) {
  const size_t n = store_->size();
  ExecContext& ctx = sim.exec();
  const float* base = base_[w].data();
  const float* d = disp_[w].data();
  const float ref = lr_ref_[w];
  local_[w]->update([&](float* out, const float*) { ops::sgd_step(ctx, out, base, d, ref, n); });
  Step step = sim.next_step(w, ids_);
  step.own = local_[w]->current();
  step.own.version = base_[w].version;
  step.push = done_[w] + 1 == steps_[w];  // the job's last step sends its delta
  step.keep_client = !step.push;
  sim.launch(step);
}

void FederatedEngine::on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) {
  const int w = job->worker;
  if (!in_job_[w]) {  // its job ended meanwhile (the slot went down)
    sim.dropped(*job);
    sim.recycle(std::move(job));
    return;
  }
  if (job->timed_out) {  // its client left before the job was done: the job is dropped
    in_job_[w] = false;
    base_[w] = Snapshot{};
    sim.recycle(std::move(job));
    if (c_.rule == Rule::FedAvg) {
      if (round_open_ && none_in_job(sim)) {
        if (reported_.empty())
          round_open_ = false;  // nobody reported: the round starts again
        else
          finish_round(sim);
      }
      if (!round_open_ && !averaging_ && !sim.stopping()) start_round(sim);
    } else if (!sim.stopping() && sim.worker_alive(w)) {
      start_job(sim, w);
    }
    return;
  }
  if (done_[w] == 0) base_[w] = job->read;  // what the job's pull delivered
  sim.applied(*job, store_->version() - base_[w].version);
  accumulate_local_step(sim, inner_.empty() ? nullptr : inner_[w].get(), *job,
                        done_[w] == 0 ? base_[w].data() : local_[w]->current().data(), lr_ref_[w], done_[w] == 0,
                        disp_[w].data());
  sim.recycle(std::move(job));
  if (++done_[w] < steps_[w]) {
    launch_local_step(sim, w);
    return;
  }
  in_job_[w] = false;
  if (c_.rule == Rule::FedAvg) {
    reported_.push_back(w);
    const int want = c_.report > 0 ? c_.report : sim.workers();
    if (int(reported_.size()) >= want || none_in_job(sim)) finish_round(sim);
    return;
  }
  deliver(sim, w);
  if (!sim.stopping() && sim.worker_alive(w)) start_job(sim, w);  // FedBuff's and FedAsync's clients do not wait
}

// Slot w's delta Delta = lr_ref D is at the server (fedbuff, fedasync). What the server
// applies is taken now, so the slot's next job may begin at once: fedbuff adds s(tau) Delta
// to the buffer (tau: updates since the client's base, now) and hands the full buffer over
// at the K-th; fedasync keeps the client's model x = base - Delta (a snapshot of the slot's
// copy) and mixes it in when the server applies it, with tau then.
void FederatedEngine::deliver(Runtime& sim, int w) {
  ExecContext& ctx = sim.exec();
  const size_t n = store_->size();
  const float* base = base_[w].data();
  const float* d = disp_[w].data();
  const float ref = lr_ref_[w];
  if (c_.rule == Rule::FedBuff) {
    const float s = float(c_.weight(store_->version() - base_[w].version));
    ops::sgd_step(ctx, buffer_.data(), buffer_.data(), d, -s * ref, n);  // buffer += s Delta
    base_[w] = Snapshot{};
    if (++buffered_ < c_.k) return;
    DeviceArray<float> full(std::move(buffer_));
    buffer_.resize_discard(n);
    buffer_.fill(0.0f);
    buffered_ = 0;
    sim.server_update([this, &sim, full = std::move(full)]() mutable {
      parts_.assign(1, full.data());
      server_->apply_sum(sim, *store_, parts_, c_.sum ? 1.0f : 1.0f / float(c_.k), float(c_.server_lr));
      sim.updated();
    });
    return;
  }
  local_[w]->update([&](float* out, const float*) { ops::sgd_step(ctx, out, base, d, ref, n); });
  const uint64_t base_version = base_[w].version;
  base_[w] = Snapshot{};
  sim.server_update([this, &sim, x = local_[w]->current(), base_version] {
    ExecContext& ctx = sim.exec();
    const size_t n = store_->size();
    const float a = float(c_.alpha * c_.weight(store_->version() - base_version));  // a_t = alpha s(t - tau)
    store_->update([&](float* out, const float* in) {
      if (out != in) ops::copy(ctx, out, in, n);
      ops::move_towards(ctx, out, x.data(), a, n);  // w + a (x - w)
    });
    sim.updated();
  });
}

// A round: every live slot draws a client; with none available at all, the round waits
// for the first to come.
void FederatedEngine::start_round(Runtime& sim) {
  reported_.clear();
  for (int w = 0; w < sim.workers(); ++w)
    if (sim.worker_alive(w)) start_job(sim, w);
  round_open_ = !none_in_job(sim);
}

bool FederatedEngine::none_in_job(const Runtime& sim) const {
  for (int v = 0; v < sim.workers(); ++v)
    if (in_job_[v]) return false;
  return true;
}

void FederatedEngine::on_timer(Runtime& sim, const Timer& e) {
  if (e.payload != kWaitForClient || sim.stopping()) return;
  if (c_.rule == Rule::FedAvg) {
    if (!round_open_ && !averaging_) start_round(sim);  // (the other slots' timers find it open)
  } else if (!in_job_[e.worker] && sim.worker_alive(e.worker)) {
    start_job(sim, e.worker);
  }
}

// fedavg: the round's reports are in; the clients still training are cancelled (their
// deltas would come too late), and the server averages the reported deltas as one update.
void FederatedEngine::finish_round(Runtime& sim) {
  if (!round_open_) return;
  round_open_ = false;
  for (int w = 0; w < sim.workers(); ++w)
    if (in_job_[w]) {
      sim.cancel(w);
      in_job_[w] = false;
    }
  averaging_ = true;
  sim.iteration_done(sim.now() - round_start_);
  round_start_ = sim.now();
  sim.server_update([this, &sim] {
    averaging_ = false;
    ExecContext& ctx = sim.exec();
    const size_t n = store_->size();
    double total = 0;
    for (int w : reported_) total += double(sim.client_samples(client_[w]));
    // sum_k (n_k / total) lr_ref_k D_k, summed in slot order (the arrival order varies with
    // the clients' speeds; the sum must not)
    std::vector<int> order = reported_;
    std::sort(order.begin(), order.end());
    parts_.clear();
    for (int w : order) {
      ops::scale(ctx, disp_[w].data(), float(double(sim.client_samples(client_[w])) / total) * lr_ref_[w], n);
      parts_.push_back(disp_[w].data());
    }
    for (auto& b : base_) b = Snapshot{};
    if (!parts_.empty()) server_->apply_sum(sim, *store_, parts_, 1.0f, float(c_.server_lr));
    sim.updated();
    if (!sim.stopping()) start_round(sim);
  });
}

void FederatedEngine::on_worker_down(Runtime& sim, int w) {
  const bool was_in_job = in_job_[w];
  in_job_[w] = false;  // its client's job is lost (the runtime frees the client)
  base_[w] = Snapshot{};
  if (c_.rule != Rule::FedAvg || !was_in_job || !round_open_) return;
  if (none_in_job(sim)) {
    if (reported_.empty())
      round_open_ = false;  // nobody: wait for a slot to come back
    else
      finish_round(sim);
  }
}

void FederatedEngine::on_worker_up(Runtime& sim, int w) {
  if (sim.stopping()) return;
  if (asynchronous()) {
    if (!in_job_[w]) start_job(sim, w);
    return;
  }
  if (!round_open_ && !averaging_) start_round(sim);  // else it joins the next round
}

// The keys the three rules share, then each rule's own.
std::vector<Field<FederatedConfig>> shared_fields() {
  using C = FederatedConfig;
  return {
      field(&C::local_steps,
            keys::integer("local_steps", 1, "H: the client's local steps of train.optimizer per job (1: one gradient)",
                          1, 1000000)),
      field(&C::local_epochs, keys::num("local_epochs", 0.0,
                                        "E > 0: a job is ceil(E x the client's samples / train.batch_size) local "
                                        "steps instead of local_steps (FedAvg's E)",
                                        0, false, 1e6)),
      field(&C::server_lr, keys::num("server_lr", 1.0, "the server's step size on the aggregated delta", 0, true)),
      field(&C::server_momentum, keys::num("server_momentum", 0.0,
                                           "the server's heavy-ball momentum on the aggregated delta (FedAvgM; "
                                           "FedBuff's server optimizer)",
                                           0, false, 0.999999)),
  };
}

EngineCost federated_cost(const FederatedConfig& c, int workers) {
  const double h = std::max(1, c.local_steps);
  const double per_update = c.rule == Rule::FedAvg    ? double(c.report > 0 ? c.report : workers) * h
                            : c.rule == Rule::FedBuff ? double(c.k) * h
                                                      : h;
  return EngineCost{2 / h, per_update, 4, /*optimizer_per_worker=*/true};
}

// Their pushes are models' deltas, not gradients: compression would not be applied; a
// population is what they run on.
void check_federated(const FederatedConfig& c, const EngineRunView& run, Validator& v) {
  refuse_compression(run, "a federated client pushes its model's delta, not a gradient", v);
  if (c.rule == Rule::FedAvg && run.workers && c.report > *run.workers)
    v.error("engine.report", std::to_string(c.report) + " reports per round from " + std::to_string(*run.workers) +
                                 " slots (cluster.workers): at most as many as slots");
}

void refuse_real(const FederatedConfig&, Validator& v) {
  v.error("engine.type",
          "the federated engines run on a population of clients, which asgdsim cluster does not "
          "simulate (use asgdsim run)");
}

template <class Extra>
EngineType federated_type(const char* name, Rule rule, const char* doc, Extra extra) {
  using C = FederatedConfig;
  std::vector<Field<C>> fields = shared_fields();
  extra(fields);
  const std::string type = name;
  EngineType t = engine_type<C>(name, doc, std::move(fields),
                                {[type, rule](const C& c) {
                                   C bound = c;
                                   bound.rule = rule;
                                   return std::make_unique<FederatedEngine>(type, bound);
                                 },
                                 [rule](const C& c, int workers) {
                                   C bound = c;
                                   bound.rule = rule;
                                   return federated_cost(bound, workers);
                                 },
                                 [rule](const C& c, const EngineRunView& run, Validator& v) {
                                   C bound = c;
                                   bound.rule = rule;
                                   check_federated(bound, run, v);
                                 },
                                 refuse_real});
  t.population = true;
  t.needs_population = true;
  t.departures = true;
  return t;
}

}  // namespace

EngineType fedavg_engine_type() {
  using C = FederatedConfig;
  return federated_type("fedavg", Rule::FedAvg,
                        "FedAvg (McMahan et al. 2017): rounds; every slot trains a drawn client from w, the round "
                        "takes the first `report` deltas (over-selection: the rest are cancelled) and w moves by "
                        "server_lr times their sample-weighted mean (FedAvgM with server_momentum)",
                        [](std::vector<Field<C>>& f) {
                          f.push_back(field(&C::report, keys::integer("report", 0,
                                                                      "deltas a round takes, the first to arrive "
                                                                      "(0: every slot's; fewer: over-selection, the "
                                                                      "late clients cancelled)",
                                                                      0, 1000000)));
                        });
}

EngineType fedbuff_engine_type() {
  using C = FederatedConfig;
  return federated_type(
      "fedbuff", Rule::FedBuff,
      "FedBuff (Nguyen et al. 2022): clients train asynchronously and push their deltas; the server buffers k of "
      "them, each weighted by s(tau) (1/sqrt(1+tau)), and applies their mean with server_lr and server_momentum",
      [](std::vector<Field<C>>& f) {
        f.push_back(field(&C::k, keys::integer("k", 10, "K: deltas per server update", 1, 1000000)));
        f.push_back(field<C>(
            keys::str("aggregate", "mean", "mean: the buffer divided by K (Nguyen et al. 2022, Algorithm 1); sum: not",
                      {"mean", "sum"}),
            [](C& c, const json& v) { c.sum = v == "sum"; }, [](const C& c) { return json(c.sum ? "sum" : "mean"); }));
        for (auto& x : staleness_weight_fields(&C::weight, "inverse_sqrt")) f.push_back(std::move(x));
      });
}

EngineType fedasync_engine_type() {
  using C = FederatedConfig;
  return federated_type(
      "fedasync", Rule::FedAsync,
      "FedAsync (Xie et al. 2019): each client's model is mixed into w on arrival, w <- (1 - a_t) w + a_t x, "
      "a_t = alpha s(tau) (polynomial or hinge staleness function)",
      [](std::vector<Field<C>>& f) {
        f.push_back(field(&C::alpha, keys::num("alpha", 0.6,
                                               "alpha: the mixing weight of a fresh client's model "
                                               "(Xie et al. 2019 use 0.6 to 0.9)",
                                               0, true, 1)));
        for (auto& x : staleness_weight_fields(&C::weight, "polynomial")) f.push_back(std::move(x));
      });
}

}  // namespace asgd
