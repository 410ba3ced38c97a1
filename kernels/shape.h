// kernels/shape.h — Shape: one sample's activation as height x width x channels, stored
// channels last (HWC: element (y, x, c) at (y * width + x) * channels + c), and the shape
// arithmetic of convolution and pooling, written once for the layers and for config
// validation (which reports a ShapeError at the JSON path of `key`). A flat vector of n
// features is 1 x 1 x n. Also ParamBlock: a parameter tensor as a matrix. Plain C++.
#pragma once
#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace asgd {

// One parameter tensor of a model as low-rank compression (PowerSGD) sees it: a matrix
// of `rows` x `cols` (PyTorch's tensor.view(shape[0], -1): a layer's outputs by its
// inputs) at [offset, offset + rows * cols), stored row-major, or, `transposed`, stored
// as its transpose (cols x rows row-major: the dense and convolution layers keep W as
// (inputs, outputs)); or a vector (cols == 1: a bias, every parameter of a model without
// layers).
struct ParamBlock {
  size_t offset = 0;
  size_t rows = 0;
  size_t cols = 1;
  bool transposed = false;
};

// The model's layers as parameter ranges [begin, begin + len), in order: a tensor and the
// vectors right after it (a weight and its bias) are one layer.
struct ParamRange {
  size_t begin = 0, len = 0;
};
inline std::vector<ParamRange> param_layers(const std::vector<ParamBlock>& blocks) {
  std::vector<ParamRange> layers;
  for (const ParamBlock& b : blocks) {
    const size_t len = b.rows * b.cols;
    if (!layers.empty() && b.cols == 1 && layers.back().begin + layers.back().len == b.offset)
      layers.back().len += len;
    else
      layers.push_back({b.offset, len});
  }
  return layers;
}

struct Shape {
  int height = 1, width = 1, channels = 1;
  size_t size() const { return size_t(height) * size_t(width) * size_t(channels); }
  bool operator==(const Shape& o) const { return height == o.height && width == o.width && channels == o.channels; }
  bool operator!=(const Shape& o) const { return !(*this == o); }
  // "28x28x1" (height x width x channels)
  std::string text() const {
    return std::to_string(height) + "x" + std::to_string(width) + "x" + std::to_string(channels);
  }
};

// A shape that does not work out; `key` is the parameter at fault ("kernel", "stride",
// "padding", "pool", "channels").
struct ShapeError : std::invalid_argument {
  ShapeError(std::string key, const std::string& what) : std::invalid_argument(what), key(std::move(key)) {}
  std::string key;
};

// A convolution's output: `channels` filters of kernel x kernel, stride, zero padding on
// every side; each side (in + 2 padding - kernel) / stride + 1.
inline Shape conv2d_out_shape(Shape in, int channels, int kernel, int stride, int padding) {
  if (channels < 1) throw ShapeError("channels", "channels must be >= 1, got " + std::to_string(channels));
  if (kernel < 1) throw ShapeError("kernel", "kernel must be >= 1, got " + std::to_string(kernel));
  if (stride < 1) throw ShapeError("stride", "stride must be >= 1, got " + std::to_string(stride));
  if (padding < 0) throw ShapeError("padding", "padding must be >= 0, got " + std::to_string(padding));
  if (padding >= kernel)
    throw ShapeError("padding", "padding " + std::to_string(padding) + " must be smaller than the kernel (" +
                                    std::to_string(kernel) + "): a window would see nothing but padding");
  const int ph = in.height + 2 * padding, pw = in.width + 2 * padding;
  if (kernel > ph || kernel > pw)
    throw ShapeError("kernel",
                     "kernel " + std::to_string(kernel) + " is larger than its input " + in.text() +
                         (padding ? " padded to " + std::to_string(ph) + "x" + std::to_string(pw) : std::string()));
  return Shape{(ph - kernel) / stride + 1, (pw - kernel) / stride + 1, channels};
}

// Max-pooling over non-overlapping window x window blocks: each side in / window (rows
// and columns past the last whole block are dropped).
inline Shape maxpool_out_shape(Shape in, int window) {
  if (window < 1) throw ShapeError("pool", "pool must be >= 1, got " + std::to_string(window));
  if (window > in.height || window > in.width)
    throw ShapeError("pool", "pool window " + std::to_string(window) + " is larger than its input " + in.text());
  return Shape{in.height / window, in.width / window, in.channels};
}

}  // namespace asgd
