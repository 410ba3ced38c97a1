// kernels/layers/stack.cu — LayerStack and StackPass (see stack.h), PointerTables
// (layer.h), and the layers' shared descriptions.
#include "kernels/layers/stack.h"
#include <stdexcept>
#include "kernels/detail/backend.h"
#include "kernels/layers/sums.h"
#include "kernels/ops.h"

namespace asgd::layers {

PointerTables::PointerTables(ExecContext& ctx, size_t k) : ctx_(&ctx), host_(&ctx.impl().host_pointers), k_(k) {
  host_->clear();
}

void PointerTables::stage() { staged_ = ctx_->stage_pointers(host_->data(), host_->size()); }

std::string Layer::describe() const { return kind() + ": " + in_.text() + " -> " + out_.text(); }

std::vector<ParamBlock> Layer::param_blocks() const {
  if (num_params() == 0) return {};
  return {ParamBlock{offset_, num_params(), 1, false}};
}

std::vector<ParamBlock> LayerStack::param_blocks() const {
  std::vector<ParamBlock> out;
  for (const auto& l : layers_)
    for (const ParamBlock& b : l->param_blocks()) out.push_back(b);
  return out;
}

LayerStack::LayerStack(std::vector<std::unique_ptr<Layer>> layers) : layers_(std::move(layers)) {
  if (layers_.empty()) throw std::invalid_argument("a layer stack needs at least one layer");
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (l > 0 && layers_[l]->in_shape() != layers_[l - 1]->out_shape())
      throw std::invalid_argument("layer " + std::to_string(l) + " (" + layers_[l]->describe() +
                                  ") does not take layer " + std::to_string(l - 1) + "'s output " +
                                  layers_[l - 1]->out_shape().text());
    layers_[l]->set_param_offset(num_params_);
    num_params_ += layers_[l]->num_params();
  }
}

void LayerStack::init_params(uint64_t seed, std::vector<float>& w) const {
  w.assign(num_params_, 0.0f);
  uint32_t stream = 0;
  for (size_t l = 0; l < layers_.size(); ++l) {
    if (layers_[l]->num_params() == 0) continue;
    size_t next = l + 1;
    while (next < layers_.size() && layers_[next]->is_view()) ++next;
    const double gain = next < layers_.size() && layers_[next]->kind() == "relu" ? 2.0 : 1.0;
    layers_[l]->init_params(seed, stream++, gain, w.data() + layers_[l]->param_offset());
  }
}

double LayerStack::flops_per_sample() const {
  double f = 0;
  bool first_with_params = true;
  for (const auto& layer : layers_) {
    if (layer->num_params() == 0) continue;
    f += layer->flops_per_sample(/*d_input=*/!first_with_params);
    first_with_params = false;
  }
  return f;
}

size_t LayerStack::floats_per_sample(bool training) const {
  size_t f = 0;
  for (const auto& layer : layers_) {
    if (!layer->is_view()) f += layer->out_shape().size() * (training ? 2 : 1);  // at most: out and its gradient
    f += layer->own_floats_per_sample(training);
  }
  return f;
}

LayerStack::Bound LayerStack::bind(Workspace& ws, const Pass& p, const float* input, float* d_input,
                                   bool leave_output_bias) const {
  const size_t L = layers_.size(), rows = p.rows();
  Bound b;
  b.io = ws.take_host<LayerIO>("layer buffers", L);
  b.d_input = d_input;
  // Forward: each layer's output. `owned`: the current activation is a workspace buffer
  // (not the caller's input); `read_later`: its producer's backward reads it.
  const float* cur = input;
  bool owned = false, read_later = false;
  for (size_t l = 0; l < L; ++l) {
    const Layer& layer = *layers_[l];
    LayerIO& io = b.io[l];
    io.index = int(l);
    io.in = cur;
    if (layer.is_view()) {
      io.out = const_cast<float*>(cur);  // never written through
    } else if (layer.can_run_in_place() && owned && !read_later) {
      io.out = const_cast<float*>(cur);
      read_later = layer.backward_reads_out();
    } else {
      io.out = ws.take<float>("activation", rows * layer.out_shape().size(), int(l));
      owned = true;
      read_later = layer.backward_reads_out();
    }
    cur = io.out;
  }
  b.output = cur;
  // Backward: the gradient with respect to each layer's output, from the top down.
  if (p.training()) {
    float* d = ws.take<float>("d output", rows * out_shape().size(), int(L));
    b.d_output = d;
    for (size_t l = L; l-- > 0;) {
      const Layer& layer = *layers_[l];
      LayerIO& io = b.io[l];
      io.d_out = d;
      if (layer.is_view() || io.out == io.in)
        io.d_in = d;  // a view, or in place
      else if (l == 0)
        io.d_in = d_input;
      else
        io.d_in = ws.take<float>("d activation", rows * layer.in_shape().size(), int(l));
      d = io.d_in;
    }
  }
  // Fusion: an activation that runs in place over the output of a layer that ends with a
  // bias add is applied by that layer's kernels (its output buffer, and its gradient's,
  // are then the activation's).
  for (size_t l = 0; l + 1 < L; ++l) {
    const Act act = layers_[l + 1]->activation();
    if (act == Act::None || layers_[l]->bias_offset() == Layer::npos || b.io[l + 1].out != b.io[l].out) continue;
    b.io[l].act = act;
    b.io[l + 1].fused = true;
  }
  if (leave_output_bias && layers_[L - 1]->bias_offset() != Layer::npos && b.io[L - 1].act == Act::None) {
    b.io[L - 1].leave_bias = true;
    b.output_bias = layers_[L - 1]->bias_offset();
  }
  for (size_t l = 0; l < L; ++l) layers_[l]->bind(ws, p, b.io[l]);
  return b;
}

void LayerStack::forward(ExecContext& ctx, const Pass& p, const Bound& b) const {
  for (size_t l = 0; l < layers_.size(); ++l)
    if (!b.io[l].fused) layers_[l]->forward(ctx, p, b.io[l]);
}

void LayerStack::backward(ExecContext& ctx, const Pass& p, const Bound& b) const {
  PendingSums own(p.k);
  Pass q = p;
  if (!q.sums) q.sums = &own;
  for (size_t l = layers_.size(); l-- > 0;)
    if (!b.io[l].fused) layers_[l]->backward(ctx, q, b.io[l]);
  run_sums(ctx, *q.sums);
  // Views at the bottom pass the gradient through unchanged: it is still in their d_in.
  if (b.d_input && b.io[0].d_in != b.d_input) ops::copy(ctx, b.d_input, b.io[0].d_in, p.rows() * in_shape().size());
}

StackPass::StackPass(ExecContext& ctx, const LayerStack& stack, size_t k, size_t m, const float* const* w,
                     float* const* g, const float* input, float* d_input, bool leave_output_bias, bool tables)
    : ctx_(ctx), stack_(stack) {
  p_.k = k;
  p_.m = m;
  p_.w = w;
  p_.g = g;
  p_.w_table = w;  // without tables: not read; with them on CPU backends: stage_pointers gives them back
  p_.g_table = g;
  size_t w_section = 0, g_section = 0;
  tables = tables || k > 1;
  if (tables) {
    tables_.emplace(ctx, k);
    p_.tables = &*tables_;
    w_section = tables_->params(p_, 0);
    if (g) g_section = tables_->grads(p_, 0);
  }
  b_ = stack.bind(ctx.workspace(), p_, input, d_input, leave_output_bias);
  if (tables) {
    tables_->stage();
    p_.w_table = (*tables_)[w_section];
    if (g) p_.g_table = (*tables_)[g_section];
  }
}

}  // namespace asgd::layers
