// kernels/reductions.cu — the fixed-order sums the layers and models share (declared in
// kernels/detail/backend.h): per-request column sums (a bias gradient) and per-request
// sums of row losses. The one place where the CPU and CUDA versions differ in how they
// walk the data; each states its order of additions.
#include "kernels/detail/backend.h"
#include "kernels/ops.h"

namespace asgd::detail {
namespace {

#if defined(ASGD_BACKEND_CUDA)
constexpr size_t kChunkRows = 256;

// out.at(i)[c] = sum over the R rows of request i, in order.
struct ColumnSumsSequential {
  const float* x; PerRequest out; size_t R, n;
  ASGD_HD void operator()(size_t e) const {
    size_t i = e / n, c = e % n;
    const float* col = x + i * R * n + c;
    float s = 0.0f;
    for (size_t r = 0; r < R; ++r) s += col[r * n];
    out.at(i)[c] = s;
  }
};
// partial[(i chunks + q) n + c] = sum over rows [q kChunkRows, ...) of request i, in order.
struct ColumnChunkSums {
  const float* x; float* partial; size_t R, n, chunks;
  ASGD_HD void operator()(size_t e) const {
    size_t c = e % n, iq = e / n, q = iq % chunks, i = iq / chunks;
    size_t r0 = q * kChunkRows, r1 = r0 + kChunkRows < R ? r0 + kChunkRows : R;
    const float* col = x + i * R * n + c;
    float s = 0.0f;
    for (size_t r = r0; r < r1; ++r) s += col[r * n];
    partial[e] = s;
  }
};
struct ChunkTotals {
  const float* partial; PerRequest out; size_t n, chunks;
  ASGD_HD void operator()(size_t e) const {
    size_t i = e / n, c = e % n;
    float s = 0.0f;
    for (size_t q = 0; q < chunks; ++q) s += partial[(i * chunks + q) * n + c];
    out.at(i)[c] = s;
  }
};
#endif

// out[i] = sum of request i's m values, in order, in double.
struct RequestSums {
  const float* x; double* out; size_t m;
  ASGD_HD void operator()(size_t i) const {
    double s = 0.0;
    for (size_t r = 0; r < m; ++r) s += x[i * m + r];
    out[i] = s;
  }
};

}  // namespace

void column_sums(ExecContext& ctx, const float* x, size_t R, size_t n, size_t k, const PerRequest& out) {
  if (k == 0 || n == 0) return;
  counts_of(ctx).kernels += R <= kSequentialColumnRows ? 1 : 2;  // CUDA's kernels, on every backend
#if defined(ASGD_BACKEND_CUDA)
  if (R <= kSequentialColumnRows) {
    launch_n(ctx, k * n, ColumnSumsSequential{x, out, R, n});
    return;
  }
  Workspace::Frame frame(ctx.workspace());
  const size_t chunks = (R + kChunkRows - 1) / kChunkRows;
  float* partial = ctx.workspace().take<float>("column sums: chunk partials", k * chunks * n);
  launch_n(ctx, k * chunks * n, ColumnChunkSums{x, partial, R, n, chunks});
  launch_n(ctx, k * n, ChunkTotals{partial, out, n, chunks});
#else
  (void)ctx;
  for (size_t i = 0; i < k; ++i) {
    float* o = out.at(i);
    for (size_t c = 0; c < n; ++c) o[c] = 0.0f;
    for (size_t r = 0; r < R; ++r) {
      const float* row = x + (i * R + r) * n;
      for (size_t c = 0; c < n; ++c) o[c] += row[c];
    }
  }
#endif
}

void request_sums(ExecContext& ctx, const float* x, size_t m, size_t k, double* out) {
  if (k == 1) {
    out[0] = ops::sum(ctx, x, m);
    return;
  }
  Workspace::Frame frame(ctx.workspace());
  double* sums = ctx.workspace().take<double>("request sums", k);
  for_each_index(ctx, k, RequestSums{x, sums, m});
  copy_to_host(ctx, out, sums, k * sizeof(double));
}

}  // namespace asgd::detail
