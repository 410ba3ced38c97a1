// engines/server_update.h — how a parameter server applies a gradient to the model of
// record with its one optimizer state (engines/optimizer.h: plain SGD, heavy-ball or
// Nesterov momentum, Adam, AdamW; one state whatever the worker count: a stale gradient
// goes through the same state, one optimizer step per update); and how several
// workers' contributions are combined first (summed in worker-index order, then weighted
// for train.aggregate). One piece of code for every server-based engine (async, sync,
// sync_backup, ssp, local_sgd and the single-replica warm-up).
#pragma once
#include <algorithm>
#include <cmath>
#include <iterator>
#include <stdexcept>
#include <vector>
#include "engines/optimizer.h"
#include "kernels/ops.h"
#include "sim/core/parameter_store.h"
#include "sim/core/runtime.h"

namespace asgd {

// A sparse model's gradient (GradientJob::touched): the server then updates only the table
// rows it touches and the dense part, through the row forms of the same kernels. Every
// other row's gradient is exactly +0, where the dense step gives w - lr * 0 = w, the
// same bits, for a finite lr >= 0 (so the sparse path is taken only then); DC-ASGD's
// term lambda g g (w - backup) is 0 there too while w - backup is finite (a diverged run
// with infinite parameters is where the two could differ: NaN against inf).
// Momentum keeps the dense heavy-ball semantics: every row's velocity decays every update,
// so every row with a non-zero velocity changes. A row's velocity is +0 until a gradient
// first touches it (and then seldom returns to exactly 0: mu times the smallest subnormal
// rounds back to it for mu > 0.5), so the server steps the rows touched so far (`live_`)
// and the dense part: the dense result bit for bit (v = mu * 0 + 0 = +0, w - lr * 0 = w
// elsewhere), at a cost that grows with the rows ever touched, up to the whole table.
// Nesterov momentum likewise (w - lr * (0 + mu * 0) = w). Adam is dense Adam, not lazy
// Adam: every row's moments decay every update, and the same argument holds (m = v = +0
// on a row no gradient has touched gives d = 0 / (sqrt(0) + eps) = 0, eps > 0, so
// w - lr * 0 = w), so the rows touched so far and the dense part are stepped, with the
// update's one step count t for the bias corrections. Weight decay (adam's L2, adamw's
// decoupled decay) moves every row every update: then every step is dense.
class ServerUpdate {
 public:
  explicit ServerUpdate(const OptimizerSpec& optimizer) : opt_(optimizer) {}

  // One optimizer step with rate lr (sgd: w <- w - lr * g; see Optimizer).  g is (store.size()).
  // rows: the table rows g touches (null: dense).
  void apply(Runtime& sim, ParameterStore& store, const float* g, float lr,
             const std::vector<int32_t>* rows = nullptr) {
    const size_t n = store.size();
    ExecContext& ctx = sim.exec();
    prepare(n);
    opt_.begin_step(lr);
    if (sparse(store, rows, lr)) {
      const std::vector<int32_t>& step_rows = rows_to_step(*rows);
      const ops::Rows r{step_rows.data(), step_rows.size(), store.layout().width};
      store.update_rows(ctx, step_rows, [&](float* out, const float* in) {
        opt_.step(ctx, r, out, in, g);
        const size_t t = table(store);
        opt_.step(ctx, out + t, in + t, g + t, t, n - t);
      });
      return;
    }
    if (opt_.stateful()) dense_state_ = true;
    store.update([&](float* out, const float* in) { opt_.step(ctx, out, in, g, 0, n); });
  }

  // Delay-compensated step (DC-ASGD, Zheng et al. 2017):
  //   w <- w - lr * (g + lambda * g (.) g (.) (w - backup)),
  // backup = the parameters the gradient was computed on (read, (store.size())).
  // Plain SGD only: the validator refuses delay compensation with train.momentum > 0 or
  // another optimizer.
  void apply_delay_compensated(Runtime& sim, ParameterStore& store, const float* g, const float* backup, float lr,
                               float lambda, const std::vector<int32_t>* rows = nullptr) {
    if (opt_.stateful())
      throw std::invalid_argument(
          "delay compensation is implemented for plain SGD (train.optimizer sgd, "
          "train.momentum 0)");
    size_t n = store.size();
    ExecContext& ctx = sim.exec();
    if (sparse(store, rows, lr) && std::isfinite(lambda)) {
      const ops::Rows r{rows->data(), rows->size(), store.layout().width};
      store.update_rows(ctx, *rows, [&](float* out, const float* in) {
        ops::dc_sgd_step(ctx, r, out, in, g, backup, lr, lambda);
        const size_t t = table(store);
        ops::dc_sgd_step(ctx, out + t, in + t, g + t, backup + t, lr, lambda, n - t);
      });
      return;
    }
    store.update([&](float* out, const float* in) { ops::dc_sgd_step(ctx, out, in, g, backup, lr, lambda, n); });
  }

  // One update from several workers' contributions: g = weight * (parts[0] + parts[1] + ...),
  // summed left to right in the order given (callers pass worker-index order, so the
  // result does not depend on arrival order or thread count), then apply(g, lr).
  // parts are (store.size()) each; the sum is formed in parts[0], which is overwritten.
  // Every step is elementwise, so it runs block by block (sum, weight and step while the
  // block's slices are in cache: each part is read once) with the blocks split over the
  // worker pool, idle while the engine waits for this update; the bits are the same as
  // one pass after another over the whole vector.
  // rows (empty: dense parts): rows[i] the table rows parts[i] touches (null: dense).
  // When every part is sparse, only the union of their rows is summed, weighted and
  // stepped (parts[0] is then summed into only there): a part is +0 outside its rows, so
  // the dense sum is +0 there too.
  void apply_sum(Runtime& sim, ParameterStore& store, const std::vector<float*>& parts, float weight, float lr,
                 const std::vector<const std::vector<int32_t>*>& rows = {}) {
    const size_t n = store.size();
    float* acc = parts.front();
    prepare(n);
    opt_.begin_step(lr);
    if (rows.size() == parts.size() && weight > 0.0f && std::isfinite(weight) && union_of(store, rows, lr)) {
      ExecContext& ctx = sim.exec();
      const size_t t = table(store), width = store.layout().width;
      const ops::Rows u{union_.data(), union_.size(), width};
      for (size_t i = 1; i < parts.size(); ++i) {
        ops::add_into(ctx, u, acc, parts[i]);
        ops::add_into(ctx, acc + t, parts[i] + t, n - t);
      }
      if (weight != 1.0f) {
        ops::scale(ctx, u, acc, weight);
        ops::scale(ctx, acc + t, weight, n - t);
      }
      const std::vector<int32_t>& step_rows = rows_to_step(union_);
      const ops::Rows r{step_rows.data(), step_rows.size(), width};
      store.update_rows(ctx, step_rows, [&](float* out, const float* in) {
        opt_.step(ctx, r, out, in, acc);
        opt_.step(ctx, out + t, in + t, acc + t, t, n - t);
      });
      return;
    }
    if (opt_.stateful()) dense_state_ = true;
    store.update([&](float* out, const float* in) {
      sim.for_each_block(n, [&](ExecContext& ctx, size_t b, size_t e) {
        const size_t len = e - b;
        for (size_t i = 1; i < parts.size(); ++i) ops::add_into(ctx, acc + b, parts[i] + b, len);
        if (weight != 1.0f) ops::scale(ctx, acc + b, weight, len);
        opt_.step(ctx, out + b, in + b, acc + b, b, len);
      });
    });
  }

  // A checkpoint of the optimizer's state and the rows it has stepped.
  void checkpoint(StateArchive& a) {
    opt_.checkpoint(a);
    a.io(prepared_for_);
    a.io(live_);
    a.io(is_live_);
    a.io(dense_state_);
  }

 private:
  // The optimizer's state starts at 0 (stateful optimizers only).
  void prepare(size_t n) {
    if (opt_.stateful() && n != prepared_for_) {
      opt_.prepare(n);
      prepared_for_ = n;
      live_.clear();
      is_live_.clear();
      dense_state_ = false;
    }
  }
  static size_t table(const ParameterStore& store) { return store.layout().rows * store.layout().width; }
  // Whether a gradient with these rows may be applied to its rows only (see the class).
  bool sparse(const ParameterStore& store, const std::vector<int32_t>* rows, float lr) const {
    return rows && !g_force_dense_updates && store.layout().rows > 0 && std::isfinite(lr) && lr >= 0.0f &&
           std::isfinite(opt_.spec().momentum) && !opt_.moves_idle_elements() && !dense_state_;
  }
  // The union of the parts' rows into union_; false when some part is dense.
  bool union_of(const ParameterStore& store, const std::vector<const std::vector<int32_t>*>& rows, float lr) {
    union_.clear();
    for (const auto* r : rows) {
      if (!sparse(store, r, lr)) return false;
      union_.insert(union_.end(), r->begin(), r->end());
    }
    std::sort(union_.begin(), union_.end());
    union_.erase(std::unique(union_.begin(), union_.end()), union_.end());
    return true;
  }
  // The rows a step with gradient rows `rows` changes: those, and with a stateful
  // optimizer every row touched before (whose state may be non-zero).
  const std::vector<int32_t>& rows_to_step(const std::vector<int32_t>& rows) {
    if (!opt_.stateful()) return rows;
    bool grew = false;
    for (int32_t r : rows) {
      if (size_t(r) >= is_live_.size()) is_live_.resize(size_t(r) + 1, 0);
      if (!is_live_[size_t(r)]) is_live_[size_t(r)] = 1, grew = true;
    }
    if (grew) {
      merged_.clear();
      std::set_union(live_.begin(), live_.end(), rows.begin(), rows.end(), std::back_inserter(merged_));
      live_.swap(merged_);
    }
    return live_;
  }

  Optimizer opt_;
  size_t prepared_for_ = size_t(-1);
  std::vector<int32_t> live_;            // stateful: the table rows touched so far, ascending
  std::vector<uint8_t> is_live_;         // (by row) whether in live_
  bool dense_state_ = false;             // a dense gradient was applied with state: every row may move
  std::vector<int32_t> merged_, union_;  // scratch
};

// Weight of one worker's contribution when `count` are combined: 1/count for
// train.aggregate = mean, 1 for sum.
inline float aggregate_weight(const Runtime& sim, int count) {
  return sim.settings().aggregate_sum ? 1.0f : 1.0f / float(count);
}

// A checkpoint of a server's store and optimizer state (Engine::checkpoint): read back,
// both are made first, as start() makes them (a store of `history` versions with the
// model's row table, the configured optimizer), then filled. Ptr: the engine's unique_ptr
// or shared_ptr to its ServerUpdate.
template <class Ptr>
void checkpoint_server(Runtime& sim, StateArchive& a, size_t history, std::unique_ptr<ParameterStore>& store,
                       Ptr& server) {
  if (!a.saving()) {
    store = std::make_unique<ParameterStore>(std::vector<float>(sim.num_params()), history, sim.model().row_layout());
    server = Ptr(new ServerUpdate(sim.settings().optimizer));
  }
  store->checkpoint(a);
  server->checkpoint(a);
}

// One update from gradient jobs collected for it (k_batch_sync's K, mindflayer's round):
// sorted by (worker, step), so the sum depends on neither arrival ties nor the thread
// count; each reported applied with its staleness against `store` (before the rate is
// read: its samples count); summed with train.aggregate's weight through `server`; given
// back. `jobs` is left empty.
inline void apply_gradient_jobs(Runtime& sim, ParameterStore& store, ServerUpdate& server,
                                std::vector<std::unique_ptr<GradientJob>>& jobs) {
  std::sort(jobs.begin(), jobs.end(), [](const auto& a, const auto& b) {
    return a->worker != b->worker ? a->worker < b->worker : a->step < b->step;
  });
  std::vector<float*> parts;
  std::vector<const std::vector<int32_t>*> rows;
  for (auto& job : jobs) {
    parts.push_back(job->grad.data());
    rows.push_back(job->touched());
    sim.applied(*job, store.version() - job->read_version);
  }
  server.apply_sum(sim, store, parts, aggregate_weight(sim, int(jobs.size())), float(sim.lr()), rows);
  for (auto& job : jobs) sim.recycle(std::move(job));
  jobs.clear();
}

}  // namespace asgd
