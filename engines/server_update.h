// engines/server_update.h — how a parameter server applies a gradient to the model of
// record: plain SGD, or heavy-ball momentum with a server-side velocity; and how several
// workers' contributions are combined first (summed in worker-index order, then weighted
// for train.aggregate). One piece of code for every server-based engine (async, sync,
// sync_backup, ssp, local_sgd and the single-replica warm-up).
#pragma once
#include <stdexcept>
#include <vector>
#include "kernels/ops.h"
#include "sim/parameter_store.h"
#include "sim/runtime.h"

namespace asgd {

class ServerUpdate {
 public:
  explicit ServerUpdate(double momentum) : momentum_(float(momentum)) {}

  // w <- w - lr * g   (or v <- mu v + g; w <- w - lr v).  g is (store.size()).
  void apply(Runtime& sim, ParameterStore& store, const float* g, float lr) {
    const size_t n = store.size();
    ExecContext& ctx = sim.exec();
    prepare(n);
    store.update([&](float* out, const float* in) { step(ctx, out, in, g, lr, 0, n); });
  }

  // Delay-compensated step (DC-ASGD, Zheng et al. 2017):
  //   w <- w - lr * (g + lambda * g (.) g (.) (w - backup)),
  // backup = the parameters the gradient was computed on (read, (store.size())).
  // Plain SGD only: the validator refuses delay compensation with train.momentum > 0.
  void apply_delay_compensated(Runtime& sim, ParameterStore& store, const float* g,
                               const float* backup, float lr, float lambda) {
    if (momentum_ > 0.0f)
      throw std::invalid_argument("delay compensation is implemented for plain SGD (train.momentum = 0)");
    size_t n = store.size();
    ExecContext& ctx = sim.exec();
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
  void apply_sum(Runtime& sim, ParameterStore& store, const std::vector<float*>& parts,
                 float weight, float lr) {
    const size_t n = store.size();
    float* acc = parts.front();
    prepare(n);
    store.update([&](float* out, const float* in) {
      sim.for_each_block(n, [&](ExecContext& ctx, size_t b, size_t e) {
        const size_t len = e - b;
        for (size_t i = 1; i < parts.size(); ++i) ops::add_into(ctx, acc + b, parts[i] + b, len);
        if (weight != 1.0f) ops::scale(ctx, acc + b, weight, len);
        step(ctx, out + b, in + b, acc + b, lr, b, len);
      });
    });
  }

 private:
  // The velocity starts at 0 (momentum only).
  void prepare(size_t n) {
    if (momentum_ > 0.0f && velocity_.size() != n) {
      velocity_.resize_discard(n);
      velocity_.fill(0.0f);
    }
  }
  // The rule on elements [b, b + len): out, in and g point at element b.
  void step(ExecContext& ctx, float* out, const float* in, const float* g, float lr, size_t b,
            size_t len) {
    if (momentum_ > 0.0f) ops::momentum_step(ctx, out, in, velocity_.data() + b, g, lr, momentum_, len);
    else ops::sgd_step(ctx, out, in, g, lr, len);
  }

  float momentum_;
  DeviceArray<float> velocity_;
};

// Weight of one worker's contribution when `count` are combined: 1/count for
// train.aggregate = mean, 1 for sum.
inline float aggregate_weight(const Runtime& sim, int count) {
  return sim.settings().aggregate_sum ? 1.0f : 1.0f / float(count);
}

}  // namespace asgd
