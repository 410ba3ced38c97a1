// kernels/layers/maxpool.cu — max-pooling over non-overlapping window x window blocks of
// each channel (stride = window; rows and columns past the last whole block are
// dropped). Training keeps each output's position in its window (the first maximum in
// row-major order); backward writes each block's inputs: the output's gradient at its
// maximum, 0 elsewhere.
#include "kernels/detail/backend.h"
#include "kernels/layers/layer.h"

namespace asgd::layers {
namespace {

struct PoolGeometry {
  int H, W, C, OH, OW, window;
};

// Output (sample, oh, ow) = row r, channel c.
struct MaxPoolForward {
  const float* x;
  float* out;
  int32_t* arg;
  PoolGeometry g;  // arg null: not kept
  ASGD_HD void operator()(size_t r, size_t c) const {
    const size_t positions = size_t(g.OH) * size_t(g.OW);
    const size_t s = r / positions;
    const int pos = int(r % positions), oh = pos / g.OW, ow = pos % g.OW;
    const float* base = x + ((s * g.H + size_t(oh) * g.window) * g.W + size_t(ow) * g.window) * g.C + c;
    float best = base[0];
    int at = 0;
    for (int dy = 0; dy < g.window; ++dy)
      for (int dx = 0; dx < g.window; ++dx) {
        const float v = base[(size_t(dy) * g.W + dx) * g.C];
        if (v > best) {
          best = v;
          at = dy * g.window + dx;
        }
      }
    out[r * g.C + c] = best;
    if (arg) arg[r * g.C + c] = at;
  }
};

// The input gradient of output (sample, oh, ow, c)'s window, i = sample OH + oh: d_out at
// the window's maximum, 0 elsewhere. Windows do not overlap, so each input value is
// written by one call; inputs in no window (dropped edges) are zeroed first
// (MaxPool::backward).
struct MaxPoolBackward {
  const float* d_out;
  const int32_t* arg;
  float* d_in;
  PoolGeometry g;
  ASGD_HD void operator()(size_t i, size_t ow, size_t c) const {
    const size_t s = i / size_t(g.OH), oh = i % size_t(g.OH);
    const size_t o = (i * g.OW + ow) * g.C + c;
    const float d = d_out[o];
    const int at = arg[o];
    float* base = d_in + ((s * g.H + oh * g.window) * g.W + ow * g.window) * g.C + c;
    for (int dy = 0; dy < g.window; ++dy)
      for (int dx = 0; dx < g.window; ++dx) base[(size_t(dy) * g.W + dx) * g.C] = dy * g.window + dx == at ? d : 0.0f;
  }
};

struct Zero {
  float* x;
  ASGD_HD void operator()(size_t i) const { x[i] = 0.0f; }
};

class MaxPool final : public Layer {
 public:
  MaxPool(Shape in, int window)
      : Layer(in, maxpool_out_shape(in, window)), g_{in.height, in.width, in.channels, 0, 0, window} {
    g_.OH = out_.height;
    g_.OW = out_.width;
  }
  std::string kind() const override { return "maxpool"; }
  std::string describe() const override {
    return "maxpool " + std::to_string(g_.window) + "x" + std::to_string(g_.window) + ": " + in_.text() + " -> " +
           out_.text();
  }
  size_t own_floats_per_sample(bool training) const override { return training ? out_.size() : 0; }

  void bind(Workspace& ws, const Pass& p, LayerIO& io) const override {
    if (p.training()) io.own[0] = ws.take<int32_t>("maxpool argmax", p.rows() * out_.size(), io.index);
  }
  void forward(ExecContext& ctx, const Pass& p, const LayerIO& io) const override {
    detail::for_each_2d(ctx, p.rows() * size_t(g_.OH) * size_t(g_.OW), size_t(g_.C),
                        MaxPoolForward{io.in, io.out, static_cast<int32_t*>(io.own[0]), g_});
  }
  void backward(ExecContext& ctx, const Pass& p, const LayerIO& io) const override {
    if (!io.d_in) return;
    if (g_.H % g_.window || g_.W % g_.window) detail::for_each_index(ctx, p.rows() * in_.size(), Zero{io.d_in});
    detail::for_each_3d(ctx, p.rows() * size_t(g_.OH), size_t(g_.OW), size_t(g_.C),
                        MaxPoolBackward{io.d_out, static_cast<const int32_t*>(io.own[0]), io.d_in, g_});
  }

 private:
  PoolGeometry g_;
};

}  // namespace

std::unique_ptr<Layer> make_maxpool(Shape in, int window) { return std::make_unique<MaxPool>(in, window); }

}  // namespace asgd::layers
