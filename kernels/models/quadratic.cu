// kernels/models/quadratic.cu — f(w) = 1/2 sum_i h_i w_i^2, optimum at 0, with optional
// additive N(0, noise^2) gradient noise drawn per (seed, worker, step, coordinate).
// Parameters: w (dim). Reads no dataset.
#include <cuda_runtime.h>  // host definitions for curand_kernel.h under g++
#include <curand_kernel.h>
#include "kernels/detail/backend.h"
#include "kernels/model.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

namespace asgd {
namespace {

struct QuadraticGradient {
  const float* w; const float* h; float* g; float noise_std;
  unsigned long long seed; unsigned long long subsequence;
  ASGD_D void operator()(size_t i) const {
    float gi = h[i] * w[i];
    if (noise_std > 0.0f) {
      curandStatePhilox4_32_10_t s;
      curand_init(seed, subsequence, 4ull * i, &s);
      gi += noise_std * curand_normal(&s);
    }
    g[i] = gi;
  }
};

struct QuadraticTerm {  // out_i = 1/2 h_i w_i^2
  const float* w; const float* h; float* out;
  ASGD_HD void operator()(size_t i) const { out[i] = 0.5f * h[i] * w[i] * w[i]; }
};

class Quadratic final : public Model {
 public:
  Quadratic(std::vector<float> curvature, float noise_std, float init)
      : dim_(curvature.size()), noise_std_(noise_std), init_(init) {
    h_.upload(curvature);
  }
  std::string name() const override { return "quadratic"; }
  size_t num_params() const override { return dim_; }
  bool is_classifier() const override { return false; }
  bool uses_data() const override { return false; }

  void init_params(uint64_t, std::vector<float>& w) const override { w.assign(dim_, init_); }

  double loss_grad(ExecContext& ctx, const float* w, const DeviceDataset*, const int32_t*,
                   size_t, const NoiseKey& noise, float* grad) const override {
    detail::for_each_index(ctx, dim_,
                           QuadraticGradient{w, h_.data(), grad, noise_std_, noise.seed,
                                             Rng::subsequence(RngPurpose::GradientNoise,
                                                              noise.worker, noise.step)});
    return loss(ctx, w);
  }

  EvalSums evaluate(ExecContext& ctx, const float* w, const DeviceDataset*, size_t,
                    size_t) const override {
    EvalSums s;
    s.loss_sum = loss(ctx, w);
    s.count = 1;
    return s;
  }

 private:
  double loss(ExecContext& ctx, const float* w) const {
    float* terms = ctx.scratch(0, dim_);
    detail::for_each_index(ctx, dim_, QuadraticTerm{w, h_.data(), terms});
    return ops::sum(ctx, terms, dim_);
  }

  size_t dim_;
  float noise_std_;
  float init_;
  DeviceArray<float> h_;
};

}  // namespace

std::unique_ptr<Model> make_quadratic(std::vector<float> curvature, float noise_std, float init) {
  return std::make_unique<Quadratic>(std::move(curvature), noise_std, init);
}

}  // namespace asgd
