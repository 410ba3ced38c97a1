// kernels/layers/stack.h — LayerStack: layers in order, each one's output the next one's
// input, over one flat parameter vector (each layer's slice in order). It sets up a
// pass's buffers in the job's workspace, then runs forward and backward. Where a layer
// may run in place (an activation right after a layer whose backward does not read its
// output) it writes over its input; an activation that runs in place over a dense or
// convolution layer's output is done by that layer's own kernels (LayerIO::act: one
// launch each way instead of two), and the bias gradients that need no activation's
// backward wait for the next column-sum launch (kernels/layers/sums.h). StackPass runs
// one pass. The models (kernels/models/sequential.cu) and the layer tests use them. Plain C++.
#pragma once
#include <memory>
#include <optional>
#include <vector>
#include "kernels/layers/layer.h"

namespace asgd::layers {

class LayerStack {
 public:
  // Throws std::invalid_argument when one layer's output shape is not the next one's input.
  explicit LayerStack(std::vector<std::unique_ptr<Layer>> layers);
  const std::vector<std::unique_ptr<Layer>>& layers() const { return layers_; }
  Shape in_shape() const { return layers_.front()->in_shape(); }
  Shape out_shape() const { return layers_.back()->out_shape(); }
  size_t num_params() const { return num_params_; }
  // Every layer's parameter tensors, in order (Layer::param_blocks).
  std::vector<ParamBlock> param_blocks() const;
  // Parameterised layer j (in order) draws from Rng (seed, Init, j, 0) with gain 2 when a
  // ReLU follows it (views skipped), else 1. w: host, resized to num_params().
  void init_params(uint64_t seed, std::vector<float>& w) const;
  // GEMM multiply-adds x 2 of one sample's forward and backward pass; the gradient with
  // respect to the stack's input is not computed, so not counted.
  double flops_per_sample() const;
  // Floats of workspace one sample's pass takes (activations, gradients, layers' own).
  size_t floats_per_sample(bool training) const;

  // A pass's buffers: each layer's LayerIO, the top's output and (training) the gradient
  // with respect to it, which the caller writes before backward.
  struct Bound {
    LayerIO* io = nullptr;
    const float* output = nullptr;
    float* d_output = nullptr;
    float* d_input = nullptr;
    size_t output_bias = Layer::npos;  // see bind's leave_output_bias
  };
  // Takes the pass's buffers from ws (in the caller's frame) and registers the layers'
  // pointer tables in p.tables (if set: the caller stages them before forward). input
  // (rows, in size) is only read. d_input: where backward writes d loss / d input (null:
  // not computed). p.training() decides whether gradient buffers are taken.
  // leave_output_bias: when the top layer ends with a bias add (and no activation), it
  // leaves it out of the output, and Bound::output_bias is where in each request's
  // parameters that bias starts: the consumer adds it (the output loss, in its own kernel).
  Bound bind(Workspace& ws, const Pass& p, const float* input, float* d_input, bool leave_output_bias = false) const;
  void forward(ExecContext& ctx, const Pass& p, const Bound& b) const;
  // From b.d_output down: every layer's parameter gradient into p.g, and d_input. Sums
  // queued in p.sums before the call (a loss sum) run with the layers' own, in their
  // launches; all have run when it returns.
  void backward(ExecContext& ctx, const Pass& p, const Bound& b) const;

 private:
  std::vector<std::unique_ptr<Layer>> layers_;
  size_t num_params_ = 0;
};

// One pass of a stack over k requests of m samples, in buffers of the caller's open
// workspace frame: the Pass (with its pointer tables staged in one copy when k > 1 or asked
// for) and
// the bound buffers. forward(); then, training, the caller writes d_output() and calls
// backward().
class StackPass {
 public:
  // w: host array of k parameter vectors; g: of k gradient vectors (written by
  // backward), or null for a forward-only pass; input (k m, in size) is only read;
  // d_input: where backward writes d loss / d input (null: not computed). tables: pointer
  // tables even for k = 1 (a pass to be captured as a CUDA graph: Pass::tables).
  StackPass(ExecContext& ctx, const LayerStack& stack, size_t k, size_t m, const float* const* w, float* const* g,
            const float* input, float* d_input, bool leave_output_bias = false, bool tables = false);
  StackPass(const StackPass&) = delete;
  StackPass& operator=(const StackPass&) = delete;
  const Pass& pass() const { return p_; }
  const float* output() const { return b_.output; }  // (k m, out size)
  const LayerIO& io(size_t layer) const { return b_.io[layer]; }
  float* d_output() const { return b_.d_output; }  // (k m, out size), training
  // With leave_output_bias: where the bias the output lacks starts in each request's
  // parameters (Layer::npos: it lacks none).
  size_t output_bias() const { return b_.output_bias; }
  void forward() { stack_.forward(ctx_, p_, b_); }
  // sums: jobs to run with the backward pass's own sums (null: none).
  void backward(PendingSums* sums = nullptr) {
    Pass p = p_;
    p.sums = sums;
    stack_.backward(ctx_, p, b_);
  }

 private:
  ExecContext& ctx_;
  const LayerStack& stack_;
  Pass p_;
  std::optional<PointerTables> tables_;
  LayerStack::Bound b_;
};

}  // namespace asgd::layers
