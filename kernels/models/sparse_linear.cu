// kernels/models/sparse_linear.cu — linear models on sparse data (CSR rows, see
// DeviceDataset): sparse_logistic (one output, binary labels) and sparse_softmax (one
// output per class). Logits z = x W + b. Parameters: W (features, k) row-major, then b
// (k); W is the row table (Model::row_layout), b the dense part.
// A minibatch names few rows of W. The forward pass reads only those rows; the gradient
// is computed for those rows only, over the minibatch's transpose (kernels/sparse_batch.h),
// one sum per (row, output) over the entries in minibatch order, so it has the same bits
// whatever the thread count (and, with --fmad=false, on CUDA as on the CPU up to expf/logf).
// The dense gradient that Model::loss_grad returns is that with every other row zero:
// writing those zeros is the only pass over all features x k parameters in a gradient.
// Not here: the data (sim/sparse_data.h).
#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>
#include "kernels/detail/backend.h"
#include "kernels/layers/loss.h"
#include "kernels/model.h"
#include "kernels/workspace.h"
#include "kernels/ops.h"
#include "kernels/sparse_batch.h"

namespace asgd {
namespace {

// Logits of sparse samples, z (rows, k): z[r, c] = b[c] + the sum over sample s's entries,
// in order, of val * W[col, c], where s = ids[r], or first + r when ids is null.
struct SparseLogits {
  const int64_t* row_ptr; const int32_t* col; const float* val;
  const int32_t* ids; size_t first;
  const float* w; size_t b_off; size_t k;  // W at w, b at w + b_off
  float* z;
  ASGD_HD void operator()(size_t i) const {
    const size_t r = i / k, c = i % k;
    const size_t s = ids ? size_t(ids[r]) : first + r;
    float acc = w[b_off + c];
    for (int64_t e = row_ptr[s]; e < row_ptr[s + 1]; ++e) acc += val[e] * w[size_t(col[e]) * k + c];
    z[i] = acc;
  }
};

// The gradient's touched rows, and the bias. For i < u k: row p = i / k of the batch,
// output c = i % k: grad[rows[p] k + c] = the sum over feature rows[p]'s entries, in
// minibatch order, of val * dz[r, c]. For i = u k + c: grad[b_off + c] = the sum over the
// minibatch's rows r, in order, of dz[r, c]. dz is (m, k), the loss's scaled delta.
struct SparseGradient {
  const int64_t* row_ptr; const float* val; const int32_t* ids;  // ids: the minibatch (m)
  const int32_t* rows; const int32_t* seg; const int32_t* sample; const int32_t* offset;  // SparseBatch
  size_t u;  // rows in the batch
  const float* dz; size_t m; size_t k; size_t b_off;
  float* grad;
  ASGD_HD void operator()(size_t i) const {
    const size_t p = i / k, c = i % k;
    float acc = 0.0f;
    if (p == u) {
      for (size_t r = 0; r < m; ++r) acc += dz[r * k + c];
      grad[b_off + c] = acc;
      return;
    }
    for (int32_t q = seg[p]; q < seg[p + 1]; ++q) {
      const size_t r = size_t(sample[q]);
      acc += val[row_ptr[ids[r]] + offset[q]] * dz[r * k + c];
    }
    grad[size_t(rows[p]) * k + c] = acc;
  }
};

constexpr size_t kEvalChunk = 1024;  // rows per forward pass during evaluation

// Every buffer of a pass, taken here only, from the job's workspace (the caller holds a
// frame open while they are in use).
struct Buffers {
  float* z;            // (rows, k) logits
  float* dz;           // (rows, k) d loss / d z, training only
  float* row_loss;     // (rows)
  float* row_correct;  // (rows), evaluation only
};
Buffers take_buffers(ExecContext& ctx, size_t rows, size_t k, bool training) {
  Workspace& space = ctx.workspace();
  Buffers b;
  b.z = space.take<float>("sparse logits", rows * k);
  b.row_loss = space.take<float>("sparse row losses", rows);
  b.dz = training ? space.take<float>("sparse logit gradients", rows * k) : nullptr;
  b.row_correct = training ? nullptr : space.take<float>("sparse row hits", rows);
  return b;
}

// The host side of one gradient, per thread (one ExecContext per thread): kept so that a
// warm job allocates nothing.
struct HostWork {
  SparseBatch batch;
  std::vector<int32_t> packed;  // ids, rows, seg, sample, offset: staged in one copy
};
thread_local HostWork tl_work;

void zero(ExecContext& ctx, float* p, size_t n) {
  if (n == 0) return;
  detail::count_kernel(ctx);  // a memset is a launch on the stream
#if defined(ASGD_BACKEND_CUDA)
  ASGD_CUDA_CHECK(cudaMemsetAsync(p, 0, n * sizeof(float), ctx.impl().stream));
#else
  (void)ctx;
  std::memset(p, 0, n * sizeof(float));
#endif
}

class SparseLinear final : public Model {
 public:
  SparseLinear(size_t features, int classes, DenseLoss loss)
      : features_(features), classes_(classes), loss_(loss),
        k_(loss == DenseLoss::SoftmaxCrossEntropy ? size_t(classes) : 1), out_(loss, int(k_)) {
    if (features_ < 1 || features_ > size_t(INT32_MAX))
      throw std::invalid_argument("sparse model: features must be in 1..2^31-1, got " + std::to_string(features_));
    if (loss_ == DenseLoss::Squared) throw std::invalid_argument("sparse model: classification losses only");
    if (loss_ == DenseLoss::Logistic && classes_ != 2)
      throw std::invalid_argument("sparse_logistic is binary: classes must be 2, got " + std::to_string(classes_));
    if (classes_ < 2) throw std::invalid_argument("sparse model: classes must be >= 2");
  }

  std::string name() const override {
    return loss_ == DenseLoss::Logistic ? "sparse_logistic" : "sparse_softmax";
  }
  size_t num_params() const override { return features_ * k_ + k_; }
  bool is_classifier() const override { return true; }
  RowLayout row_layout() const override { return {features_, k_}; }

  // Zero: the loss is convex, and zero rows stay untouched until a sample names them.
  void init_params(uint64_t, std::vector<float>& w) const override { w.assign(num_params(), 0.0f); }

  void touched_rows(const DeviceDataset* data, const int32_t* ids, size_t m,
                    std::vector<int32_t>& rows) const override {
    check_data(data);
    sparse_batch_rows(data->host_row_ptr, data->host_col, ids, m, rows, tl_work.batch.keys, tl_work.batch.sorted);
  }

  double loss_grad(ExecContext& ctx, const float* w, const DeviceDataset* data, const int32_t* host_ids,
                   size_t m, const NoiseKey&, float* grad) const override {
    check_data(data);
    HostWork& hw = tl_work;
    SparseBatch& b = hw.batch;
    build_sparse_batch(data->host_row_ptr, data->host_col, host_ids, m, b);
    const size_t u = b.rows.size(), entries = b.sample.size();
    hw.packed.resize(m + 2 * u + 1 + 2 * entries);
    int32_t* pack = hw.packed.data();
    pack = std::copy(host_ids, host_ids + m, pack);
    pack = std::copy(b.rows.begin(), b.rows.end(), pack);
    pack = std::copy(b.seg.begin(), b.seg.end(), pack);
    pack = std::copy(b.sample.begin(), b.sample.end(), pack);
    std::copy(b.offset.begin(), b.offset.end(), pack);
    const int32_t* ids = ctx.stage_ids(hw.packed.data(), hw.packed.size());
    const int32_t* rows = ids + m;
    const int32_t* seg = rows + u;
    const int32_t* sample = seg + u + 1;
    const int32_t* offset = sample + entries;

    Workspace::Frame frame(ctx.workspace());
    const Buffers buf = take_buffers(ctx, m, k_, /*training=*/true);
    const size_t b_off = features_ * k_;
    detail::for_each_index(ctx, m * k_, SparseLogits{data->row_ptr.data(), data->col.data(), data->val.data(), ids,
                                                     0, w, b_off, k_, buf.z});
    out_.apply(ctx, buf.z, m, data->y.data(), ids, buf.row_loss, nullptr, buf.dz, 1.0f / float(m));
    zero(ctx, grad, b_off);  // the rows no sample names (the bias is written below)
    detail::for_each_index(ctx, (u + 1) * k_, SparseGradient{data->row_ptr.data(), data->val.data(), ids, rows, seg,
                                                            sample, offset, u, buf.dz, m, k_, b_off, grad});
    return ops::sum(ctx, buf.row_loss, m) / double(m);
  }

  EvalSums evaluate(ExecContext& ctx, const float* w, const DeviceDataset* data, size_t begin,
                    size_t end) const override {
    check_data(data);
    EvalSums sums;
    for (size_t r0 = begin; r0 < end; r0 += kEvalChunk) {
      const size_t m = std::min(kEvalChunk, end - r0);
      Workspace::Frame frame(ctx.workspace());
      const Buffers buf = take_buffers(ctx, m, k_, /*training=*/false);
      detail::for_each_index(ctx, m * k_, SparseLogits{data->row_ptr.data(), data->col.data(), data->val.data(),
                                                       nullptr, r0, w, features_ * k_, k_, buf.z});
      out_.apply(ctx, buf.z, m, data->y.data() + r0, nullptr, buf.row_loss, buf.row_correct, nullptr, 1.0f);
      sums.loss_sum += ops::sum(ctx, buf.row_loss, m);
      sums.correct += ops::sum(ctx, buf.row_correct, m);
      sums.count += m;
    }
    return sums;
  }

 private:
  void check_data(const DeviceDataset* data) const {
    if (!data || !data->sparse() || !data->host_row_ptr)
      throw std::invalid_argument(name() + ": needs sparse data (sparse_synthetic or svmlight)");
    if (data->dim != features_)
      throw std::invalid_argument(name() + ": the data has " + std::to_string(data->dim) + " features, the model " +
                                  std::to_string(features_));
    if (data->classes != classes_)
      throw std::invalid_argument(name() + ": the data has " + std::to_string(data->classes) + " classes, the model " +
                                  std::to_string(classes_));
  }

  size_t features_;
  int classes_;
  DenseLoss loss_;
  size_t k_;  // outputs: 1 (logistic) or classes (softmax)
  layers::OutputLoss out_;
};

}  // namespace

std::unique_ptr<Model> make_sparse_linear(size_t features, int classes, DenseLoss loss) {
  return std::make_unique<SparseLinear>(features, classes, loss);
}

}  // namespace asgd
