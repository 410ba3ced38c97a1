// engines/ssp.cpp — stale-synchronous parallel SGD (Ho, Cipar, Cui, Kim, Lee, Gibbons,
// Gibson, Ganger & Xing 2013, "More Effective Distributed ML via a Stale Synchronous
// Parallel Parameter Server"). Worker w's clock c_w counts the gradients it has pushed.
// A worker at clock c may start its next gradient only while the slowest live worker's
// clock is >= c - s (s = `bound`); otherwise it waits, idle. Gradients are applied as
// they arrive, each in full (Ho et al.: a worker's update is added to the shared
// parameters as it is; train.aggregate, which is about combining synchronous gradients,
// does not apply): every read sees every gradient that arrived before it.
//
// How "applied on arrival" is realised, and why s = 0 is exactly sync with aggregate sum:
// when workers may start (the arriving one, or every worker waiting on the slowest clock
// once it advances), the server first applies every gradient that arrived since its last
// update, as one update  w <- w - lr * sum_i g_i  (summed in worker-index order), and the
// workers then pull. A waiting worker computes nothing, so at most one gradient per worker
// is pending. No read can tell this from applying each gradient the moment it arrives;
// what it fixes is the float summation order and how gradients group into updates:
//   s = 0     nobody reads until every live worker has pushed clock c, so each update is
//             one whole clock summed in worker-index order, and the workers then launch in
//             worker order taking their sample ids as sync does: byte-identical to sync
//             with aggregate = sum (messages, server time and counters included).
//   large s   the arriving worker reads again at once, so each update is its own gradient:
//             exactly async.
// Messages: each step pulls the parameters, computes and pushes its gradient; each grouped
// update is one update of the server (Runtime::server_update), and the workers it lets
// go pull once it is done.
// Staleness of a gradient = updates between its read and the update that applies it (so
// it counts grouped updates, as the sync family does). An iteration (summary
// iteration_time) is one advance of the slowest clock.
// Staleness weights (staleness_weight, engines/staleness_weight.h): each gradient of the
// group is scaled by w(its tau) before the sum (the default, none, leaves them untouched).
// Failures: the slowest clock is taken over live workers; a worker that goes down loses
// its gradient in flight and a worker that comes back resumes at the slowest live clock.
#include "engines/ssp.h"
#include <algorithm>
#include <limits>
#include "engines/engine_registry.h"
#include "engines/server_update.h"

namespace asgd {

namespace {
struct SspConfig {
  uint64_t bound{};
  StalenessWeight weight;
};
}  // namespace

EngineType ssp_engine_type() {
  using C = SspConfig;
  std::vector<Field<C>> fields = {
      field(&C::bound, keys::integer("bound", 3, "s: how many clocks a worker may lead the slowest live worker", 0))};
  for (auto& f : staleness_weight_fields(&C::weight)) fields.push_back(std::move(f));
  return engine_type<C>(
      "ssp",
      "stale-synchronous parallel (Ho et al. 2013): a worker may run at most `bound` clocks ahead of the "
      "slowest; gradients are applied as they arrive; bound 0 is sync",
      std::move(fields), {[](const C& c) { return std::make_unique<SspEngine>(c.bound, c.weight); }});
}

SspEngine::SspEngine(uint64_t bound, const StalenessWeight& weight) : bound_(bound), weight_(weight) {}

void SspEngine::start(Runtime& sim) {
  const int n = sim.workers();
  store_ = std::make_unique<ParameterStore>(sim.initial_params(), sim.history_needed(), sim.model().row_layout());
  server_ = std::make_shared<ServerUpdate>(sim.settings().optimizer);
  clock_.assign(n, 0);
  busy_.assign(n, false);
  let_go_.assign(n, false);
  pending_.clear();
  pending_.resize(n);
  pending_count_ = 0;
  slowest_since_ = sim.now();
  find_slowest(sim);
  let_go_ready(sim);
}

void SspEngine::checkpoint(Runtime& sim, StateArchive& a) {
  a.tag("ssp");
  checkpoint_server(sim, a, sim.history_needed(), store_, server_);
  const std::vector<const ParameterStore*> stores = pull_stores();
  asgd::checkpoint(a, pending_, stores);
  uint64_t updates = updates_.size();  // (none between events with no server update under way)
  a.io(updates);
  if (!a.saving()) updates_.resize(size_t(updates));
  for (Update& u : updates_) {
    asgd::checkpoint(a, u.jobs, stores);
    a.io(u.launch);
  }
  a.io(clock_);
  a.io(busy_);
  a.io(let_go_);
  a.io(pending_count_);
  a.io(slowest_);
  a.io(at_slowest_);
  a.io(slowest_since_);
}

bool SspEngine::may_start(int w) const { return clock_[w] <= slowest_ || clock_[w] - slowest_ <= bound_; }

void SspEngine::find_slowest(Runtime& sim) {
  slowest_ = std::numeric_limits<uint64_t>::max();
  at_slowest_ = 0;
  for (int w = 0; w < sim.workers(); ++w) {
    if (!sim.worker_alive(w)) continue;
    if (clock_[w] < slowest_) {
      slowest_ = clock_[w];
      at_slowest_ = 1;
    } else if (clock_[w] == slowest_) {
      ++at_slowest_;
    }
  }
}

void SspEngine::let_go_ready(Runtime& sim) {
  Update u;
  for (int w = 0; w < sim.workers(); ++w)
    if (!busy_[w] && !let_go_[w] && sim.worker_alive(w) && may_start(w)) {
      let_go_[w] = true;
      u.launch.push_back(w);
    }
  if (u.launch.empty() || sim.stopping()) return;
  if (pending_count_ == 0) {  // nothing new to apply first
    if (updates_.empty()) {
      launch_all(sim, u.launch);
    } else {  // but the server is still applying some: read after them
      std::vector<int>& after = updates_.back().launch;
      after.insert(after.end(), u.launch.begin(), u.launch.end());
    }
    return;
  }
  for (auto& job : pending_)  // the reader must see every gradient that has arrived
    if (job) u.jobs.push_back(std::move(job));
  pending_count_ = 0;
  updates_.push_back(std::move(u));
  sim.server_update([this, &sim] { apply_oldest(sim); });
}

void SspEngine::apply_oldest(Runtime& sim) {
  Update u = std::move(updates_.front());
  updates_.pop_front();
  parts_.clear();
  part_rows_.clear();
  for (auto& job : u.jobs) {  // worker-index order: fixed summation order
    const uint64_t tau = store_->version() - job->read_version;
    if (weight_.active()) ops::scale(sim.exec(), job->grad.data(), float(weight_(tau)), job->grad.size());
    parts_.push_back(job->grad.data());
    part_rows_.push_back(job->touched());
    sim.applied(*job, tau);  // (before the rate: its samples count)
  }
  server_->apply_sum(sim, *store_, parts_, 1.0f, float(sim.lr()), part_rows_);  // each worker's update in full
  for (auto& job : u.jobs) sim.recycle(std::move(job));
  sim.updated();
  launch_all(sim, u.launch);
}

void SspEngine::launch_all(Runtime& sim, const std::vector<int>& workers) {
  for (int w : workers) {
    if (!let_go_[w]) continue;  // went down meanwhile
    let_go_[w] = false;
    if (sim.stopping() || !sim.worker_alive(w)) continue;
    Step step = sim.next_step(w, ids_);
    step.pull = store_.get();
    step.gradient = true;  // the push is this gradient (sparse rows, compression)
    sim.launch(step);
    busy_[w] = true;
  }
}

void SspEngine::on_gradient(Runtime& sim, std::unique_ptr<GradientJob> job) {
  const int w = job->worker;
  busy_[w] = false;
  pending_[w] = std::move(job);
  ++pending_count_;
  bool was_slowest = sim.worker_alive(w) && clock_[w] == slowest_;
  ++clock_[w];
  if (was_slowest && --at_slowest_ == 0) {
    // the slowest clock advanced: every waiting worker may be free to go
    sim.iteration_done(sim.now() - slowest_since_);
    slowest_since_ = sim.now();
    find_slowest(sim);
  }
  let_go_ready(sim);
}

void SspEngine::on_worker_down(Runtime& sim, int w) {
  busy_[w] = false;  // its gradient in flight is lost
  let_go_[w] = false;
  find_slowest(sim);
  let_go_ready(sim);
}

void SspEngine::on_worker_up(Runtime& sim, int w) {
  uint64_t others = std::numeric_limits<uint64_t>::max();
  for (int v = 0; v < sim.workers(); ++v)
    if (v != w && sim.worker_alive(v)) others = std::min(others, clock_[v]);
  if (others != std::numeric_limits<uint64_t>::max()) clock_[w] = std::max(clock_[w], others);
  find_slowest(sim);
  let_go_ready(sim);
}

Snapshot SspEngine::model_of_record() const { return store_->current(); }

}  // namespace asgd
