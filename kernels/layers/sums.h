// kernels/layers/sums.h — kernel-internal: the sums a gradient ends with, gathered into as
// few launches as the data allows. Column sums: a layer's bias gradient, each request's
// column sums of d loss / d z (with the activation's backward applied first where the
// activation is fused into the layer: LayerIO::act). Row sums: each request's loss sum.
// A layer's backward queues its column sums in the pass's PendingSums; one run_sums then
// does every queued job in one kernel, or two when a column is longer than
// kSequentialColumnRows. A queued job must read memory that nothing writes before it runs.
// Every order of additions is fixed (below), so the results do not depend on the thread
// count; on CPU backends they are the plain loops' bits.
#pragma once
#include <cstddef>
#include "kernels/detail/backend.h"
#include "kernels/layers/layer.h"
#include "kernels/model.h"

namespace asgd::layers {

// out.at(i)[c] = the sum over request i's R rows r, in row order, of x[(i R + r) n + c], in
// float. With an activation: x holds d loss / d y on entry (y its output, (k R, n)), and
// each value becomes activation_df(act, y, x), written back to x, before it is added.
struct ColumnSumJob {
  float* x = nullptr;
  const float* y = nullptr;
  Act act = Act::None;
  size_t R = 0, n = 0;
  detail::PerRequest out{};
};
// out[i] = the sum of x[i m .. (i+1) m) in index order, in double (out: backend memory).
struct RowSumJob {
  const float* x = nullptr;
  size_t m = 0;
  double* out = nullptr;
};

// CUDA: a column of up to this many rows is summed by one thread in row order (the CPU's
// bits); a longer one (a convolution's outputs) in chunks of rows, in a first kernel, whose
// sums a second kernel adds in chunk order.
constexpr size_t kSequentialColumnRows = 2048;

// Jobs waiting for one launch, over the k requests of one pass.
struct PendingSums {
  static constexpr size_t kMaxColumns = 4, kMaxRows = 2;
  explicit PendingSums(size_t k) : k(k) {}
  size_t k;
  ColumnSumJob columns[kMaxColumns];
  size_t column_count = 0;
  RowSumJob rows[kMaxRows];
  size_t row_count = 0;
};

// Queue a job (a full queue is run first).
void queue_sum(ExecContext& ctx, PendingSums& s, const ColumnSumJob& job);
void queue_sum(ExecContext& ctx, PendingSums& s, const RowSumJob& job);
// Runs every queued job, in one launch (two with a column longer than kSequentialColumnRows),
// and empties the queue.
void run_sums(ExecContext& ctx, PendingSums& s);
// Evaluation: adds m rows' losses and hits (backend memory, (m) each) to `into` (and m to
// its count): both sums in one launch, one copy back.
void add_evaluation_sums(ExecContext& ctx, const float* row_loss, const float* row_correct, size_t m, EvalSums& into);

}  // namespace asgd::layers
