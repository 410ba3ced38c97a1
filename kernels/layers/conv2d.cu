// kernels/layers/conv2d.cu — 2-D convolution through im2col: each output position's
// input window (kernel x kernel x in channels, zero outside the input) becomes a row of
// the column matrix (m OH OW, K), and the convolution is the affine map of those rows
// (kernels/layers/affine.h): out (m OH OW, channels) = columns W + b, which is the output
// in HWC order. Backward: dW and db from the columns, then the columns' gradient (written
// over the columns) summed back onto the input positions (col2im, a gather: each input
// element adds its kernel positions in a fixed order, so no two threads write one value).
#include "kernels/layers/affine.h"

namespace asgd::layers {
namespace {

struct Geometry {
  int H, W, C;     // input
  int OH, OW, OC;  // output
  int KH, KW, S, P;
};

// Columns row (sample, oh, ow), its kh-th window row: the KW C inputs from column ow S - P
// of input row oh S - P + kh (contiguous in HWC), zero where they fall outside the input.
// i = sample OH + oh. One call writes KW C values.
struct Im2col {
  const float* x;
  float* col;
  Geometry g;
  ASGD_HD void operator()(size_t i, size_t ow_, size_t kh_) const {
    const int oh = int(i % size_t(g.OH)), ow = int(ow_), kh = int(kh_);
    const size_t s = i / size_t(g.OH);
    const int ih = oh * g.S - g.P + kh, iw0 = ow * g.S - g.P;
    const int run = g.KW * g.C;                                  // values per window row
    const int lo = iw0 < 0 ? -iw0 * g.C : 0;                     // first inside
    const int hi = (g.W - iw0 < g.KW ? g.W - iw0 : g.KW) * g.C;  // past the last inside
    float* out = col + ((i * size_t(g.OW) + size_t(ow)) * size_t(g.KH) + size_t(kh)) * size_t(run);
    if (ih < 0 || ih >= g.H) {
      for (int t = 0; t < run; ++t) out[t] = 0.0f;
      return;
    }
    const float* in = x + ((s * size_t(g.H) + size_t(ih)) * size_t(g.W)) * size_t(g.C) + long(iw0) * g.C;
    for (int t = 0; t < lo; ++t) out[t] = 0.0f;  // three loops without a branch inside
    for (int t = lo; t < hi; ++t) out[t] = in[t];
    for (int t = hi; t < run; ++t) out[t] = 0.0f;
  }
};

// dx at input position (sample, ih, iw) = the sum, for each channel, of the columns'
// gradient over the (kh, kw) that read it, kh then kw ascending. i = sample H + ih. One
// call writes the position's C values (no two calls write the same value).
struct Col2im {
  const float* dcol;
  float* dx;
  Geometry g;
  ASGD_HD void operator()(size_t i, size_t iw_) const {
    const int ih = int(i % size_t(g.H)), iw = int(iw_);
    const size_t s = i / size_t(g.H);
    const size_t K = size_t(g.KH) * g.KW * g.C;
    float* out = dx + (i * size_t(g.W) + size_t(iw)) * size_t(g.C);
    for (int c = 0; c < g.C; ++c) out[c] = 0.0f;
    for (int kh = (ih + g.P) % g.S; kh < g.KH; kh += g.S) {
      const int oh = (ih + g.P - kh) / g.S;  // decreases as kh grows
      if (oh < 0) break;
      if (oh >= g.OH) continue;
      for (int kw = (iw + g.P) % g.S; kw < g.KW; kw += g.S) {
        const int ow = (iw + g.P - kw) / g.S;
        if (ow < 0) break;
        if (ow >= g.OW) continue;
        const float* d = dcol + ((s * g.OH + size_t(oh)) * g.OW + size_t(ow)) * K + (size_t(kh) * g.KW + kw) * g.C;
        for (int c = 0; c < g.C; ++c) out[c] += d[c];
      }
    }
  }
};

class Conv2d final : public Layer {
 public:
  Conv2d(Shape in, int channels, int kernel, int stride, int padding)
      : Layer(in, conv2d_out_shape(in, channels, kernel, stride, padding)), g_{in.height, in.width, in.channels, 0,
                                                                               0,         channels, kernel,      kernel,
                                                                               stride,    padding} {
    g_.OH = out_.height;
    g_.OW = out_.width;
  }
  std::string kind() const override { return "conv2d"; }
  std::string describe() const override {
    return "conv2d " + std::to_string(g_.OC) + " filters " + std::to_string(g_.KH) + "x" + std::to_string(g_.KW) +
           " stride " + std::to_string(g_.S) + " padding " + std::to_string(g_.P) + ": " + in_.text() + " -> " +
           out_.text();
  }
  size_t num_params() const override { return affine().K * affine().N + affine().N; }
  std::vector<ParamBlock> param_blocks() const override { return affine().blocks(); }
  void init_params(uint64_t seed, uint32_t stream, double gain, float* w) const override {
    init_affine(seed, stream, gain, affine().K, affine().N, w);
  }
  size_t own_floats_per_sample(bool) const override { return positions() * affine().K; }
  double flops_per_sample(bool d_input) const override { return double(positions()) * affine().flops_per_row(d_input); }
  size_t bias_offset() const override { return affine().b_off; }

  void bind(Workspace& ws, const Pass& p, LayerIO& io) const override {
    float* col = ws.take<float>("conv2d columns", p.rows() * positions() * affine().K, io.index);
    io.own[0] = col;
    affine().bind(p, p.m * positions(), col, io.out, io.d_out, io.d_in ? col : nullptr, io);
  }
  void forward(ExecContext& ctx, const Pass& p, const LayerIO& io) const override {
    float* col = static_cast<float*>(io.own[0]);
    detail::for_each_3d(ctx, p.rows() * size_t(g_.OH), size_t(g_.OW), size_t(g_.KH), Im2col{io.in, col, g_});
    affine().forward(ctx, p, p.m * positions(), col, io.out, io);
  }
  void backward(ExecContext& ctx, const Pass& p, const LayerIO& io) const override {
    float* col = static_cast<float*>(io.own[0]);
    affine().backward(ctx, p, p.m * positions(), col, io.d_in ? col : nullptr, io);
    if (io.d_in) detail::for_each_2d(ctx, p.rows() * size_t(g_.H), size_t(g_.W), Col2im{col, io.d_in, g_});
  }

 private:
  size_t positions() const { return size_t(g_.OH) * size_t(g_.OW); }
  Affine affine() const {
    const size_t K = size_t(g_.KH) * g_.KW * g_.C, N = size_t(g_.OC);
    return Affine{K, N, offset_, offset_ + K * N};
  }
  Geometry g_;
};

}  // namespace

std::unique_ptr<Layer> make_conv2d(Shape in, int channels, int kernel, int stride, int padding) {
  return std::make_unique<Conv2d>(in, channels, kernel, stride, padding);
}

}  // namespace asgd::layers
