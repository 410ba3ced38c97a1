// kernels/layers/layer.h — a layer of a model: its shapes, its slice of the model's flat
// parameter vector, and its forward and backward passes over k requests at once (k
// minibatches of m samples, each with its own parameters: Model::loss_grad_batch; k = 1
// for loss_grad and evaluate). Each layer is written once for every backend (its .cu file
// compiles as CUDA or as C++); the backend maps its functors and GEMMs. The layers are
// composed by LayerStack (kernels/layers/stack.h); the scalar references the tests hold
// them to are in kernels/layers/layers_ref.h.
// Plain C++: tests include it. Not here: losses (kernels/layers/loss.h), the model.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "kernels/exec.h"
#include "kernels/shape.h"

namespace asgd::layers {

using asgd::Shape;  // kernels/shape.h: one sample's activation, channels last

class PointerTables;
struct PendingSums;  // kernel-internal (kernels/layers/sums.h)

// An activation that a layer with a GEMM applies in its own kernels (LayerStack fuses a
// ReLU or tanh layer into the dense or convolution layer below it), or None.
enum class Act { None, ReLU, Tanh };

// One pass over k requests of m samples each. Activations are stacked: request i's rows
// are rows [i m, (i+1) m) of every (k m, size) activation.
struct Pass {
  size_t k = 1, m = 0;
  const float* const* w = nullptr;  // host array of k parameter vectors (backend memory)
  float* const* g = nullptr;        // host array of k gradient vectors; null: forward only
  // The same two arrays as tables in backend memory (CUDA: staged copies; CPU: w and g).
  const float* const* w_table = nullptr;
  float* const* g_table = nullptr;
  // Where layers register their GEMM operands: set when k > 1, and for a pass to be
  // captured as a CUDA graph (its launches then read every request's pointers from backend
  // memory, so a replay can take other parameters); null: k = 1, plain pointers.
  PointerTables* tables = nullptr;
  // Backward: column sums a layer leaves to a later kernel (sums.h); LayerStack::backward
  // always sets it.
  PendingSums* sums = nullptr;
  size_t rows() const { return k * m; }
  bool training() const { return g != nullptr; }
};

// The pointer tables a batched pass gives its batched GEMMs (detail::gemm_batched reads
// each operand's k pointers from backend memory). Layers register sections while they
// bind; then one copy stages all of them (StackPass). Uses the context's host staging
// vector (kept across calls, so a warm pass allocates nothing) and stage_pointers' table
// in backend memory: one pass at a time per context.
class PointerTables {
 public:
  PointerTables(ExecContext& ctx, size_t k);  // clears the staging vector
  PointerTables(const PointerTables&) = delete;
  PointerTables& operator=(const PointerTables&) = delete;
  // A section of k pointers: base + i stride (request i's rows of a stacked buffer).
  size_t stacked(const float* base, size_t stride) {
    return add([&](size_t i) { return const_cast<float*>(base) + i * stride; });
  }
  // Request i's parameters or gradient, from offset.
  size_t params(const Pass& p, size_t offset) {
    return add([&](size_t i) { return const_cast<float*>(p.w[i]) + offset; });
  }
  size_t grads(const Pass& p, size_t offset) {
    return add([&](size_t i) { return p.g[i] + offset; });
  }
  // Copies every section to backend memory (after the last registration).
  void stage();
  float* const* operator[](size_t section) const { return staged_ + section; }

 private:
  template <class F>
  size_t add(F&& pointer_of) {
    size_t at = host_->size();
    for (size_t i = 0; i < k_; ++i) host_->push_back(pointer_of(i));
    return at;
  }
  ExecContext* ctx_;
  std::vector<float*>* host_;
  size_t k_;
  float* const* staged_ = nullptr;
};

// A layer's buffers in one pass, set up by LayerStack::bind and the layer's own bind.
struct LayerIO {
  const float* in = nullptr;          // (rows, in size)
  float* out = nullptr;               // (rows, out size); may be `in` (a layer that runs in place)
  const float* d_out = nullptr;       // training: d loss / d out (rows, out size)
  float* d_in = nullptr;              // training: written by backward (null: not wanted); may be d_out
  void* own[2] = {nullptr, nullptr};  // the layer's own buffers (conv's columns, pool's argmax)
  int index = 0;                      // the layer's place in its stack (names its workspace buffers)
  // Fusion (LayerStack::bind). act: the activation layer above runs in this layer's kernels
  // (in place: out is then the activation's output, and d_out holds d loss / d that
  // output on entry to backward, overwritten with d loss / d this layer's output).
  // fused: this activation layer's work is done by the layer below (forward and backward
  // do nothing). leave_bias: the top layer leaves its bias for the stack's consumer to add
  // (StackPass::output_bias).
  Act act = Act::None;
  bool fused = false;
  bool leave_bias = false;
  size_t table[6] = {0, 0, 0, 0, 0, 0};  // its pointer-table sections (Pass::tables)
};

class Layer {
 public:
  virtual ~Layer() = default;
  virtual std::string kind() const = 0;  // "dense", "conv2d", "maxpool", "relu", "tanh", "flatten"
  virtual std::string describe() const;  // kind and shapes, for messages
  const Shape& in_shape() const { return in_; }
  const Shape& out_shape() const { return out_; }
  virtual size_t num_params() const { return 0; }
  // Its parameter tensors (kernels/model.h ParamBlock), offsets from param_offset(); by
  // default one vector of num_params() (none without parameters).
  virtual std::vector<ParamBlock> param_blocks() const;
  // Where this layer's parameters start in the model's vector (set by LayerStack).
  size_t param_offset() const { return offset_; }
  void set_param_offset(size_t offset) { offset_ = offset; }

  // out is in, and d_in is d_out (no computation): flatten.
  virtual bool is_view() const { return false; }
  // May write out over in and d_in over d_out (elementwise layers whose backward reads
  // only out and d_out). LayerStack decides when it does.
  virtual bool can_run_in_place() const { return false; }
  // Whether backward reads `out` (then no later layer may overwrite it in place).
  virtual bool backward_reads_out() const { return false; }
  // An activation layer's kind (None: not one).
  virtual Act activation() const { return Act::None; }
  // Where the bias of a layer whose forward ends with a bias add starts in the model's
  // parameters (dense, conv2d); such a layer can also apply an activation in its own kernels
  // (LayerIO::act) or leave its bias to the consumer (LayerIO::leave_bias). npos: none.
  static constexpr size_t npos = size_t(-1);
  virtual size_t bias_offset() const { return npos; }
  // Its layer l's parameters from Rng (seed, Init, stream, 0); gain is the variance
  // factor of the activation that follows (2 for ReLU, else 1). w: host, num_params().
  virtual void init_params(uint64_t seed, uint32_t stream, double gain, float* w) const {}
  // Floats of its own buffers per sample (bind), for sizing evaluation chunks.
  virtual size_t own_floats_per_sample(bool training) const { return 0; }
  // Multiply-adds x 2 of its GEMMs per sample: forward, and backward (weights, and the
  // input's gradient when d_input).
  virtual double flops_per_sample(bool d_input) const { return 0; }

  // Takes its own buffers from the workspace and registers its pointer tables (Pass::tables);
  // io.in, out, d_out, d_in are set already.
  virtual void bind(Workspace& ws, const Pass& p, LayerIO& io) const {}
  virtual void forward(ExecContext& ctx, const Pass& p, const LayerIO& io) const = 0;
  // d_in (if wanted) and, for a layer with parameters, request i's gradient slice in
  // p.g[i] from param_offset() (written, not added).
  virtual void backward(ExecContext& ctx, const Pass& p, const LayerIO& io) const = 0;

 protected:
  Layer(Shape in, Shape out) : in_(in), out_(out) {}
  Shape in_, out_;
  size_t offset_ = 0;
};

// The layers. Each throws std::invalid_argument when its shapes do not work out.
// in -> out features (a flat input of in.size()): W (in, out) row-major, then b (out).
std::unique_ptr<Layer> make_dense(Shape in, int out);
// Convolution with `channels` filters of kernel x kernel over the input's channels,
// stride and zero padding on every side; output (H + 2p - k) / s + 1 per side.
// Parameters: W (kernel, kernel, in channels, channels) row-major, i.e. (K, channels) with
// K = kernel^2 in channels in the order of the input's HWC window, then b (channels).
std::unique_ptr<Layer> make_conv2d(Shape in, int channels, int kernel, int stride, int padding);
// Max over non-overlapping window x window blocks (stride = window); rows and columns
// past the last whole block are dropped. Ties go to the first in row-major order.
std::unique_ptr<Layer> make_maxpool(Shape in, int window);
std::unique_ptr<Layer> make_relu(Shape in);
std::unique_ptr<Layer> make_tanh(Shape in);
// A view: the same floats as a flat vector of in.size() features.
std::unique_ptr<Layer> make_flatten(Shape in);

}  // namespace asgd::layers
