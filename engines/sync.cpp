// engines/sync.cpp — synchronous SGD, with or without backup replicas (Chen, Pan, Monga,
// Bengio & Jozefowicz 2016, arXiv 1604.00981).
// Every iteration the idle workers read the current parameters w and compute on their
// own minibatch (taken from the run's sample stream in worker order, so with all N
// workers starting together worker i gets slice i of the next N*M ids). The server
// aggregates the first N - b gradients of the iteration, summed in worker-index order:
//   w <- w - lr * (1/(N-b)) sum_i g_i     (no 1/(N-b) with aggregate = sum)
// and starts the next iteration on the new w. The b late gradients are dropped when they
// arrive (counted per worker); their workers then join the iteration in progress.
// b = 0 is plain sync: N workers x batch M compute what 1 worker x batch N*M computes.
// late "cancel" (sync_backup; Dutta, Joshi, Ghosh, Dube & Nagpurkar 2018's K-sync, K = N - b):
// when the iteration's last needed gradient arrives, the workers still computing for it
// abandon their step (Runtime::cancel: their time so far is wasted_time, an unsent push is
// never sent) and are idle at once, so every worker starts the next iteration together, on
// the new w. Nothing is then dropped. b = 0 cancels nothing: it is sync bit for bit.
// Failures: a failed worker's gradient is lost, so an iteration also ends once every
// gradient still in flight for it has arrived (sync waits for the live workers only).
// Messages and time: a worker pulls w when it starts (or joins) an iteration, computes and
// pushes its gradient. The iteration ends when its last needed gradient arrives
// (iteration_time runs from one such end to the next); the server then applies the
// aggregate as one update (Runtime::server_update), and only when that is done do the
// idle workers pull the new w: a late gradient arriving meanwhile is dropped and its worker
// waits for the update too.
// With a collective (comm allreduce or hierarchical, or host placement over several boxes:
// docs/architecture.md, "Collectives") the workers keep replicas instead of pulling: a
// step sends nothing; when the iteration's needed gradients are computed, the workers that
// computed them (the members) run the collective, then the update is applied (every
// replica applies the same aggregate: update_seconds once, for all), and the members start
// the next iteration on it. Under sync_backup the collective is among the first N - b
// finishers only; a late worker's gradient is dropped and it gets the current parameters
// in one message (from its box's host, or the nearest member before it in worker order)
// before it joins the iteration in progress.
#include "engines/sync.h"
#include "engines/engine_registry.h"
#include "engines/powersgd.h"
#include "engines/server_update.h"
#include "sim/net/catalog.h"
#include "sim/net/message_size.h"

namespace asgd {
namespace {
constexpr uint64_t kApplyAfterCollective = 1;  // timer payloads
constexpr uint64_t kLaunchAfterBroadcast = 2;
}  // namespace

namespace {
// The synchronous family's communication (docs/architecture.md, "Collectives").
Field<SyncConfig> comm_field() {
  return field(
      &SyncConfig::comm,
      keys::str("comm", "ps",
                "how an iteration's gradients are combined: \"ps\" the parameter server (each worker pulls "
                "and pushes); \"allreduce\" a ring all-reduce among the aggregated workers; \"hierarchical\" "
                "reduce to each box's host, ring among the hosts, broadcast (needs cluster.topology.type \"boxes\")",
                {"ps", "allreduce", "hierarchical"}));
}

// Checks both members share: a hierarchical all-reduce needs boxes; a collective (and the
// host exchange) sends no pushed gradient, so it cannot compress one.
void check_comm(const SyncConfig& c, const EngineRunView& run, Validator& v) {
  if (c.comm == "hierarchical" && !run.topology.hosts)
    v.error("engine.comm",
            "\"hierarchical\" reduces within each box: it needs a topology with boxes "
            "(cluster.topology.type \"boxes\")");
  const bool collective = c.comm != "ps";
  const bool host_exchange = !collective && run.host_placement && run.topology.boxes > 1;
  if (collective)
    refuse_compression(run, "comm " + json(c.comm).dump() + " sums gradients in a collective, not pushes", v);
  else if (host_exchange)
    refuse_compression(run, "placement \"host\" over several boxes exchanges each box's sum, not pushes", v);
  if (!collective && run.compression == "powersgd")
    v.error("cluster.network.compression.type",
            "\"powersgd\" compresses an all-reduce: set the engine's comm to \"allreduce\" or \"hierarchical\" "
            "(comm \"ps\" pushes each gradient to the servers)");
}

std::unique_ptr<Engine> build(const SyncConfig& c) { return std::make_unique<SyncEngine>(c); }
std::unique_ptr<Engine> build_backup(SyncConfig c) {
  c.type = "sync_backup";
  return std::make_unique<SyncEngine>(c);
}
// An iteration: the aggregated gradients (every worker's, counting the backups' dropped
// ones as computed), one update.
EngineCost iteration_cost(const SyncConfig&, int workers) { return EngineCost{2, double(workers), 2}; }
// A real run exchanges through the parameter-server rank, and a worker rank cannot
// abandon a step under way: collectives and cancelling are simulated only.
void check_real(const SyncConfig& c, Validator& v) {
  if (c.comm != "ps")
    v.error("engine.comm", json(c.comm).dump() +
                               ": a real run exchanges through the parameter-server rank "
                               "(collectives are simulated only; use \"ps\")");
  if (c.cancel_late) refuse_cancel_in_real_run(v);
}
}  // namespace

EngineType sync_engine_type() {
  EngineType t = engine_type<SyncConfig>(
      "sync", "synchronous SGD: all workers compute on the same parameters; apply the mean once all arrive",
      {comm_field()}, {build, iteration_cost, check_comm, check_real});
  t.sums_across_boxes = true;
  t.all_reduces = true;
  t.population = true;  // each iteration's steps draw their clients (FedSGD)
  return t;
}

EngineType sync_backup_engine_type() {
  EngineType t = engine_type<SyncConfig>(
      "sync_backup",
      "synchronous SGD with b backup replicas (Chen et al. 2016): apply the mean of the first "
      "workers - b gradients, drop the late ones",
      {field(&SyncConfig::backups,
             keys::integer("backups", 1, "b: replicas whose late gradients are dropped (< workers)", 0)),
       field<SyncConfig>(
           keys::str("late", "drop",
                     "what happens to the b gradients an iteration does not need: \"drop\" them when "
                     "they arrive (Chen et al. 2016); \"cancel\" the steps under way when the "
                     "iteration ends, all workers start the next one (K-sync, Dutta et al. 2018)",
                     {"drop", "cancel"}),
           [](SyncConfig& c, const json& v) { c.cancel_late = v == "cancel"; },
           [](const SyncConfig& c) { return json(c.cancel_late ? "cancel" : "drop"); }),
       comm_field()},
      {build_backup, iteration_cost,
       [](const SyncConfig& c, const EngineRunView& run, Validator& v) {
         if (run.workers && c.backups >= *run.workers)
           v.error("engine.backups", "must be < cluster.workers (" + std::to_string(*run.workers) +
                                         "): at least one gradient is aggregated per iteration; got " +
                                         std::to_string(c.backups));
         check_comm(c, run, v);
       },
       check_real});
  t.sums_across_boxes = true;
  t.all_reduces = true;
  return t;
}

SyncEngine::SyncEngine(const SyncConfig& config)
    : type_(config.type), comm_key_(config.comm), backups_(config.backups), cancel_late_(config.cancel_late) {}

SyncEngine::~SyncEngine() = default;

void SyncEngine::start(Runtime& sim) {
  configure(sim, sim.initial_params());
  current_.assign(sim.workers(), true);  // every replica starts from the initial parameters
  iteration_start_ = sim.now();
  launch_idle(sim);
}

void SyncEngine::configure(Runtime& sim, const std::vector<float>& init) {
  store_ = std::make_unique<ParameterStore>(init, sim.history_needed(), sim.model().row_layout());
  server_ = std::make_unique<ServerUpdate>(sim.settings().optimizer);
  accepted_.resize(sim.workers());
  busy_.assign(sim.workers(), false);
  computing_.assign(sim.workers(), false);
  needed_ = sim.workers() - backups_;
  const std::string& comm = comm_key_;
  const ClusterSpec& topo = sim.settings().topology;
  if (comm == "allreduce")
    comm_ = Comm::AllReduce;
  else if (comm == "hierarchical")
    comm_ = Comm::Hierarchical;
  else if (comm != "ps")
    throw std::invalid_argument("sync: comm must be ps, allreduce or hierarchical");
  else if (topo.host_placement && topo.boxes > 1)
    comm_ = Comm::HostExchange;
  if (comm_ == Comm::Hierarchical && !sim.topology().has_hosts())
    throw std::invalid_argument("sync: comm hierarchical needs a topology with boxes");
  const CompressionSpec& compression = sim.settings().compression;
  if (compression.type == CompressionSpec::Type::PowerSgd &&
      (comm_ == Comm::AllReduce || comm_ == Comm::Hierarchical)) {
    const size_t n = sim.num_params();
    powersgd_ = std::make_unique<PowerSgd>(sim.model().param_blocks(), n, compression, sim.workers());
    powersgd_->draw_q(sim.settings().seed);
    const NetworkSpec& net = sim.settings().network;
    const size_t values[3] = {powersgd_->values_uncompressed(), powersgd_->values_p(), powersgd_->values_q()};
    for (int k = 0; k < 3; ++k)
      powersgd_bytes_[k] = scaled_message_bytes(net, n, double(values[k]) * net.bytes_per_value);
  } else if (compression.type == CompressionSpec::Type::PowerSgd) {
    throw std::invalid_argument("sync: compression powersgd needs comm allreduce or hierarchical");
  }
  if (needed_ < 1) throw std::invalid_argument("sync_backup: backups must be < cluster.workers");
}

void SyncEngine::checkpoint(Runtime& sim, StateArchive& a) {
  a.tag("sync");
  if (!a.saving()) configure(sim, std::vector<float>(sim.num_params()));
  store_->checkpoint(a);
  server_->checkpoint(a);
  asgd::checkpoint(a, accepted_, pull_stores());
  if (accepted_.size() != size_t(sim.workers())) a.fail("the iteration's gradients do not match the workers");
  a.io(current_);
  a.io(members_);
  a.io(busy_);
  a.io(computing_);
  a.io(pending_);
  a.io(received_);
  a.io(iteration_);
  a.io(iteration_start_);
  a.io(updating_);
  bool powersgd = bool(powersgd_);
  a.io(powersgd);
  if (powersgd != bool(powersgd_)) a.fail("PowerSGD's state does not match this run's compression");
  if (powersgd_) powersgd_->checkpoint(a);
}

void SyncEngine::launch_idle(Runtime& sim) {
  if (updating_) return;  // the server is applying the last iteration: pull after it
  caught_up_.clear();
  for (int w = 0; w < sim.workers(); ++w) {
    if (busy_[w] || !sim.worker_alive(w)) continue;
    Step step = sim.next_step(w, ids_);
    step.tag = iteration_;
    if (comm_ == Comm::Ps) {
      step.pull = store_.get();
      step.gradient = true;  // the push is this gradient (sparse rows, compression)
    } else {                 // its own replica; one message first if it is behind
      step.own = store_->current();
      step.push = false;
      if (!current_[w]) {
        const int source = catch_up_source(sim, w);
        step.reply = source != kNoSource;
        step.reply_from = source;
        caught_up_.push_back(w);
      }
    }
    sim.launch(step);
    busy_[w] = true;
    computing_[w] = true;
    ++pending_;
  }
  for (int w : caught_up_) current_[w] = true;  // (after the loop: none is another's source)
}

void SyncEngine::on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) {
  int w = job->worker;
  if (computing_[w]) --pending_;  // (set only for jobs of the current iteration)
  computing_[w] = false;
  if (job->tag != iteration_ || received_ >= needed_) {  // late: its iteration is over
    busy_[w] = false;                                    // it pulls and joins the current one
    sim.dropped(*job);
    sim.recycle(std::move(job));
    launch_idle(sim);
    return;
  }
  accepted_[w] = std::move(job);
  ++received_;
  finish_if_complete(sim);
}

void SyncEngine::finish_if_complete(Runtime& sim) {
  if (received_ >= needed_ || (received_ > 0 && pending_ == 0)) finish_iteration(sim);
}

int SyncEngine::catch_up_source(const Runtime& sim, int w) const {
  switch (comm_) {
    case Comm::Hierarchical:
      return box_host(sim.topology().box_of(w));
    case Comm::HostExchange:
      return kServer;  // under host placement: the GPU's own host
    default:
      break;
  }
  // The nearest live worker before w (cyclically) whose replica is current; if every
  // replica holding the parameters failed, the nearest live one (a simplification: the
  // model of record survives), and none if w is alone.
  const int n = sim.workers();
  for (int pass = 0; pass < 2; ++pass)
    for (int k = 1; k < n; ++k) {
      const int p = (w - k + n) % n;
      if (sim.worker_alive(p) && (pass == 1 || current_[p])) return p;
    }
  return kNoSource;
}

void SyncEngine::on_timer(Runtime& sim, const Timer& e) {
  if (e.payload == kApplyAfterCollective) {
    sim.server_update([this, &sim] { apply_iteration(sim); });
  } else if (e.payload == kLaunchAfterBroadcast) {
    updating_ = false;
    launch_idle(sim);
  }
}

void SyncEngine::on_worker_down(Runtime& sim, int w) {
  current_[w] = false;  // its replica is gone (collectives)
  if (computing_[w]) {  // its gradient for this iteration is lost
    computing_[w] = false;
    busy_[w] = false;
    --pending_;
  } else if (!accepted_[w]) {
    busy_[w] = false;  // a late gradient of an older iteration: lost too
  }
  finish_if_complete(sim);
}

void SyncEngine::finish_iteration(Runtime& sim) {
  sim.iteration_done(sim.now() - iteration_start_);
  iteration_start_ = sim.now();
  if (cancel_late_)  // every step still under way (for this iteration) is abandoned now
    for (int w = 0; w < sim.workers(); ++w)
      if (busy_[w] && !accepted_[w] && sim.worker_alive(w)) {
        sim.cancel(w);
        busy_[w] = false;  // starts the next iteration with the others
      }
  ++iteration_;
  received_ = 0;
  pending_ = 0;  // gradients still in flight belong to the old iteration: they will be dropped
  std::fill(computing_.begin(), computing_.end(), false);
  updating_ = true;
  if (comm_ == Comm::Ps) {
    sim.server_update([this, &sim] { apply_iteration(sim); });
    return;
  }
  members_.clear();
  for (int w = 0; w < sim.workers(); ++w)
    if (accepted_[w]) members_.push_back(w);
  const Collective kind = comm_ == Comm::AllReduce      ? Collective::RingAllReduce
                          : comm_ == Comm::Hierarchical ? Collective::Hierarchical
                                                        : Collective::HostReduceToServers;
  if (!powersgd_) {
    sim.schedule_timer(sim.collective(kind, members_), 0, kApplyAfterCollective);
    return;
  }
  // PowerSGD: the whole tensors, then P, then Q, one all-reduce after the other (P's
  // orthogonalisation needs the sum of P; Q's product needs it); an empty one is skipped
  SimTime end = sim.now();
  for (double bytes : powersgd_bytes_)
    if (bytes > 0) end = sim.collective(kind, members_, bytes, end, false);
  sim.schedule_timer(end, 0, kApplyAfterCollective);
}

void SyncEngine::apply_iteration(Runtime& sim) {
  parts_.clear();
  part_rows_.clear();
  int count = 0;
  for (auto& job : accepted_) {  // worker-index order: fixed summation order
    if (!job) continue;
    parts_.push_back(job->grad.data());
    part_rows_.push_back(job->touched());
    sim.applied(*job, store_->version() - job->read_version);  // (before the rate: its samples count)
    ++count;
  }
  if (powersgd_) {  // the members' gradients (worker order), compressed and averaged
    inputs_.assign(parts_.begin(), parts_.end());
    reduced_.resize_discard(sim.num_params());
    powersgd_->reduce(sim.exec(), inputs_, members_, reduced_.data());
    parts_.assign(1, reduced_.data());
    server_->apply_sum(sim, *store_, parts_, sim.settings().aggregate_sum ? float(count) : 1.0f, float(sim.lr()));
  } else {
    server_->apply_sum(sim, *store_, parts_, aggregate_weight(sim, count), float(sim.lr()), part_rows_);
  }
  for (auto& job : accepted_) {
    if (!job) continue;
    busy_[job->worker] = false;  // accepted workers wait for the iteration's end
    sim.recycle(std::move(job));
  }
  if (comm_ != Comm::Ps) {  // the members' replicas hold the new parameters, the others' not
    std::fill(current_.begin(), current_.end(), false);
    for (int w : members_) current_[w] = sim.worker_alive(w);
  }
  sim.updated();
  if (comm_ == Comm::HostExchange) {  // the hosts pull the new parameters and broadcast them
    members_.clear();                 // to the GPUs that start the next iteration
    for (int w = 0; w < sim.workers(); ++w)
      if (!busy_[w] && sim.worker_alive(w)) members_.push_back(w);
    std::fill(current_.begin(), current_.end(), false);
    for (int w : members_) current_[w] = true;
    if (!sim.stopping())
      sim.schedule_timer(sim.collective(Collective::ServersToHostsToMembers, members_), 0, kLaunchAfterBroadcast);
    return;
  }
  updating_ = false;
  if (!sim.stopping()) launch_idle(sim);
}

Snapshot SyncEngine::model_of_record() const { return store_->current(); }

}  // namespace asgd
