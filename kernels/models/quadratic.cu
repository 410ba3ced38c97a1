// kernels/models/quadratic.cu — f(w) = 1/2 sum_i h_i w_i^2, optimum at 0, with optional
// additive N(0, noise^2) gradient noise drawn per (seed, worker, step, coordinate)
// (Philox4x32-10 and Box-Muller from cuRAND's device API, four coordinates per block).
// Parameters: w (dim). Reads no dataset.
#include <cuda_runtime.h>  // host definitions for curand_kernel.h under g++
#include <curand_kernel.h>
#include "kernels/detail/backend.h"
#include "kernels/model.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

namespace asgd {
namespace {

// Noise of coordinate i: one Philox4x32-10 block serves four coordinates. Block
// j = i / 4 is the counter (j, subsequence) under the key `seed` (what curand_init(seed,
// subsequence, 4 j) would start from), and its four 32-bit words give two Box-Muller
// pairs: coordinates 4j, 4j+1 from (x, y), and 4j+2, 4j+3 from (z, w). So the noise is
// still a function of (seed, worker, step, coordinate) alone, at one Philox call per
// four coordinates instead of a curand_init (one call) and a normal (another) per
// coordinate.
// Each gradient functor also writes the loss terms of its coordinates (QuadraticTerm's
// arithmetic): the loss then needs no pass of its own.
struct QuadraticTerm {  // out_i = 1/2 h_i w_i^2
  const float* w;
  const float* h;
  float* out;
  ASGD_HD void operator()(size_t i) const { out[i] = 0.5f * h[i] * w[i] * w[i]; }
};

struct QuadraticNoisyGradient {  // handles coordinates 4j .. 4j+3
  const float* w;
  const float* h;
  float* g;
  size_t n;
  float noise_std;
  uint2 key;
  unsigned sub_lo, sub_hi;
  QuadraticTerm term;
  ASGD_D void operator()(size_t j) const {
    uint4 r = curand_Philox4x32_10(make_uint4(unsigned(j), unsigned(j >> 32), sub_lo, sub_hi), key);
    float2 a = _curand_box_muller(r.x, r.y);
    float2 b = _curand_box_muller(r.z, r.w);
    const float z[4] = {a.x, a.y, b.x, b.y};
    const size_t i0 = 4 * j;
    const size_t k_end = n - i0 < 4 ? n - i0 : 4;
    for (size_t k = 0; k < k_end; ++k) {
      g[i0 + k] = h[i0 + k] * w[i0 + k] + noise_std * z[k];
      term(i0 + k);
    }
  }
};

struct QuadraticGradient {  // no noise: g = h * w
  const float* w;
  const float* h;
  float* g;
  QuadraticTerm term;
  ASGD_HD void operator()(size_t i) const {
    g[i] = h[i] * w[i];
    term(i);
  }
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

  double loss_grad(ExecContext& ctx, const float* w, const DeviceDataset*, const int32_t*, size_t,
                   const NoiseKey& noise, float* grad) const override {
    Workspace::Frame frame(ctx.workspace());
    float* terms = ctx.workspace().take<float>("quadratic loss terms", dim_);
    const QuadraticTerm term{w, h_.data(), terms};
    if (noise_std_ > 0.0f) {
      uint64_t sub = Rng::subsequence(RngPurpose::GradientNoise, noise.worker, noise.step);
      uint2 key = make_uint2(unsigned(noise.seed), unsigned(noise.seed >> 32));
      detail::for_each_index(
          ctx, (dim_ + 3) / 4,
          QuadraticNoisyGradient{w, h_.data(), grad, dim_, noise_std_, key, unsigned(sub), unsigned(sub >> 32), term});
    } else {
      detail::for_each_index(ctx, dim_, QuadraticGradient{w, h_.data(), grad, term});
    }
    return ops::sum(ctx, terms, dim_);
  }

  EvalSums evaluate(ExecContext& ctx, const float* w, const DeviceDataset*, size_t, size_t) const override {
    EvalSums s;
    s.loss_sum = loss(ctx, w);
    s.count = 1;
    return s;
  }

 private:
  double loss(ExecContext& ctx, const float* w) const {
    Workspace::Frame frame(ctx.workspace());
    float* terms = ctx.workspace().take<float>("quadratic loss terms", dim_);
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
