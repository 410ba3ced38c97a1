// kernels/model.h — the model interface: minibatch loss + gradient, and evaluation over a
// range of a dataset, and the models there are: the quadratic, and the models made of
// layers (dense networks and CNNs, kernels/models/sequential.cu). Parameters are one flat
// float array per model (layout documented by each model). Not here: optimisers, time,
// workers — the engines own those.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "kernels/buffer.h"
#include "kernels/exec.h"
#include "kernels/shape.h"

namespace asgd {

// A dataset in backend memory: dense, x (n, dim) row-major; or sparse (sparse() true, x
// empty), in CSR: sample i's features are col[row_ptr[i] .. row_ptr[i+1]), strictly
// increasing and < dim, with the values val[same range]. y is (n): the regression
// target, or the class index stored as a float.
struct DeviceDataset {
  DeviceArray<float> x;
  DeviceArray<float> y;
  size_t n = 0;
  size_t dim = 0;                // features
  int classes = 0;               // 0 for regression
  DeviceArray<int64_t> row_ptr;  // (n + 1), sparse data only
  DeviceArray<int32_t> col;      // (nnz)
  DeviceArray<float> val;        // (nnz)
  // row_ptr and col readable on the host, so that the rows a minibatch touches are found
  // without waiting for the device (Model::touched_rows): on CPU backends these point
  // into the arrays above; on CUDA into host_index, a host copy.
  const int64_t* host_row_ptr = nullptr;
  const int32_t* host_col = nullptr;
  std::vector<int64_t> host_index_row_ptr;  // CUDA only
  std::vector<int32_t> host_index_col;
  Shape shape;  // one sample as an image, channels last (dim floats); 1 x 1 x dim if flat
  // >= 0: the samples live outside this program (an external model's data set, read by
  // that model through this id); x is empty and dim 0.
  int external = -1;
  bool sparse() const { return !row_ptr.empty(); }
};

// How a gradient can be sparse. A model whose parameters begin with a table of rows, one
// per input feature (a sparse linear model's weights, an embedding table), gets from a
// minibatch a gradient that is exactly zero outside the rows its samples' features name.
// Parameters [0, rows * width) are the table, row j at [j * width, (j + 1) * width);
// parameters [rows * width, num_params) are dense: any gradient may touch all of them.
// A dense model has no table (rows 0): every gradient touches every parameter.
struct RowLayout {
  size_t rows = 0;
  size_t width = 0;
};

// Key of the gradient-noise stream of one job: (seed, worker, step).
struct NoiseKey {
  uint64_t seed = 0;
  uint32_t worker = 0;
  uint32_t step = 0;
};

// One gradient of a batch (Model::loss_grad_batch): loss_grad's arguments, and its result.
struct GradRequest {
  const float* w = nullptr;      // (num_params, backend memory)
  const int32_t* ids = nullptr;  // host array of m sample ids
  size_t m = 0;
  NoiseKey noise;
  float* grad = nullptr;  // (num_params, backend memory), written
  double loss = 0;        // written: the mean minibatch loss
};

// Sums over evaluated rows; loss_sum / count is the mean loss.
struct EvalSums {
  double loss_sum = 0;
  double correct = 0;
  size_t count = 0;
};

class Model {
 public:
  virtual ~Model() = default;
  virtual std::string name() const = 0;
  virtual size_t num_params() const = 0;
  virtual bool is_classifier() const = 0;
  // Initial parameters from the seed (host vector of num_params()).
  virtual void init_params(uint64_t seed, std::vector<float>& w) const = 0;
  // Mean loss over the m samples `ids` (host array) of `data`; writes the mean gradient
  // into grad (num_params, backend memory). w is (num_params, backend memory).
  virtual double loss_grad(ExecContext& ctx, const float* w, const DeviceDataset* data, const int32_t* ids, size_t m,
                           const NoiseKey& noise, float* grad) const = 0;
  // Computes k gradients, each exactly as loss_grad would (on CPU backends the same bits);
  // the requests may read different parameters. A model that can share the work
  // overrides it: the layered models run each layer's GEMMs of all k as one batched GEMM
  // call (cuBLAS: one launch for k), and every other pass once over all k*m rows.
  virtual void loss_grad_batch(ExecContext& ctx, const DeviceDataset* data, GradRequest* reqs, size_t k) const {
    for (size_t i = 0; i < k; ++i)
      reqs[i].loss = loss_grad(ctx, reqs[i].w, data, reqs[i].ids, reqs[i].m, reqs[i].noise, reqs[i].grad);
  }
  // Loss (and correct predictions) summed over rows [begin, end) of data.
  virtual EvalSums evaluate(ExecContext& ctx, const float* w, const DeviceDataset* data, size_t begin,
                            size_t end) const = 0;
  // Whether the model reads a dataset at all (the quadratic does not). A model that does
  // not must ignore the ids loss_grad gets: the simulation then hands out ids in order
  // instead of shuffling them (they only count samples).
  virtual bool uses_data() const { return true; }
  // The parameter table, if any (RowLayout). Default: none, every parameter is dense.
  virtual RowLayout row_layout() const { return {}; }
  // The parameter tensors in order, covering [0, num_params()) (ParamBlock). Default: one
  // vector of every parameter.
  virtual std::vector<ParamBlock> param_blocks() const { return {ParamBlock{0, num_params(), 1, false}}; }
  // The table rows that the gradient on samples `ids` (host array of m) of `data` can
  // make non-zero, sorted and unique, into `rows`; every other row's gradient is exactly
  // +0, and the dense part may all be non-zero. They are also the only table rows that
  // loss_grad reads (a step that pulls only them computes the same bits). Computed on the host from data's host
  // index, with no kernel and no wait, so a caller can size a message before the
  // gradient exists. A model without a table leaves `rows` empty.
  virtual void touched_rows(const DeviceDataset* data, const int32_t* ids, size_t m, std::vector<int32_t>& rows) const {
    rows.clear();
  }
  // Floating-point operations of one sample's share of loss_grad: the GEMMs'
  // multiply-adds counted as 2 (forward, the weights' gradients, and the activations'
  // gradients below the first layer), elementwise work not counted. So a gradient of a
  // minibatch of m costs m times this; with a measured rate it gives the fraction of a
  // device's peak. 0 for a model that reads no samples (the quadratic).
  virtual double flops_per_sample() const { return 0; }
  // How flops_per_sample was counted and what it leaves out, where that is not the rule
  // above: an external module's counter (asgdsim.flops); "" for the models here.
  virtual std::string flops_counter() const { return ""; }
  // What a step's cost depends on beyond the model's config and this build, as text: an
  // external module's code and shapes (a hash); "" for the models here, whose code is the
  // build's. Part of the key of the calibration cache (experiments/run/calibration.h).
  virtual std::string code_identity() const { return ""; }
  // Floats of workspace one sample's pass takes: its activations (and, training, their
  // gradients and the layers' own buffers). What a thread holds per sample while it
  // computes a gradient (or evaluates); 0 for a model that keeps nothing per sample.
  virtual size_t floats_per_sample(bool training) const { return 0; }
  // Threads one gradient job computes on: 1 for the models here (a job is one kernel
  // thread); an external model's own intra-op threads (a PyTorch module's model.threads).
  // The calibration of dist "measured" clocks a job of one thread by that thread's CPU
  // time and a job of more by wall time.
  virtual int job_threads() const { return 1; }
};

// f(w) = 1/2 sum_i h_i w_i^2 with N(0, noise_std^2) added to each gradient coordinate.
std::unique_ptr<Model> make_quadratic(std::vector<float> curvature, float noise_std, float init);

enum class DenseLoss { Squared, Logistic, SoftmaxCrossEntropy };
enum class Activation { ReLU, Tanh };
// A dense network, layers = {inputs, hidden..., outputs}, the activation after each
// hidden layer; no hidden layer gives linear (Squared, 1 output), logistic (Logistic, 1
// output) or softmax regression. Parameters, per layer l (in_l -> out_l) in order: W_l
// (in_l, out_l) row-major, then b_l (out_l). Initial weights N(0, gain / in_l), gain 2
// before a ReLU, else 1; zero biases.
std::unique_ptr<Model> make_dense(std::vector<int> layers, DenseLoss loss, Activation activation = Activation::ReLU);

// A convolution block of a CNN: `channels` filters of kernel x kernel, stride, zero
// padding; then the activation; then max-pooling over pool x pool blocks (1: none).
struct ConvSpec {
  int channels = 0, kernel = 0, stride = 1, padding = 0, pool = 1;
};
struct CnnSpec {
  std::vector<ConvSpec> conv;
  std::vector<int> hidden;  // dense layers after flattening, each followed by the activation
  Activation activation = Activation::ReLU;
};
// LeNet-5 as commonly adapted to 28x28 images: conv 6 5x5 padding 2, pool 2; conv 16
// 5x5, pool 2; dense 120, 84 (ReLU).
CnnSpec lenet5();
// The shape after each conv block (activation and pool included) of an input of shape
// `input`; throws ShapeError (kernels/shape.h) naming the key at fault, with `block` set
// to the block's index.
struct CnnShapeError : ShapeError {
  CnnShapeError(size_t block, const ShapeError& e) : ShapeError(e), block(block) {}
  size_t block;
};
std::vector<Shape> cnn_block_shapes(Shape input, const std::vector<ConvSpec>& conv);
// A CNN on images of shape `input` (the data's): the conv blocks, flatten, the hidden
// dense layers, a dense layer to `classes` logits, softmax cross-entropy. Parameters:
// each conv layer's W (kernel, kernel, in channels, channels) then b (channels), then the
// dense layers' as in make_dense; initialised as make_dense does.
std::unique_ptr<Model> make_cnn(Shape input, const CnnSpec& spec, int classes);

// A linear model on sparse data (DeviceDataset::sparse()): logits z = x W + b over
// `features` inputs. Logistic: 1 output (binary labels 0/1); SoftmaxCrossEntropy:
// `classes` outputs. Parameters: W (features, outputs) row-major, then b (outputs); W is
// the row table (RowLayout {features, outputs}). Initial parameters are all zero.
std::unique_ptr<Model> make_sparse_linear(size_t features, int classes, DenseLoss loss);

}  // namespace asgd
