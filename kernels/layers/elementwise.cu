// kernels/layers/elementwise.cu — the layers that act on each value alone: ReLU and tanh
// (whose backward reads only their output, so they may run in place; above a dense or
// convolution layer LayerStack has that layer's kernels apply them instead), and flatten
// (a view: the same floats, read as a flat vector).
#include "kernels/detail/backend.h"
#include "kernels/layers/activation.h"
#include "kernels/layers/layer.h"

namespace asgd::layers {
namespace {

// Separate functors for in place and out of place: a loop whose input and output are two
// pointers to the same array vectorises only when the compiler sees one pointer (its
// check that two arrays do not overlap fails, and it falls back to scalar code).
template <class A>
struct Forward {
  const float* in;
  float* out;
  ASGD_HD void operator()(size_t i) const { out[i] = A::f(in[i]); }
};
template <class A>
struct ForwardInPlace {
  float* x;
  ASGD_HD void operator()(size_t i) const { x[i] = A::f(x[i]); }
};
template <class A>
struct Backward {
  const float* out;
  const float* d_out;
  float* d_in;
  ASGD_HD void operator()(size_t i) const { d_in[i] = A::df(out[i], d_out[i]); }
};
template <class A>
struct BackwardInPlace {
  const float* out;
  float* d;
  ASGD_HD void operator()(size_t i) const { d[i] = A::df(out[i], d[i]); }
};

template <class A>
class Elementwise final : public Layer {
 public:
  Elementwise(Shape in, const char* kind, Act act) : Layer(in, in), kind_(kind), act_(act) {}
  std::string kind() const override { return kind_; }
  Act activation() const override { return act_; }
  bool can_run_in_place() const override { return true; }
  bool backward_reads_out() const override { return true; }
  void forward(ExecContext& ctx, const Pass& p, const LayerIO& io) const override {
    const size_t n = p.rows() * out_.size();
    if (io.out == io.in)
      detail::for_each_index(ctx, n, ForwardInPlace<A>{io.out});
    else
      detail::for_each_index(ctx, n, Forward<A>{io.in, io.out});
  }
  void backward(ExecContext& ctx, const Pass& p, const LayerIO& io) const override {
    if (!io.d_in) return;
    const size_t n = p.rows() * out_.size();
    if (io.d_in == io.d_out)
      detail::for_each_index(ctx, n, BackwardInPlace<A>{io.out, io.d_in});
    else
      detail::for_each_index(ctx, n, Backward<A>{io.out, io.d_out, io.d_in});
  }

 private:
  const char* kind_;
  Act act_;
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

std::unique_ptr<Layer> make_relu(Shape in) { return std::make_unique<Elementwise<Relu>>(in, "relu", Act::ReLU); }
std::unique_ptr<Layer> make_tanh(Shape in) { return std::make_unique<Elementwise<Tanh>>(in, "tanh", Act::Tanh); }
std::unique_ptr<Layer> make_flatten(Shape in) { return std::make_unique<Flatten>(in); }

}  // namespace asgd::layers
