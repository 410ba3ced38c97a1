// kernels/models/dense.cu — a dense ReLU network with one of three output losses. With no
// hidden layer it is linear regression (Squared), logistic regression (Logistic) or
// softmax regression (SoftmaxCrossEntropy); with hidden layers it is the MLP.
// Parameter layout, per layer l (in_l -> out_l), in order: W_l (in_l, out_l) row-major,
// then b_l (out_l). GEMMs go to cuBLAS/OpenBLAS; everything else is Thrust functors.
#include <algorithm>
#include <cmath>
#include <vector>
#include "kernels/detail/backend.h"
#include "kernels/layers/loss.h"
#include "kernels/model.h"
#include "kernels/ops.h"
#include "kernels/rng.h"

namespace asgd {
namespace {

// rows (m, d) <- x[ids[r]] (gathered minibatch). On the GPU one element per thread; on
// the CPU one row per call, so the inner copy is a contiguous, vectorised loop.
struct GatherElements {
  const float* x; const int32_t* ids; float* out; size_t d;
  ASGD_HD void operator()(size_t k) const {
    size_t r = k / d, c = k % d;
    out[k] = x[size_t(ids[r]) * d + c];
  }
};
#if !defined(ASGD_BACKEND_CUDA)
struct GatherRows {
  const float* x; const int32_t* ids; float* out; size_t d;
  ASGD_HD void operator()(size_t r) const {
    const float* src = x + size_t(ids[r]) * d;
    float* dst = out + r * d;
    for (size_t c = 0; c < d; ++c) dst[c] = src[c];
  }
};
#endif

// z (m, n) += b; ReLU if hidden. On the GPU one element per thread; on the CPU one row
// per call, so the inner loop has no division and vectorises.
struct BiasActivation {
  float* z; const float* b; size_t n; bool relu;
  ASGD_HD void operator()(size_t k) const {
    float v = z[k] + b[k % n];
    z[k] = (relu && v < 0.0f) ? 0.0f : v;
  }
};
#if !defined(ASGD_BACKEND_CUDA)
struct BiasActivationRows {
  float* z; const float* b; size_t n; bool relu;
  void operator()(size_t r) const {
    float* zr = z + r * n;
    if (relu) {
      for (size_t c = 0; c < n; ++c) {
        float v = zr[c] + b[c];
        zr[c] = v < 0.0f ? 0.0f : v;
      }
    } else {
      for (size_t c = 0; c < n; ++c) zr[c] += b[c];
    }
  }
};
#endif

// db[c] = sum over rows of dz[r, c], rows in order (deterministic)
struct ColumnSums {
  const float* dz; float* db; size_t m; size_t n;
  ASGD_HD void operator()(size_t c) const {
    float s = 0.0f;
    for (size_t r = 0; r < m; ++r) s += dz[r * n + c];
    db[c] = s;
  }
};
#if !defined(ASGD_BACKEND_CUDA)
// The same sums, the same order of additions per column (so the same bits), walking
// the rows contiguously: one call does all columns, and the inner loop vectorises.
struct ColumnSumsRowwise {
  const float* dz; float* db; size_t m; size_t n;
  void operator()(size_t) const {
    for (size_t c = 0; c < n; ++c) db[c] = 0.0f;
    for (size_t r = 0; r < m; ++r) {
      const float* row = dz + r * n;
      for (size_t c = 0; c < n; ++c) db[c] += row[c];
    }
  }
};
#endif

#if defined(ASGD_BACKEND_CUDA)
// Batched twins for loss_grad_batch: k requests' rows lie one after another (m rows
// each), and request i's parameters and gradient are found through a pointer table.
// z (k*m, n) += b_i; ReLU if hidden. b_i = w[i] + b_off.
struct BiasActivationBatched {
  float* z; float* const* w; size_t b_off; size_t n; size_t m; bool relu;
  ASGD_HD void operator()(size_t e) const {
    size_t r = e / n, c = e % n;
    float v = z[e] + w[r / m][b_off + c];
    z[e] = (relu && v < 0.0f) ? 0.0f : v;
  }
};
// grad[i][b_off + c] = sum over request i's rows of dz[r, c], rows in order.
struct ColumnSumsBatched {
  const float* dz; float* const* grad; size_t b_off; size_t m; size_t n;
  ASGD_HD void operator()(size_t e) const {
    size_t i = e / n, c = e % n;
    const float* d = dz + i * m * n + c;
    float s = 0.0f;
    for (size_t r = 0; r < m; ++r) s += d[r * n];
    grad[i][b_off + c] = s;
  }
};
// out[i] = sum of request i's row losses, in row order, in double.
struct RequestLossSums {
  const float* row_loss; double* out; size_t m;
  ASGD_HD void operator()(size_t i) const {
    double s = 0.0;
    for (size_t r = 0; r < m; ++r) s += row_loss[i * m + r];
    out[i] = s;
  }
};
#endif

// da (m, n) *= relu'(a): a is the post-ReLU activation (a select, so it vectorises)
struct ReluBackward {
  float* da; const float* a;
  ASGD_HD void operator()(size_t k) const { da[k] = a[k] > 0.0f ? da[k] : 0.0f; }
};

constexpr size_t kEvalChunk = 1024;  // rows per forward pass during evaluation

class Dense final : public Model {
 public:
  Dense(std::vector<int> layers, DenseLoss loss)
      : layers_(std::move(layers)), loss_(loss), out_(loss, checked_outputs(layers_)) {
    size_t off = 0;
    for (size_t l = 0; l + 1 < layers_.size(); ++l) {
      w_off_.push_back(off);
      off += size_t(layers_[l]) * layers_[l + 1];
      b_off_.push_back(off);
      off += layers_[l + 1];
    }
    num_params_ = off;
  }

  std::string name() const override {
    if (layers_.size() > 2) return "mlp";
    return loss_ == DenseLoss::Squared ? "linear"
           : loss_ == DenseLoss::Logistic ? "logistic" : "softmax";
  }
  size_t num_params() const override { return num_params_; }
  bool is_classifier() const override { return loss_ != DenseLoss::Squared; }

  // He-normal weights for ReLU layers (std sqrt(2/in)), sqrt(1/in) for the output layer;
  // zero biases. Stream: (seed, Init, layer, 0).
  void init_params(uint64_t seed, std::vector<float>& w) const override {
    w.assign(num_params_, 0.0f);
    size_t L = layers_.size() - 1;
    for (size_t l = 0; l < L; ++l) {
      double fan_in = layers_[l];
      double std = std::sqrt((l + 1 < L ? 2.0 : 1.0) / fan_in);
      Rng rng(seed, RngPurpose::Init, uint32_t(l), 0);
      size_t count = size_t(layers_[l]) * layers_[l + 1];
      for (size_t i = 0; i < count; ++i) w[w_off_[l] + i] = float(std * rng.normal());
    }
  }

  double loss_grad(ExecContext& ctx, const float* w, const DeviceDataset* data,
                   const int32_t* host_ids, size_t m, const NoiseKey&,
                   float* grad) const override {
    check_data(data);
    const int32_t* ids = ctx.stage_ids(host_ids, m);
    size_t L = layers_.size() - 1;
    // activations: slot 1 + l holds a_l (m, layers_[l]); a_0 is the gathered input
    float* a0 = ctx.scratch(1, m * layers_[0]);
#if defined(ASGD_BACKEND_CUDA)
    detail::for_each_index(ctx, m * layers_[0], GatherElements{data->x.data(), ids, a0, size_t(layers_[0])});
#else
    detail::for_each_index(ctx, m, GatherRows{data->x.data(), ids, a0, size_t(layers_[0])});
#endif
    forward(ctx, w, a0, m, /*first_slot=*/1);
    int k = layers_.back();
    float* zl = ctx.scratch(1 + int(L), m * k);
    float* row_loss = ctx.scratch(0, m);
    // deltas: slot 2 + L + l holds dz_l (m, layers_[l])
    float* dz = ctx.scratch(2 + int(L) + int(L), m * k);
    out_.apply(ctx, zl, m, data->y.data(), ids, row_loss, nullptr, dz, 1.0f / float(m));
    for (size_t l = L; l >= 1; --l) {
      int in = layers_[l - 1], out = layers_[l];
      const float* a_prev = ctx.scratch(1 + int(l - 1), m * in);
      float* dz_l = ctx.scratch(2 + int(L) + int(l), m * out);
      // dW_l = a_{l-1}^T dz_l   (in, out)
      detail::gemm(ctx, true, false, in, out, int(m), 1.0f, a_prev, in, dz_l, out, 0.0f,
                   grad + w_off_[l - 1], out);
#if defined(ASGD_BACKEND_CUDA)
      detail::for_each_index(ctx, out, ColumnSums{dz_l, grad + b_off_[l - 1], m, size_t(out)});
#else
      detail::for_each_index(ctx, 1, ColumnSumsRowwise{dz_l, grad + b_off_[l - 1], m, size_t(out)});
#endif
      if (l > 1) {
        float* dz_prev = ctx.scratch(2 + int(L) + int(l - 1), m * in);
        // da_{l-1} = dz_l W_l^T   (m, in)
        detail::gemm(ctx, false, true, int(m), in, out, 1.0f, dz_l, out, w + w_off_[l - 1],
                     out, 0.0f, dz_prev, in);
        detail::for_each_index(ctx, m * in, ReluBackward{dz_prev, a_prev});
      }
    }
    return ops::sum(ctx, row_loss, m) / double(m);
  }

  // k requests of one minibatch size m as one pass: their rows stacked (k*m), each
  // layer's GEMMs as one batched GEMM (request i's slice against its own W_l), each
  // elementwise pass once over all rows. Per row and per GEMM the arithmetic is
  // loss_grad's, so on CPU backends every gradient and loss is bit-identical to it. On
  // CUDA the batched GEMM and the loss sums may round differently from k loss_grad calls
  // (results stay deterministic for a given batch). Other sizes: one request at a time.
  void loss_grad_batch(ExecContext& ctx, const DeviceDataset* data, GradRequest* reqs,
                       size_t k) const override {
    const size_t m = k > 0 ? reqs[0].m : 0;
    bool same_m = k > 1 && m > 0;
    for (size_t i = 1; same_m && i < k; ++i) same_m = reqs[i].m == m;
    if (!same_m) return Model::loss_grad_batch(ctx, data, reqs, k);
    check_data(data);
    auto& im = ctx.impl();
    const size_t L = layers_.size() - 1;
    const size_t rows = k * m;

    im.host_ids.resize(rows);
    for (size_t i = 0; i < k; ++i) std::copy(reqs[i].ids, reqs[i].ids + m, im.host_ids.begin() + i * m);
    const int32_t* ids = ctx.stage_ids(im.host_ids.data(), rows);

    // Scratch as in loss_grad, k times the rows: a_l in slot 1 + l, dz_l in 2 + L + l.
    std::vector<float*> act(L + 1), delta(L + 1, nullptr);
    for (size_t l = 0; l <= L; ++l) act[l] = ctx.scratch(1 + int(l), rows * layers_[l]);
    for (size_t l = 1; l <= L; ++l) delta[l] = ctx.scratch(2 + int(L + l), rows * layers_[l]);
    float* row_loss = ctx.scratch(0, rows);

    // Pointer tables, one section of k per operand: the parameters and gradients (base),
    // and per layer W_l, dW_l and the slices of a_l and dz_l.
    auto& table = im.host_pointers;
    table.clear();
    auto section = [&](auto&& pointer_of) {
      size_t at = table.size();
      for (size_t i = 0; i < k; ++i) table.push_back(pointer_of(i));
      return at;
    };
    [[maybe_unused]] const size_t w_base = section([&](size_t i) { return const_cast<float*>(reqs[i].w); });
    [[maybe_unused]] const size_t g_base = section([&](size_t i) { return reqs[i].grad; });
    std::vector<size_t> w_sec(L + 1), gw_sec(L + 1), a_sec(L + 1), d_sec(L + 1);
    for (size_t l = 0; l <= L; ++l) {
      a_sec[l] = section([&](size_t i) { return act[l] + i * m * layers_[l]; });
      if (l == 0) continue;
      w_sec[l] = section([&](size_t i) { return const_cast<float*>(reqs[i].w) + w_off_[l - 1]; });
      gw_sec[l] = section([&](size_t i) { return reqs[i].grad + w_off_[l - 1]; });
      d_sec[l] = section([&](size_t i) { return delta[l] + i * m * layers_[l]; });
    }
    float* const* ptr = ctx.stage_pointers(table.data(), table.size());
    const int M = int(m);

#if defined(ASGD_BACKEND_CUDA)
    detail::for_each_index(ctx, rows * layers_[0], GatherElements{data->x.data(), ids, act[0], size_t(layers_[0])});
#else
    detail::for_each_index(ctx, rows, GatherRows{data->x.data(), ids, act[0], size_t(layers_[0])});
#endif
    for (size_t l = 1; l <= L; ++l) {  // forward: a_l = act(a_{l-1} W_l + b_l)
      int in = layers_[l - 1], out = layers_[l];
      detail::gemm_batched(ctx, false, false, M, out, in, 1.0f, ptr + a_sec[l - 1], in, ptr + w_sec[l], out,
                           0.0f, ptr + a_sec[l], out, int(k));
#if defined(ASGD_BACKEND_CUDA)
      detail::for_each_index(ctx, rows * out,
                             BiasActivationBatched{act[l], ptr + w_base, b_off_[l - 1], size_t(out), m, l < L});
#else
      for (size_t i = 0; i < k; ++i)
        detail::for_each_index(ctx, m, BiasActivationRows{act[l] + i * m * out, reqs[i].w + b_off_[l - 1],
                                                          size_t(out), l < L});
#endif
    }
    out_.apply(ctx, act[L], rows, data->y.data(), ids, row_loss, nullptr, delta[L], 1.0f / float(m));
    for (size_t l = L; l >= 1; --l) {  // backward
      int in = layers_[l - 1], out = layers_[l];
      detail::gemm_batched(ctx, true, false, in, out, M, 1.0f, ptr + a_sec[l - 1], in, ptr + d_sec[l], out,
                           0.0f, ptr + gw_sec[l], out, int(k));
#if defined(ASGD_BACKEND_CUDA)
      detail::for_each_index(ctx, k * out, ColumnSumsBatched{delta[l], ptr + g_base, b_off_[l - 1], m, size_t(out)});
#else
      for (size_t i = 0; i < k; ++i)
        detail::for_each_index(ctx, 1, ColumnSumsRowwise{delta[l] + i * m * out, reqs[i].grad + b_off_[l - 1], m,
                                                         size_t(out)});
#endif
      if (l > 1) {
        detail::gemm_batched(ctx, false, true, M, in, out, 1.0f, ptr + d_sec[l], out, ptr + w_sec[l], out, 0.0f,
                             ptr + d_sec[l - 1], in, int(k));
        detail::for_each_index(ctx, rows * in, ReluBackward{delta[l - 1], act[l - 1]});
      }
    }
#if defined(ASGD_BACKEND_CUDA)
    // the k loss sums in one pass, then one copy back (the doubles live in a float slot)
    double* sums = reinterpret_cast<double*>(ctx.scratch(3 + int(2 * L), 2 * k));
    detail::for_each_index(ctx, k, RequestLossSums{row_loss, sums, m});
    std::vector<double> host(k);
    ASGD_CUDA_CHECK(cudaMemcpyAsync(host.data(), sums, k * sizeof(double), cudaMemcpyDeviceToHost,
                                    im.stream));
    ctx.synchronize();
    for (size_t i = 0; i < k; ++i) reqs[i].loss = host[i] / double(m);
#else
    for (size_t i = 0; i < k; ++i) reqs[i].loss = ops::sum(ctx, row_loss + i * m, m) / double(m);
#endif
  }

  EvalSums evaluate(ExecContext& ctx, const float* w, const DeviceDataset* data, size_t begin,
                    size_t end) const override {
    check_data(data);
    EvalSums sums;
    size_t L = layers_.size() - 1;
    int k = layers_.back();
    for (size_t r0 = begin; r0 < end; r0 += kEvalChunk) {
      size_t m = std::min(kEvalChunk, end - r0);
      const float* a0 = data->x.data() + r0 * data->dim;
      forward(ctx, w, a0, m, 1);
      float* zl = ctx.scratch(1 + int(L), m * k);
      float* row_loss = ctx.scratch(0, m);
      float* row_correct = ctx.scratch(2 + int(2 * L) + 1, m);
      out_.apply(ctx, zl, m, data->y.data() + r0, nullptr, row_loss, row_correct, nullptr, 1.0f);
      sums.loss_sum += ops::sum(ctx, row_loss, m);
      sums.correct += ops::sum(ctx, row_correct, m);
      sums.count += m;
    }
    return sums;
  }

 private:
  void check_data(const DeviceDataset* data) const {
    if (!data || data->sparse() || data->dim != size_t(layers_[0]))
      throw std::invalid_argument("dense model: dataset missing, sparse, or of another feature count");
  }

  // a_l = act(a_{l-1} W_l + b_l) into scratch slots first_slot + l (a_0 given).
  void forward(ExecContext& ctx, const float* w, const float* a0, size_t m, int first_slot) const {
    size_t L = layers_.size() - 1;
    const float* a_prev = a0;
    for (size_t l = 1; l <= L; ++l) {
      int in = layers_[l - 1], out = layers_[l];
      float* z = ctx.scratch(first_slot + int(l), m * out);
      detail::gemm(ctx, false, false, int(m), out, in, 1.0f, a_prev, in, w + w_off_[l - 1], out,
                   0.0f, z, out);
#if defined(ASGD_BACKEND_CUDA)
      detail::for_each_index(ctx, m * out, BiasActivation{z, w + b_off_[l - 1], size_t(out), l < L});
#else
      detail::for_each_index(ctx, m, BiasActivationRows{z, w + b_off_[l - 1], size_t(out), l < L});
#endif
      a_prev = z;
    }
  }

  static int checked_outputs(const std::vector<int>& layers) {
    if (layers.size() < 2) throw std::invalid_argument("dense model needs >= 2 layer sizes");
    for (int s : layers)
      if (s < 1) throw std::invalid_argument("dense model layer sizes must be >= 1");
    return layers.back();
  }

  std::vector<int> layers_;
  DenseLoss loss_;
  layers::OutputLoss out_;  // checks that squared and logistic losses have 1 output
  std::vector<size_t> w_off_, b_off_;
  size_t num_params_ = 0;
};

}  // namespace

std::unique_ptr<Model> make_dense(std::vector<int> layers, DenseLoss loss) {
  return std::make_unique<Dense>(std::move(layers), loss);
}

}  // namespace asgd
