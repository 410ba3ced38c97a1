// kernels/layers/dense.cu — the dense layer: out (m, N) = in (m, K) W (K, N) + b, on a
// flat input of K = in.size() features. Parameters: W (K, N) row-major, then b (N).
#include <cmath>
#include "kernels/layers/affine.h"
#include "kernels/rng.h"

namespace asgd::layers {

void init_affine(uint64_t seed, uint32_t stream, double gain, size_t K, size_t N, float* w) {
  const double std = std::sqrt(gain / double(K));
  Rng rng(seed, RngPurpose::Init, stream, 0);
  for (size_t i = 0; i < K * N; ++i) w[i] = float(std * rng.normal());
  for (size_t i = K * N; i < K * N + N; ++i) w[i] = 0.0f;
}

namespace {

class Dense final : public Layer {
 public:
  Dense(Shape in, int out) : Layer(in, Shape{1, 1, out}) {
    if (out < 1) throw std::invalid_argument("dense layer: outputs must be >= 1, got " + std::to_string(out));
    if (in.size() < 1) throw std::invalid_argument("dense layer: no inputs");
  }
  std::string kind() const override { return "dense"; }
  size_t num_params() const override { return affine().K * affine().N + affine().N; }
  std::vector<ParamBlock> param_blocks() const override { return affine().blocks(); }
  void init_params(uint64_t seed, uint32_t stream, double gain, float* w) const override {
    init_affine(seed, stream, gain, affine().K, affine().N, w);
  }
  double flops_per_sample(bool d_input) const override { return affine().flops_per_row(d_input); }
  size_t bias_offset() const override { return affine().b_off; }

  void bind(Workspace&, const Pass& p, LayerIO& io) const override {
    affine().bind(p, p.m, io.in, io.out, io.d_out, io.d_in, io);
  }
  void forward(ExecContext& ctx, const Pass& p, const LayerIO& io) const override {
    affine().forward(ctx, p, p.m, io.in, io.out, io);
  }
  void backward(ExecContext& ctx, const Pass& p, const LayerIO& io) const override {
    affine().backward(ctx, p, p.m, io.in, io.d_in, io);
  }

 private:
  Affine affine() const {
    const size_t K = in_.size(), N = out_.size();
    return Affine{K, N, offset_, offset_ + K * N};
  }
};

}  // namespace

std::unique_ptr<Layer> make_dense(Shape in, int out) { return std::make_unique<Dense>(in, out); }

}  // namespace asgd::layers
