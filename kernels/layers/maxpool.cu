// kernels/layers/maxpool.cu — max-pooling over non-overlapping window x window blocks of
// each channel (stride = window; rows and columns past the last whole block are
// dropped). Training keeps each output's position in its window (the first maximum in
// row-major order); backward is a gather: an input element gets its block's output
// gradient if it was that block's maximum, else 0.
#include "kernels/detail/backend.h"
#include "kernels/layers/layer.h"

namespace asgd::layers {
namespace {

struct PoolGeometry {
  int H, W, C, OH, OW, window;
};

// Output (sample, oh, ow) = row r, channel c.
struct MaxPoolForward {
  const float* x; float* out; int32_t* arg; PoolGeometry g;  // arg null: not kept
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

// Input (sample, ih, iw) = row r, channel c.
struct MaxPoolBackward {
  const float* d_out; const int32_t* arg; float* d_in; PoolGeometry g;
  ASGD_HD void operator()(size_t r, size_t c) const {
    const size_t plane = size_t(g.H) * size_t(g.W);
    const size_t s = r / plane;
    const int pos = int(r % plane), ih = pos / g.W, iw = pos % g.W;
    const int oh = ih / g.window, ow = iw / g.window;
    float v = 0.0f;
    if (oh < g.OH && ow < g.OW) {
      const size_t o = ((s * g.OH + oh) * g.OW + ow) * g.C + c;
      if (arg[o] == (ih % g.window) * g.window + iw % g.window) v = d_out[o];
    }
    d_in[r * g.C + c] = v;
  }
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
    detail::for_each_2d(ctx, p.rows() * size_t(g_.H) * size_t(g_.W), size_t(g_.C),
                        MaxPoolBackward{io.d_out, static_cast<const int32_t*>(io.own[0]), io.d_in, g_});
  }

 private:
  PoolGeometry g_;
};

}  // namespace

std::unique_ptr<Layer> make_maxpool(Shape in, int window) { return std::make_unique<MaxPool>(in, window); }

}  // namespace asgd::layers
