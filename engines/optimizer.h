// engines/optimizer.h — one optimizer state and its update rule (train.optimizer: sgd with
// optional heavy-ball or Nesterov momentum, adam, adamw; sim/run/settings.h OptimizerSpec),
// over the kernels of kernels/ops.h. A parameter server holds one (in ServerUpdate, for
// every server engine, whatever the worker count); local SGD and DiLoCo hold one per
// worker for its local steps. What it is not: a scheduler of rates (the caller passes the
// rate in force) or a store of parameters (the caller owns w).
// State: the velocity (momentum) or the moments m, v (Adam), (n) each, +0 at the start,
// and the step count t for Adam's bias corrections: one step per begin_step(), however
// many element ranges or rows that step then touches.
#pragma once
#include <cmath>
#include <cstdint>
#include "kernels/buffer.h"
#include "kernels/ops.h"
#include "sim/base/state_archive.h"
#include "sim/run/settings.h"

namespace asgd {

class Optimizer {
 public:
  explicit Optimizer(const OptimizerSpec& spec) : spec_(spec) {}
  const OptimizerSpec& spec() const { return spec_; }
  bool stateful() const { return spec_.stateful(); }
  // Whether a step moves an element whose gradient is 0 and whose state is 0: weight
  // decay does (Adam's L2 term and AdamW's decay both act on w itself).
  bool moves_idle_elements() const { return spec_.adam() && spec_.weight_decay != 0.0; }

  // Sizes the state for n elements and sets it to 0 (and t to 0), unless it already is
  // for n elements (then it is kept).
  void prepare(size_t n) {
    if (n != n_) reset(n);
  }
  // Every state to 0, t = 0 (a fresh optimizer).
  void reset(size_t n) {
    n_ = n;
    t_ = 0;
    if (!stateful()) return;
    first_.resize_discard(n);
    first_.fill(0.0f);
    if (spec_.adam()) {
      second_.resize_discard(n);
      second_.fill(0.0f);
    }
  }
  // Starts step t + 1 with step size lr: every range or row stepped until the next call
  // belongs to this step (Adam's bias corrections use its t).
  void begin_step(float lr) {
    ++t_;
    lr_ = lr;
    if (spec_.adam()) {
      p_.lr = lr;
      p_.beta1 = float(spec_.beta1);
      p_.beta2 = float(spec_.beta2);
      p_.one_minus_beta1 = float(1.0 - spec_.beta1);
      p_.one_minus_beta2 = float(1.0 - spec_.beta2);
      p_.eps = float(spec_.eps);
      p_.weight_decay = float(spec_.weight_decay);
      p_.decoupled = spec_.kind == OptimizerKind::AdamW;
      p_.c1 = float(1.0 - std::pow(spec_.beta1, double(t_)));
      p_.c2 = float(1.0 - std::pow(spec_.beta2, double(t_)));
    }
  }
  uint64_t steps() const { return t_; }
  // A checkpoint of the state (its spec comes from the config).
  void checkpoint(StateArchive& a) {
    a.tag("optimizer");
    a.io(n_);
    a.io(t_);
    a.io(lr_);
    a.io(p_);
    a.io(first_);
    a.io(second_);
  }

  // The step on elements [b, b + len): out, in and g point at element b.
  void step(ExecContext& ctx, float* out, const float* in, const float* g, size_t b, size_t len) {
    if (spec_.adam())
      ops::adam_step(ctx, out, in, first_.data() + b, second_.data() + b, g, p_, len);
    else if (spec_.momentum <= 0.0)
      ops::sgd_step(ctx, out, in, g, lr_, len);
    else if (spec_.nesterov)
      ops::nesterov_step(ctx, out, in, first_.data() + b, g, lr_, mu(), len);
    else
      ops::momentum_step(ctx, out, in, first_.data() + b, g, lr_, mu(), len);
  }
  // The step on the table rows r (whole arrays).
  void step(ExecContext& ctx, const ops::Rows& r, float* out, const float* in, const float* g) {
    if (spec_.adam())
      ops::adam_step(ctx, r, out, in, first_.data(), second_.data(), g, p_);
    else if (spec_.momentum <= 0.0)
      ops::sgd_step(ctx, r, out, in, g, lr_);
    else if (spec_.nesterov)
      ops::nesterov_step(ctx, r, out, in, first_.data(), g, lr_, mu());
    else
      ops::momentum_step(ctx, r, out, in, first_.data(), g, lr_, mu());
  }
  // The step's direction d (x -= lr * d is the step) in place of the gradient u, (n):
  // plain SGD leaves u as it is. x: the point the step would move (Adam's weight decay).
  void direction(ExecContext& ctx, float* u, const float* x, size_t n) {
    if (spec_.adam())
      ops::adam_direction(ctx, u, x, first_.data(), second_.data(), p_, n);
    else if (spec_.momentum > 0.0)
      ops::momentum_direction(ctx, u, first_.data(), mu(), spec_.nesterov, n);
  }

 private:
  float mu() const { return float(spec_.momentum); }

  OptimizerSpec spec_;
  size_t n_ = size_t(-1);  // elements the state is sized for (none yet)
  uint64_t t_ = 0;         // steps begun
  float lr_ = 0.0f;
  ops::AdamParams p_;
  DeviceArray<float> first_;   // momentum: the velocity; Adam: m
  DeviceArray<float> second_;  // Adam: v
};

}  // namespace asgd
