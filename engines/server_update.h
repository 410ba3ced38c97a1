// engines/server_update.h — how a parameter server applies an aggregated gradient to the
// model of record: plain SGD, or heavy-ball momentum with a server-side velocity. One
// piece of code for every server-based engine.
#pragma once
#include "kernels/ops.h"
#include "sim/parameter_store.h"
#include "sim/simulation.h"

namespace asgd {

class ServerUpdate {
 public:
  explicit ServerUpdate(double momentum) : momentum_(float(momentum)) {}

  // w <- w - lr * g   (or v <- mu v + g; w <- w - lr v)
  void apply(Simulation& sim, ParameterStore& store, const float* g, float lr) {
    size_t n = store.size();
    ExecContext& ctx = sim.exec();
    if (momentum_ > 0.0f) {
      if (velocity_.size() != n) {
        velocity_.resize_discard(n);
        velocity_.fill(0.0f);
      }
      store.update([&](float* out, const float* in) {
        ops::momentum_step(ctx, out, in, velocity_.data(), g, lr, momentum_, n);
      });
    } else {
      store.update([&](float* out, const float* in) { ops::sgd_step(ctx, out, in, g, lr, n); });
    }
  }

 private:
  float momentum_;
  DeviceArray<float> velocity_;
};

}  // namespace asgd
