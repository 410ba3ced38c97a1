// engines/easgd.cpp — asynchronous elastic-averaged SGD (Zhang, Choromanska & LeCun 2015,
// "Deep learning with Elastic Averaging SGD"). Worker i keeps its own parameters x_i and
// takes local steps x_i <- x_i - lr * g(x_i); after every `period` local steps it
// exchanges with the center c (the model of record):
//   e = alpha * (x_i - c);  x_i <- x_i - e;  c <- c + e.
// EAMSGD (delta > 0): the local step uses Nesterov momentum, v <- delta v - lr g(x + delta v);
// x <- x + v, kept here as V = -v / lr: V <- delta V + g(x - lr delta V); x <- x - lr V.
// alpha = "auto" is 0.9 / N (beta = N alpha = 0.9, the paper's common choice).
#include "engines/easgd.h"
#include "kernels/ops.h"

namespace asgd {

EasgdEngine::EasgdEngine(const nlohmann::json& spec)
    : spec_(spec), period_(spec.at("period").get<int>()), delta_(spec.at("delta").get<float>()) {}

nlohmann::json EasgdEngine::describe() const {
  nlohmann::json d = spec_;
  d["alpha_used"] = alpha_;
  return d;
}

void EasgdEngine::start(Simulation& sim) {
  const int n = sim.workers();
  const nlohmann::json& a = spec_.at("alpha");
  alpha_ = a.is_string() ? 0.9 / n : a.get<double>();
  std::vector<float> init = sim.initial_params();
  center_ = std::make_unique<ParameterStore>(init, 0);
  local_.clear();
  for (int w = 0; w < n; ++w) local_.push_back(std::make_unique<ParameterStore>(init, 0));
  local_steps_.assign(n, 0);
  if (delta_ > 0) {
    velocity_.resize(n);
    lookahead_.resize(n);
    for (int w = 0; w < n; ++w) {
      velocity_[w].resize_discard(init.size());
      velocity_[w].fill(0.0f);
    }
  }
  for (int w = 0; w < n; ++w) launch_next(sim, w);
}

void EasgdEngine::launch_next(Simulation& sim, int worker) {
  ids_.clear();
  sim.take_samples(sim.settings().batch_size, ids_);
  Snapshot at = local_[worker]->current();
  if (delta_ > 0) {
    // gradient at the look-ahead point x - lr * delta * V, in a buffer of its own
    auto buf = std::make_shared<Params>(at.params->size());
    ops::sgd_step(sim.exec(), buf->data(), at.data(), velocity_[worker].data(),
                  float(sim.lr()) * delta_, at.params->size());
    at = Snapshot{std::move(buf), at.version};
  }
  sim.launch(worker, std::move(at), ids_.data(), ids_.size());
}

void EasgdEngine::on_gradient(Simulation& sim, std::unique_ptr<GradientJob> job) {
  const int w = job->worker;
  const size_t n = center_->size();
  ExecContext& ctx = sim.exec();
  const float lr = float(sim.lr());
  ParameterStore& x = *local_[w];
  if (delta_ > 0)
    x.update([&](float* out, const float* in) {
      ops::momentum_step(ctx, out, in, velocity_[w].data(), job->grad.data(), lr, delta_, n);
    });
  else
    x.update([&](float* out, const float* in) { ops::sgd_step(ctx, out, in, job->grad.data(), lr, n); });
  sim.applied(*job, 0);  // computed on the worker's own parameters
  sim.recycle(std::move(job));

  if (++local_steps_[w] % uint64_t(period_) == 0) {
    // elastic exchange: both x_i and the center move towards each other
    x.update([&](float* xo, const float* xi) {
      ops::copy(ctx, xo, xi, n);
      center_->update([&](float* co, const float* ci) {
        ops::copy(ctx, co, ci, n);
        ops::elastic_exchange(ctx, xo, co, float(alpha_), n);
      });
    });
    sim.updated();
  }
  if (!sim.stopping()) launch_next(sim, w);
}

}  // namespace asgd
