// kernels/models/sequential.cu — the models made of layers: a LayerStack
// (kernels/layers/stack.h) under an output loss. make_dense builds the dense networks
// (linear, logistic and softmax regression, the MLP), make_cnn the CNNs. A gradient job
// gathers its minibatch's rows, runs the stack forward, the loss, and the stack backward,
// all in buffers of its workspace frame; a batch of k requests does the same over their
// k m rows at once (each layer's GEMMs as one batched call per product).
#include <algorithm>
#include <stdexcept>
#include "kernels/detail/backend.h"
#include "kernels/layers/loss.h"
#include "kernels/layers/stack.h"
#include "kernels/layers/sums.h"
#include "kernels/model.h"
#include "kernels/models/batch_model.h"

namespace asgd {
namespace {

using layers::LayerStack;

// rows (m, d) <- x[ids[r]] (the minibatch gathered)
struct GatherRows {
  const float* x;
  const int32_t* ids;
  float* out;
  size_t d;
  ASGD_HD void operator()(size_t r, size_t c) const { out[r * d + c] = x[size_t(ids[r]) * d + c]; }
};

// Evaluation runs over chunks of rows whose workspace stays under this many floats
// (16 MiB), and at most kEvalChunk rows (sums are added chunk by chunk, in order).
constexpr size_t kEvalChunk = 1024;
constexpr size_t kEvalWorkspaceFloats = size_t(1) << 22;

class Sequential final : public BatchModel {
 public:
  // exact_shape: the data's samples must have the input's shape (a CNN), not only its size.
  Sequential(std::string name, LayerStack stack, DenseLoss loss, bool exact_shape)
      : name_(std::move(name)),
        stack_(std::move(stack)),
        loss_(loss, int(stack_.out_shape().size())),
        exact_shape_(exact_shape) {
    const size_t per_row = stack_.floats_per_sample(false) + 2;  // + row loss and correct
    eval_chunk_ = std::max<size_t>(1, std::min(kEvalChunk, kEvalWorkspaceFloats / per_row));
  }

  std::string name() const override { return name_; }
  size_t num_params() const override { return stack_.num_params(); }
  std::vector<ParamBlock> param_blocks() const override { return stack_.param_blocks(); }
  bool is_classifier() const override { return loss_.is_classifier(); }
  void init_params(uint64_t seed, std::vector<float>& w) const override { stack_.init_params(seed, w); }
  double flops_per_sample() const override { return stack_.flops_per_sample(); }
  size_t floats_per_sample(bool training) const override { return stack_.floats_per_sample(training); }

  // BatchModel::loss_grad_batch: k requests of one minibatch size m as one pass, their rows
  // stacked (k m), each layer's GEMMs one batched GEMM (request i's rows against its own
  // parameters), every other pass once over all rows. Per row and per GEMM the arithmetic
  // is loss_grad's, so on CPU backends every gradient and loss is bit-identical to it. On
  // CUDA the batched GEMMs may round differently from k loss_grad calls (results stay
  // deterministic for a given batch).

  EvalSums evaluate(ExecContext& ctx, const float* w, const DeviceDataset* data, size_t begin,
                    size_t end) const override {
    check_data(data);
    EvalSums sums;
    const float* const ws[1] = {w};
    for (size_t r0 = begin; r0 < end; r0 += eval_chunk_) {
      const size_t m = std::min(eval_chunk_, end - r0);
      Workspace::Frame frame(ctx.workspace());
      Workspace& space = ctx.workspace();
      layers::StackPass pass(ctx, stack_, 1, m, ws, nullptr, data->x.data() + r0 * data->dim, nullptr,
                             /*leave_output_bias=*/true);
      float* row_loss = space.take<float>("row loss", m);
      float* row_correct = space.take<float>("row correct", m);
      pass.forward();
      loss_.apply(ctx, pass.output(), m, data->y.data() + r0, nullptr, row_loss, row_correct, nullptr, 1.0f,
                  output_bias(pass));
      layers::add_evaluation_sums(ctx, row_loss, row_correct, m, sums);
    }
    return sums;
  }

 private:
  void check_data(const DeviceDataset* data) const {
    if (!data) throw std::invalid_argument("model " + name_ + ": no dataset");
    if (data->sparse())
      throw std::invalid_argument("model " + name_ + " reads dense samples; the data is sparse (use a sparse model)");
    const Shape in = stack_.in_shape();
    if (data->dim != in.size())
      throw std::invalid_argument("model " + name_ + " takes " + std::to_string(in.size()) +
                                  " features per sample, the data has " + std::to_string(data->dim));
    if (exact_shape_ && data->shape != in)
      throw std::invalid_argument("model " + name_ + " takes " + in.text() + " images, the data's are " +
                                  data->shape.text());
  }

  // The requests' loss and gradient; all of the same minibatch size.
  void run(ExecContext& ctx, const DeviceDataset* data, GradRequest* reqs, size_t k) const override {
    check_data(data);
    Workspace::Frame frame(ctx.workspace());
    Workspace& space = ctx.workspace();
    const size_t m = reqs[0].m, rows = k * m, dim = data->dim;

    const int32_t* ids = nullptr;
    if (k == 1) {
      ids = ctx.stage_ids(reqs[0].ids, m);
    } else {
      int32_t* all = space.take_host<int32_t>("batch sample ids", rows);
      for (size_t i = 0; i < k; ++i) std::copy(reqs[i].ids, reqs[i].ids + m, all + i * m);
      ids = ctx.stage_ids(all, rows);
    }
    const float** w = space.take_host<const float*>("request parameters", k);
    float** g = space.take_host<float*>("request gradients", k);
    for (size_t i = 0; i < k; ++i) {
      w[i] = reqs[i].w;
      g[i] = reqs[i].grad;
    }
    float* input = space.take<float>("minibatch", rows * dim);
    const bool graph = ctx.graph_capture();
    layers::StackPass pass(ctx, stack_, k, m, w, g, input, nullptr, /*leave_output_bias=*/true, /*tables=*/graph);
    float* row_loss = space.take<float>("row loss", rows);
    double* loss_sums = space.take<double>("request loss sums", k);

    // Launches: the gather; the stack's forward, the top layer's bias added by the loss's
    // kernel; its backward, whose last column-sum launch also sums each request's row
    // losses; then one copy of the k sums back, the job's only wait. With graph capture,
    // all of them one CUDA graph: every pointer they read is in this key, or in the
    // pointer tables (staged above) and the ids (staged above).
    auto work = [&] {
      detail::for_each_2d(ctx, rows, dim, GatherRows{data->x.data(), ids, input, dim});
      pass.forward();
      loss_.apply(ctx, pass.output(), rows, data->y.data(), ids, row_loss, nullptr, pass.d_output(), 1.0f / float(m),
                  output_bias(pass));
      layers::PendingSums sums(k);
      layers::queue_sum(ctx, sums, layers::RowSumJob{row_loss, m, loss_sums});
      pass.backward(&sums);
    };
    if (!graph) {
      work();
    } else {
      // The workspace's buffers are where they were for the same key: the same takes from
      // the same first address, in blocks of the same total size.
      detail::GraphKey key;
      key << this << k << m << data->x.data() << data->y.data() << ids << input << row_loss << loss_sums
          << pass.pass().w_table << pass.pass().g_table << ctx.workspace().reserved_bytes();
      detail::run_captured(ctx, key, work);
    }

    double* host = space.take_host<double>("request loss sums, host", k);
    detail::copy_to_host(ctx, host, loss_sums, k * sizeof(double));
    for (size_t i = 0; i < k; ++i) reqs[i].loss = host[i] / double(m);
  }

  // The bias the stack's top layer left for the loss (StackPass's leave_output_bias).
  static layers::OutputBias output_bias(const layers::StackPass& pass) {
    layers::OutputBias b;
    if (pass.output_bias() == layers::Layer::npos) return b;
    const layers::Pass& p = pass.pass();
    if (p.tables)
      b.table = p.w_table;
    else
      b.single = p.w[0];
    b.offset = pass.output_bias();
    b.m = p.m;
    return b;
  }

  std::string name_;
  LayerStack stack_;
  layers::OutputLoss loss_;
  bool exact_shape_;
  size_t eval_chunk_ = kEvalChunk;
};

std::vector<std::unique_ptr<layers::Layer>>& add_activation(std::vector<std::unique_ptr<layers::Layer>>& v,
                                                            Activation a) {
  Shape s = v.back()->out_shape();
  v.push_back(a == Activation::ReLU ? layers::make_relu(s) : layers::make_tanh(s));
  return v;
}

}  // namespace

std::unique_ptr<Model> make_dense(std::vector<int> sizes, DenseLoss loss, Activation activation) {
  if (sizes.size() < 2) throw std::invalid_argument("dense model needs >= 2 layer sizes");
  for (int s : sizes)
    if (s < 1) throw std::invalid_argument("dense model layer sizes must be >= 1");
  std::vector<std::unique_ptr<layers::Layer>> v;
  for (size_t l = 1; l < sizes.size(); ++l) {
    v.push_back(layers::make_dense(Shape{1, 1, sizes[l - 1]}, sizes[l]));
    if (l + 1 < sizes.size()) add_activation(v, activation);
  }
  std::string name = sizes.size() > 2              ? "mlp"
                     : loss == DenseLoss::Squared  ? "linear"
                     : loss == DenseLoss::Logistic ? "logistic"
                                                   : "softmax";
  return std::make_unique<Sequential>(name, LayerStack(std::move(v)), loss, false);
}

CnnSpec lenet5() {
  CnnSpec s;
  s.conv = {ConvSpec{6, 5, 1, 2, 2}, ConvSpec{16, 5, 1, 0, 2}};
  s.hidden = {120, 84};
  s.activation = Activation::ReLU;
  return s;
}

std::vector<Shape> cnn_block_shapes(Shape input, const std::vector<ConvSpec>& conv) {
  std::vector<Shape> out;
  Shape s = input;
  for (size_t i = 0; i < conv.size(); ++i) {
    try {
      const ConvSpec& c = conv[i];
      s = conv2d_out_shape(s, c.channels, c.kernel, c.stride, c.padding);
      if (c.pool != 1) s = maxpool_out_shape(s, c.pool);
    } catch (const ShapeError& e) {
      throw CnnShapeError(i, e);
    }
    out.push_back(s);
  }
  return out;
}

std::unique_ptr<Model> make_cnn(Shape input, const CnnSpec& spec, int classes) {
  if (classes < 2) throw std::invalid_argument("cnn: needs >= 2 classes, got " + std::to_string(classes));
  cnn_block_shapes(input, spec.conv);  // a clear error before any layer is made
  std::vector<std::unique_ptr<layers::Layer>> v;
  Shape s = input;
  for (const ConvSpec& c : spec.conv) {
    v.push_back(layers::make_conv2d(s, c.channels, c.kernel, c.stride, c.padding));
    add_activation(v, spec.activation);
    if (c.pool != 1) v.push_back(layers::make_maxpool(v.back()->out_shape(), c.pool));
    s = v.back()->out_shape();
  }
  v.push_back(layers::make_flatten(s));
  for (int h : spec.hidden) {
    if (h < 1) throw std::invalid_argument("cnn: hidden layer sizes must be >= 1, got " + std::to_string(h));
    v.push_back(layers::make_dense(v.back()->out_shape(), h));
    add_activation(v, spec.activation);
  }
  v.push_back(layers::make_dense(v.back()->out_shape(), classes));
  return std::make_unique<Sequential>("cnn", LayerStack(std::move(v)), DenseLoss::SoftmaxCrossEntropy, true);
}

}  // namespace asgd
