// kernels/layers/layers_ref.h — plain scalar references for the layers and output losses,
// used only by tests. Deliberately naive: double precision, direct loops over the
// definitions (the convolution as a sum over its window, no im2col), no backend. An
// activation batch is (rows, size) row-major, one sample per row, images channels last
// (kernels/shape.h). Parameters as the layers lay them out (kernels/layers/layer.h).
#pragma once
#include <algorithm>
#include <cmath>
#include <cstddef>
#include <vector>
#include "kernels/model.h"
#include "kernels/shape.h"

namespace asgd::layers_ref {

using Batch = std::vector<double>;

// out[r][j] = b[j] + sum_i in[r][i] W[i][j]; w = W (K, N) then b (N).
inline Batch dense(const Batch& in, size_t rows, size_t K, size_t N, const double* w) {
  Batch out(rows * N);
  for (size_t r = 0; r < rows; ++r)
    for (size_t j = 0; j < N; ++j) {
      double s = w[K * N + j];
      for (size_t i = 0; i < K; ++i) s += in[r * K + i] * w[i * N + j];
      out[r * N + j] = s;
    }
  return out;
}

// out[s][oh][ow][o] = b[o] + sum over kh, kw, c of in[s][oh S - P + kh][ow S - P + kw][c]
// W[kh][kw][c][o], zero outside the input; w = W (kernel, kernel, C, channels) then b.
inline Batch conv2d(const Batch& in, size_t rows, Shape s, int channels, int kernel, int stride, int padding,
                    const double* w) {
  const Shape o = conv2d_out_shape(s, channels, kernel, stride, padding);
  const size_t K = size_t(kernel) * kernel * s.channels;
  Batch out(rows * o.size());
  for (size_t r = 0; r < rows; ++r)
    for (int oh = 0; oh < o.height; ++oh)
      for (int ow = 0; ow < o.width; ++ow)
        for (int f = 0; f < channels; ++f) {
          double acc = w[K * channels + f];
          for (int kh = 0; kh < kernel; ++kh)
            for (int kw = 0; kw < kernel; ++kw)
              for (int c = 0; c < s.channels; ++c) {
                const int ih = oh * stride - padding + kh, iw = ow * stride - padding + kw;
                if (ih < 0 || ih >= s.height || iw < 0 || iw >= s.width) continue;
                const double x = in[r * s.size() + (size_t(ih) * s.width + iw) * s.channels + c];
                acc += x * w[((size_t(kh) * kernel + kw) * s.channels + c) * channels + f];
              }
          out[r * o.size() + (size_t(oh) * o.width + ow) * channels + f] = acc;
        }
  return out;
}

// The maximum of each window x window block of each channel.
inline Batch maxpool(const Batch& in, size_t rows, Shape s, int window) {
  const Shape o = maxpool_out_shape(s, window);
  Batch out(rows * o.size());
  for (size_t r = 0; r < rows; ++r)
    for (int oh = 0; oh < o.height; ++oh)
      for (int ow = 0; ow < o.width; ++ow)
        for (int c = 0; c < s.channels; ++c) {
          double m = -INFINITY;
          for (int dy = 0; dy < window; ++dy)
            for (int dx = 0; dx < window; ++dx)
              m = std::max(m,
                           in[r * s.size() + (size_t(oh * window + dy) * s.width + ow * window + dx) * s.channels + c]);
          out[r * o.size() + (size_t(oh) * o.width + ow) * s.channels + c] = m;
        }
  return out;
}

inline Batch relu(Batch x) {
  for (double& v : x) v = v < 0 ? 0 : v;
  return x;
}
inline Batch tanh(Batch x) {
  for (double& v : x) v = std::tanh(v);
  return x;
}

// One row's loss of outputs z given its label (the target, or the class index).
inline double row_loss(DenseLoss kind, const double* z, int outputs, double label) {
  if (kind == DenseLoss::Squared) return 0.5 * (z[0] - label) * (z[0] - label);
  if (kind == DenseLoss::Logistic) return std::log1p(std::exp(-std::fabs(z[0]))) + std::max(z[0], 0.0) - label * z[0];
  double mx = z[0];
  for (int j = 1; j < outputs; ++j) mx = std::max(mx, z[j]);
  double se = 0;
  for (int j = 0; j < outputs; ++j) se += std::exp(z[j] - mx);
  return mx + std::log(se) - z[int(label)];
}

}  // namespace asgd::layers_ref
