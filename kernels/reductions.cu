// kernels/reductions.cu — the fixed-order sums the layers and models share
// (kernels/layers/sums.h): per-request column sums (a bias gradient, with a fused
// activation's backward) and per-request sums of row losses, all queued jobs in one
// launch. The one place where the CPU and CUDA versions differ in how they walk the data;
// each states its order of additions, and the launch is counted once for both.
#include <type_traits>
#include "kernels/detail/backend.h"
#include "kernels/layers/activation.h"
#include "kernels/layers/sums.h"

namespace asgd::layers {
namespace {

bool long_column(const ColumnSumJob& j) { return j.R > kSequentialColumnRows; }

#if defined(ASGD_BACKEND_CUDA)
constexpr size_t kChunkRows = 256;
constexpr size_t kMaxColumns = PendingSums::kMaxColumns, kMaxRows = PendingSums::kMaxRows;

size_t chunks_of(const ColumnSumJob& j) { return long_column(j) ? (j.R + kChunkRows - 1) / kChunkRows : 0; }

// The first kernel: each column job's threads in turn, then k threads per row job.
// Column job j, sequential (chunks[j] = 0): thread t = i n + c sums rows [0, R) of request
// i's column c into out.at(i)[c]. Chunked: thread t = (i chunks + q) n + c sums rows
// [q kChunkRows, ...) into partial[j][t]. Row job: thread i sums request i's m values.
struct FirstPass {
  ColumnSumJob col[kMaxColumns];
  size_t end[kMaxColumns];  // one past job j's last thread
  size_t chunks[kMaxColumns];
  float* partial[kMaxColumns];
  size_t columns;
  RowSumJob row[kMaxRows];
  size_t rows, k;
  ASGD_HD void operator()(size_t e) const {
    size_t begin = 0;
    for (size_t j = 0; j < columns; ++j) {
      if (e < end[j]) {
        column(j, e - begin);
        return;
      }
      begin = end[j];
    }
    const size_t t = e - begin;
    const RowSumJob& r = row[t / k];
    const size_t i = t % k;
    double s = 0.0;
    for (size_t q = 0; q < r.m; ++q) s += r.x[i * r.m + q];
    r.out[i] = s;
  }
  ASGD_HD void column(size_t j, size_t t) const {
    const ColumnSumJob& job = col[j];
    const size_t c = t % job.n, iq = t / job.n;
    const size_t i = chunks[j] ? iq / chunks[j] : iq;
    const size_t r0 = chunks[j] ? (iq % chunks[j]) * kChunkRows : 0;
    const size_t r1 = chunks[j] && r0 + kChunkRows < job.R ? r0 + kChunkRows : job.R;
    float* x = job.x + i * job.R * job.n + c;
    const float* y = job.y ? job.y + i * job.R * job.n + c : nullptr;
    float s = 0.0f;
    for (size_t r = r0; r < r1; ++r) {
      float d = x[r * job.n];
      if (job.act != Act::None) {
        d = activation_df(job.act, y[r * job.n], d);
        x[r * job.n] = d;
      }
      s += d;
    }
    if (chunks[j])
      partial[j][t] = s;
    else
      job.out.at(i)[c] = s;
  }
};

// The second kernel: for each chunked job, thread i n + c adds request i's chunk sums of
// column c in chunk order.
struct ChunkTotals {
  ColumnSumJob col[kMaxColumns];
  size_t end[kMaxColumns];
  size_t chunks[kMaxColumns];
  const float* partial[kMaxColumns];
  size_t columns;
  ASGD_HD void operator()(size_t e) const {
    size_t begin = 0, j = 0;
    while (e >= end[j]) begin = end[j++];
    const ColumnSumJob& job = col[j];
    const size_t t = e - begin, i = t / job.n, c = t % job.n;
    float s = 0.0f;
    for (size_t q = 0; q < chunks[j]; ++q) s += partial[j][(i * chunks[j] + q) * job.n + c];
    job.out.at(i)[c] = s;
  }
};

void run_on_device(ExecContext& ctx, const PendingSums& s) {
  Workspace::Frame frame(ctx.workspace());
  FirstPass first{};
  ChunkTotals second{};
  size_t n_first = 0, n_second = 0;
  first.columns = s.column_count;
  for (size_t j = 0; j < s.column_count; ++j) {
    const ColumnSumJob& job = s.columns[j];
    first.col[j] = job;
    first.chunks[j] = chunks_of(job);
    n_first += s.k * (first.chunks[j] ? first.chunks[j] : 1) * job.n;
    first.end[j] = n_first;
    if (first.chunks[j]) {
      first.partial[j] = ctx.workspace().take<float>("column sums: chunk partials", s.k * first.chunks[j] * job.n);
      second.col[second.columns] = job;
      second.chunks[second.columns] = first.chunks[j];
      second.partial[second.columns] = first.partial[j];
      n_second += s.k * job.n;
      second.end[second.columns++] = n_second;
    }
  }
  first.rows = s.row_count;
  first.k = s.k;
  for (size_t j = 0; j < s.row_count; ++j) first.row[j] = s.rows[j];
  detail::launch_n(ctx, n_first + s.row_count * s.k, first);
  if (n_second) detail::launch_n(ctx, n_second, second);
}
#else
// Request by request, row by row (the inner loop across the columns vectorises): each
// column's values are added in row order, as the CUDA threads add them.
template <class A>
void column_sums_here(const ColumnSumJob& job, size_t k) {
  for (size_t i = 0; i < k; ++i) {
    float* o = job.out.at(i);
    for (size_t c = 0; c < job.n; ++c) o[c] = 0.0f;
    for (size_t r = 0; r < job.R; ++r) {
      float* x = job.x + (i * job.R + r) * job.n;
      if constexpr (std::is_same<A, Identity>::value) {
        for (size_t c = 0; c < job.n; ++c) o[c] += x[c];
      } else {
        const float* y = job.y + (i * job.R + r) * job.n;
        for (size_t c = 0; c < job.n; ++c) {
          const float d = A::df(y[c], x[c]);
          x[c] = d;
          o[c] += d;
        }
      }
    }
  }
}
#endif

}  // namespace

void run_sums(ExecContext& ctx, PendingSums& s) {
  if (s.column_count == 0 && s.row_count == 0) return;
  bool second_kernel = false;
  for (size_t j = 0; j < s.column_count; ++j) second_kernel = second_kernel || long_column(s.columns[j]);
  detail::counts_of(ctx).kernels += second_kernel ? 2 : 1;  // CUDA's kernels, on every backend
#if defined(ASGD_BACKEND_CUDA)
  run_on_device(ctx, s);
#else
  for (size_t j = 0; j < s.column_count; ++j) {
    const ColumnSumJob& job = s.columns[j];
    with_activation(job.act, [&](auto a) { column_sums_here<decltype(a)>(job, s.k); });
  }
  for (size_t j = 0; j < s.row_count; ++j) {
    const RowSumJob& r = s.rows[j];
    for (size_t i = 0; i < s.k; ++i) {
      double sum = 0.0;
      for (size_t q = 0; q < r.m; ++q) sum += r.x[i * r.m + q];
      r.out[i] = sum;
    }
  }
#endif
  s.column_count = 0;
  s.row_count = 0;
}

void add_evaluation_sums(ExecContext& ctx, const float* row_loss, const float* row_correct, size_t m, EvalSums& into) {
  Workspace::Frame frame(ctx.workspace());
  double* device = ctx.workspace().take<double>("evaluation sums", 2);
  PendingSums both(1);
  queue_sum(ctx, both, RowSumJob{row_loss, m, device});
  queue_sum(ctx, both, RowSumJob{row_correct, m, device + 1});
  run_sums(ctx, both);
  double host[2];
  detail::copy_to_host(ctx, host, device, sizeof(host));
  into.loss_sum += host[0];
  into.correct += host[1];
  into.count += m;
}

void queue_sum(ExecContext& ctx, PendingSums& s, const ColumnSumJob& job) {
  if (job.n == 0 || s.k == 0) return;
  if (s.column_count == PendingSums::kMaxColumns) run_sums(ctx, s);
  s.columns[s.column_count++] = job;
}

void queue_sum(ExecContext& ctx, PendingSums& s, const RowSumJob& job) {
  if (s.k == 0) return;
  if (s.row_count == PendingSums::kMaxRows) run_sums(ctx, s);
  s.rows[s.row_count++] = job;
}

}  // namespace asgd::layers
