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
// A pass of K requests (one for loss_grad) is two launches: each row's logits and loss
// with the gradients' zeros, then the touched rows' gradients with the biases and the
// loss sums; each request's arithmetic is what it is alone.
// Not here: the data (sim/sparse_data.h).
#include <algorithm>
#include <climits>
#include <cstring>
#include <stdexcept>
#include <string>
#include <vector>
#include "kernels/detail/backend.h"
#include "kernels/layers/loss.h"
#include "kernels/layers/row_loss.h"
#include "kernels/layers/sums.h"
#include "kernels/model.h"
#include "kernels/models/batch_model.h"
#include "kernels/sparse_batch.h"
#include "kernels/workspace.h"

namespace asgd {
namespace {

// Row r of a pass (request r / m): its sample s = ids[r] (first + r when ids is null), its
// logits z[r, c] = b[c] + the sum over s's entries, in order, of val * W[col, c], then the
// output loss of the row (kernels/layers/row_loss.h). W, b: the request's parameters.
struct SparseRow {
  const int64_t* row_ptr;
  const int32_t* col;
  const float* val;
  const int32_t* ids;
  size_t first;
  detail::PerRequest w;
  size_t b_off;
  size_t k;
  size_t m;  // W at w.at(i), b at w.at(i) + b_off
  float* z;
  layers::RowLoss<false> loss;
  ASGD_HD void operator()(size_t r) const {
    const size_t s = ids ? size_t(ids[r]) : first + r;
    const float* wi = w.at(r / m);
    for (size_t c = 0; c < k; ++c) {
      float acc = wi[b_off + c];
      for (int64_t e = row_ptr[s]; e < row_ptr[s + 1]; ++e) acc += val[e] * wi[size_t(col[e]) * k + c];
      z[r * k + c] = acc;
    }
    loss(r);
  }
};

// The rows of every request of a pass (SparseRow), and each request's gradient zeroed on
// its table, [0, zeros) (the rows no sample names keep these zeros): one launch. CUDA:
// threads [0, rows) the rows, then one per zeroed value (grads: the k gradients); CPU: the
// rows, then a memset per gradient (host: the same k pointers, in host memory).
#if defined(ASGD_BACKEND_CUDA)
struct RowsAndZeros {
  SparseRow f;
  size_t rows;
  detail::PerRequest grads;
  size_t zeros;
  ASGD_HD void operator()(size_t e) const {
    if (e < rows) return f(e);
    e -= rows;
    grads.at(e / zeros)[e % zeros] = 0.0f;
  }
};
#endif
void rows_and_zeros(ExecContext& ctx, const SparseRow& f, size_t rows, const detail::PerRequest& grads,
                    float* const* host, size_t k, size_t zeros) {
  detail::count_kernel(ctx);
#if defined(ASGD_BACKEND_CUDA)
  (void)host;
  detail::launch_n(ctx, rows + k * zeros, RowsAndZeros{f, rows, grads, zeros});
#else
  (void)ctx;
  (void)grads;
  for (size_t r = 0; r < rows; ++r) f(r);
  for (size_t i = 0; i < k && zeros > 0; ++i) std::memset(host[i], 0, zeros * sizeof(float));
#endif
}

// Each request's gradient on the rows its samples name, its bias, and its loss sum, in one
// launch over the minibatch's transpose (kernels/sparse_batch.h) of all requests at once:
// the table rows P < U of the requests in order (row P is request req[P]'s row rows[P], req
// null: request 0's; its entries [seg[P], seg[P + 1]) name global minibatch rows
// sample[q] = i m + r). rows(i), i < U k: row P = i / k, output c = i % k: grad[rows[P] k + c]
// = the sum over P's entries, in minibatch order, of val * dz[r, c]. bias(q, c), per
// request q and output c: the sum of dz[r, c] over its m rows in order. loss(q): its row
// losses summed in order, in double, into loss_sums[q]. dz is (k m, k), the loss's scaled
// delta. G: request i's gradient is grad.at(i) (a single request's: OneGradient, no table).
struct OneGradient {
  float* g;
  ASGD_HD float* at(size_t) const { return g; }
};
template <class G>
struct SparseGradient {
  const int64_t* row_ptr;
  const float* val;
  const int32_t* ids;  // ids: the minibatches (k m)
  const int32_t* rows;
  const int32_t* req;
  const int32_t* seg;
  const int32_t* sample;
  const int32_t* offset;
  size_t u;  // table rows, all requests
  size_t requests;
  const float* dz;
  const float* row_loss;
  double* loss_sums;
  size_t m;
  size_t k;
  size_t b_off;
  G grad;
  ASGD_HD void row(size_t i) const {
    const size_t p = i / k, c = i % k;
    float acc = 0.0f;
    for (int32_t e = seg[p]; e < seg[p + 1]; ++e) {
      const size_t r = size_t(sample[e]);
      acc += val[row_ptr[ids[r]] + offset[e]] * dz[r * k + c];
    }
    grad.at(req ? size_t(req[p]) : 0)[size_t(rows[p]) * k + c] = acc;
  }
  ASGD_HD void bias(size_t q, size_t c) const {
    float acc = 0.0f;
    for (size_t r = q * m; r < (q + 1) * m; ++r) acc += dz[r * k + c];
    grad.at(q)[b_off + c] = acc;
  }
  ASGD_HD void loss(size_t q) const {
    double s = 0.0;
    for (size_t r = 0; r < m; ++r) s += row_loss[q * m + r];
    loss_sums[q] = s;
  }
  // CUDA: thread i < U k a row's output, then k per request its bias, then one per request
  // its loss sum.
  ASGD_HD void operator()(size_t i) const {
    if (i < u * k) return row(i);
    i -= u * k;
    if (i < requests * k) return bias(i / k, i % k);
    loss(i - requests * k);
  }
};
// One launch: CUDA one kernel over every part; CPU each part as a plain loop.
template <class G>
void gradient_and_sums(ExecContext& ctx, const SparseGradient<G>& f) {
  detail::count_kernel(ctx);
#if defined(ASGD_BACKEND_CUDA)
  detail::launch_n(ctx, (f.u + f.requests) * f.k + f.requests, f);
#else
  (void)ctx;
  for (size_t i = 0; i < f.u * f.k; ++i) f.row(i);
  for (size_t q = 0; q < f.requests; ++q)
    for (size_t c = 0; c < f.k; ++c) f.bias(q, c);
  for (size_t q = 0; q < f.requests; ++q) f.loss(q);
#endif
}

constexpr size_t kEvalChunk = 1024;  // rows per forward pass during evaluation

// Every buffer of a pass, taken here only, from the job's workspace (the caller holds a
// frame open while they are in use).
struct Buffers {
  float* z;            // (rows, k) logits
  float* dz;           // (rows, k) d loss / d z, training only
  float* row_loss;     // (rows)
  float* row_correct;  // (rows), evaluation only
  double* sums;        // training: the requests' loss sums
};
Buffers take_buffers(ExecContext& ctx, size_t rows, size_t k, size_t requests, bool training) {
  Workspace& space = ctx.workspace();
  Buffers b;
  b.z = space.take<float>("sparse logits", rows * k);
  b.row_loss = space.take<float>("sparse row losses", rows);
  b.dz = training ? space.take<float>("sparse logit gradients", rows * k) : nullptr;
  b.row_correct = training ? nullptr : space.take<float>("sparse row hits", rows);
  b.sums = training ? space.take<double>("sparse loss sums", requests) : nullptr;
  return b;
}

// The host side of a pass, per thread (one ExecContext per thread): kept so that a warm
// job allocates nothing.
struct HostWork {
  SparseBatch batch;                  // touched_rows' scratch
  std::vector<SparseBatch> requests;  // run: each request's transpose
  std::vector<int32_t> packed;        // run: ids, rows, req, seg, sample, offset: staged in one copy
  std::vector<double> sums;
};
thread_local HostWork tl_work;

class SparseLinear final : public BatchModel {
 public:
  SparseLinear(size_t features, int classes, DenseLoss loss)
      : features_(features),
        classes_(classes),
        loss_(loss),
        k_(loss == DenseLoss::SoftmaxCrossEntropy ? size_t(classes) : 1) {
    layers::OutputLoss check(loss, int(k_));  // throws on a loss and outputs that do not go together
    if (features_ < 1 || features_ > size_t(INT32_MAX))
      throw std::invalid_argument("sparse model: features must be in 1..2^31-1, got " + std::to_string(features_));
    if (loss_ == DenseLoss::Squared) throw std::invalid_argument("sparse model: classification losses only");
    if (loss_ == DenseLoss::Logistic && classes_ != 2)
      throw std::invalid_argument("sparse_logistic is binary: classes must be 2, got " + std::to_string(classes_));
    if (classes_ < 2) throw std::invalid_argument("sparse model: classes must be >= 2");
  }

  std::string name() const override { return loss_ == DenseLoss::Logistic ? "sparse_logistic" : "sparse_softmax"; }
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

  EvalSums evaluate(ExecContext& ctx, const float* w, const DeviceDataset* data, size_t begin,
                    size_t end) const override {
    check_data(data);
    EvalSums sums;
    for (size_t r0 = begin; r0 < end; r0 += kEvalChunk) {
      const size_t m = std::min(kEvalChunk, end - r0);
      Workspace::Frame frame(ctx.workspace());
      const Buffers buf = take_buffers(ctx, m, k_, 1, /*training=*/false);
      const layers::RowLoss<false> loss{
          buf.z, data->y.data() + r0, nullptr, buf.row_loss, buf.row_correct, nullptr, int(k_), int(loss_), 1.0f, {},
          1};
      detail::for_each_index(
          ctx, m,
          SparseRow{data->row_ptr.data(), data->col.data(), data->val.data(), nullptr, r0,
                    detail::PerRequest{nullptr, const_cast<float*>(w), 0}, features_ * k_, k_, m, buf.z, loss});
      layers::add_evaluation_sums(ctx, buf.row_loss, buf.row_correct, m, sums);
    }
    return sums;
  }

 private:
  // The requests' losses and gradients, all of minibatch size m: one copy of their host
  // index up, two launches (rows_and_zeros, SparseGradient), one copy of the loss sums back.
  void run(ExecContext& ctx, const DeviceDataset* data, GradRequest* reqs, size_t k) const override {
    check_data(data);
    const size_t m = reqs[0].m, b_off = features_ * k_;
    HostWork& hw = tl_work;
    if (hw.requests.size() < k) hw.requests.resize(k);
    size_t u = 0, entries = 0;
    for (size_t i = 0; i < k; ++i) {
      const SparseBatch& b = hw.requests[i];
      build_sparse_batch(data->host_row_ptr, data->host_col, reqs[i].ids, m, hw.requests[i]);
      if (entries + b.sample.size() >= size_t(INT32_MAX))
        throw std::length_error("a batch of sparse minibatches holds more features than a 32-bit index can number");
      u += b.rows.size();
      entries += b.sample.size();
    }
    // Packed: every request's ids (k m), then the transposes' rows (U), their requests (U;
    // k > 1 only), seg (U + 1, rebased to the stacked entries), sample (E, rebased to the
    // stacked minibatch rows) and offset (E).
    std::vector<int32_t>& pack = hw.packed;
    pack.resize(k * m + (k > 1 ? 3 : 2) * u + 1 + 2 * entries);
    int32_t* at = pack.data();
    // n values of src, each plus `add`, at `at`; returns the end
    auto append = [](int32_t* at, const int32_t* src, size_t n, int32_t add) {
      if (add == 0) return std::copy(src, src + n, at);
      for (size_t j = 0; j < n; ++j) at[j] = src[j] + add;
      return at + n;
    };
    for (size_t i = 0; i < k; ++i) at = std::copy(reqs[i].ids, reqs[i].ids + m, at);
    for (size_t i = 0; i < k; ++i) at = std::copy(hw.requests[i].rows.begin(), hw.requests[i].rows.end(), at);
    if (k > 1)
      for (size_t i = 0; i < k; ++i) at = std::fill_n(at, hw.requests[i].rows.size(), int32_t(i));
    for (size_t i = 0, base = 0; i < k; base += hw.requests[i++].sample.size())
      at = append(at, hw.requests[i].seg.data(), hw.requests[i].rows.size(), int32_t(base));
    *at++ = int32_t(entries);
    for (size_t i = 0; i < k; ++i)
      at = append(at, hw.requests[i].sample.data(), hw.requests[i].sample.size(), int32_t(i * m));
    for (size_t i = 0; i < k; ++i) at = std::copy(hw.requests[i].offset.begin(), hw.requests[i].offset.end(), at);
    const int32_t* ids = ctx.stage_ids(pack.data(), pack.size());
    const int32_t* d_rows = ids + k * m;
    const int32_t* d_req = k > 1 ? d_rows + u : nullptr;
    const int32_t* d_seg = d_rows + (k > 1 ? 2 : 1) * u;
    const int32_t* d_sample = d_seg + u + 1;
    const int32_t* d_offset = d_sample + entries;

    // Each request's parameters and gradient: its own pointers (k = 1), or a table staged
    // in one copy (the weights' k pointers, then the gradients').
    std::vector<float*>& host = ctx.impl().host_pointers;
    host.clear();
    for (size_t i = 0; i < k; ++i) host.push_back(const_cast<float*>(reqs[i].w));
    for (size_t i = 0; i < k; ++i) host.push_back(reqs[i].grad);
    float* const* table = k == 1 ? host.data() : ctx.stage_pointers(host.data(), host.size());
    const detail::PerRequest w =
        k == 1 ? detail::PerRequest{nullptr, host[0], 0} : detail::PerRequest{table, nullptr, 0};
    const detail::PerRequest g =
        k == 1 ? detail::PerRequest{nullptr, host[1], 0} : detail::PerRequest{table + k, nullptr, 0};

    Workspace::Frame frame(ctx.workspace());
    const size_t n = k * m;
    const Buffers buf = take_buffers(ctx, n, k_, k, /*training=*/true);
    const layers::RowLoss<false> loss{
        buf.z, data->y.data(), ids, buf.row_loss, nullptr, buf.dz, int(k_), int(loss_), 1.0f / float(m), {}, 1};
    rows_and_zeros(
        ctx, SparseRow{data->row_ptr.data(), data->col.data(), data->val.data(), ids, 0, w, b_off, k_, m, buf.z, loss},
        n, g, host.data() + k, k, b_off);
    auto gradient = [&](auto grads) {
      gradient_and_sums(ctx, SparseGradient<decltype(grads)>{data->row_ptr.data(), data->val.data(), ids, d_rows, d_req,
                                                             d_seg, d_sample, d_offset, u, k, buf.dz, buf.row_loss,
                                                             buf.sums, m, k_, b_off, grads});
    };
    if (k == 1)
      gradient(OneGradient{reqs[0].grad});
    else
      gradient(g);
    hw.sums.resize(k);
    detail::copy_to_host(ctx, hw.sums.data(), buf.sums, k * sizeof(double));
    for (size_t i = 0; i < k; ++i) reqs[i].loss = hw.sums[i] / double(m);
  }

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
};

}  // namespace

std::unique_ptr<Model> make_sparse_linear(size_t features, int classes, DenseLoss loss) {
  return std::make_unique<SparseLinear>(features, classes, loss);
}

}  // namespace asgd
