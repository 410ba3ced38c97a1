// kernels/layers/elementwise.cu — the layers that act on each value alone: ReLU and tanh
// (whose backward reads only their output, so they may run in place), and flatten (a
// view: the same floats, read as a flat vector).
#include <cmath>
#include "kernels/detail/backend.h"
#include "kernels/layers/layer.h"

namespace asgd::layers {
namespace {

struct ReluForward {
  const float* in; float* out;
  ASGD_HD void operator()(size_t i) const {
    const float v = in[i];
    out[i] = v < 0.0f ? 0.0f : v;
  }
};
// d_in = d_out where the unit was active (out > 0), else 0 (a select: it vectorises)
struct ReluBackward {
  const float* out; const float* d_out; float* d_in;
  ASGD_HD void operator()(size_t i) const { d_in[i] = out[i] > 0.0f ? d_out[i] : 0.0f; }
};
struct TanhForward {
  const float* in; float* out;
  ASGD_HD void operator()(size_t i) const { out[i] = tanhf(in[i]); }
};
// d tanh(x) / dx = 1 - tanh(x)^2
struct TanhBackward {
  const float* out; const float* d_out; float* d_in;
  ASGD_HD void operator()(size_t i) const { d_in[i] = d_out[i] * (1.0f - out[i] * out[i]); }
};

template <class Forward, class Backward>
class Elementwise final : public Layer {
 public:
  Elementwise(Shape in, const char* kind) : Layer(in, in), kind_(kind) {}
  std::string kind() const override { return kind_; }
  bool can_run_in_place() const override { return true; }
  bool backward_reads_out() const override { return true; }
  void forward(ExecContext& ctx, const Pass& p, const LayerIO& io) const override {
    detail::for_each_index(ctx, p.rows() * out_.size(), Forward{io.in, io.out});
  }
  void backward(ExecContext& ctx, const Pass& p, const LayerIO& io) const override {
    if (io.d_in) detail::for_each_index(ctx, p.rows() * out_.size(), Backward{io.out, io.d_out, io.d_in});
  }

 private:
  const char* kind_;
};

class Flatten final : public Layer {
 public:
  explicit Flatten(Shape in) : Layer(in, Shape{1, 1, int(in.size())}) {}
  std::string kind() const override { return "flatten"; }
  bool is_view() const override { return true; }
  void forward(ExecContext&, const Pass&, const LayerIO&) const override {}
  void backward(ExecContext&, const Pass&, const LayerIO&) const override {}
};

}  // namespace

std::unique_ptr<Layer> make_relu(Shape in) {
  return std::make_unique<Elementwise<ReluForward, ReluBackward>>(in, "relu");
}
std::unique_ptr<Layer> make_tanh(Shape in) {
  return std::make_unique<Elementwise<TanhForward, TanhBackward>>(in, "tanh");
}
std::unique_ptr<Layer> make_flatten(Shape in) { return std::make_unique<Flatten>(in); }

}  // namespace asgd::layers
