// kernels/lowrank.cu — low-rank products and orthogonalisation (see lowrank.h). The
// products are GEMMs (cuBLAS, or single-threaded OpenBLAS); the orthogonalisation one
// small kernel per column (r is a few): each column's norm, and each later column's dot
// with it, summed in row order by one thread, so the bits do not depend on the backend's
// thread count.
#include "kernels/lowrank.h"
#include <cmath>
#include "kernels/detail/backend.h"

namespace asgd::lowrank {
namespace {

struct NormaliseColumn {
  float* a;
  size_t rows, r, i;
  float eps;
  ASGD_HD void operator()(size_t) const {
    double s = 0;
    for (size_t k = 0; k < rows; ++k) s += double(a[k * r + i]) * double(a[k * r + i]);
    const float d = float(sqrt(s)) + eps;
    for (size_t k = 0; k < rows; ++k) a[k * r + i] = d > 0.0f ? a[k * r + i] / d : 0.0f;
  }
};
struct RemoveComponent {  // column i + 1 + jj minus its component along column i
  float* a;
  size_t rows, r, i;
  ASGD_HD void operator()(size_t jj) const {
    const size_t j = i + 1 + jj;
    double dot = 0;
    for (size_t k = 0; k < rows; ++k) dot += double(a[k * r + i]) * double(a[k * r + j]);
    const float d = float(dot);
    for (size_t k = 0; k < rows; ++k) a[k * r + j] -= d * a[k * r + i];
  }
};

}  // namespace

void project(ExecContext& ctx, const ParamBlock& b, const float* m, const float* q, float* p, size_t r) {
  const int rows = int(b.rows), cols = int(b.cols), rk = int(r);
  if (b.transposed)
    detail::gemm(ctx, true, false, rows, rk, cols, 1.0f, m, rows, q, rk, 0.0f, p, rk);
  else
    detail::gemm(ctx, false, false, rows, rk, cols, 1.0f, m, cols, q, rk, 0.0f, p, rk);
}

void back_project(ExecContext& ctx, const ParamBlock& b, const float* m, const float* p, float* q, size_t r) {
  const int rows = int(b.rows), cols = int(b.cols), rk = int(r);
  if (b.transposed)
    detail::gemm(ctx, false, false, cols, rk, rows, 1.0f, m, rows, p, rk, 0.0f, q, rk);
  else
    detail::gemm(ctx, true, false, cols, rk, rows, 1.0f, m, cols, p, rk, 0.0f, q, rk);
}

void expand(ExecContext& ctx, const ParamBlock& b, const float* p, const float* q, float* m, size_t r) {
  const int rows = int(b.rows), cols = int(b.cols), rk = int(r);
  if (b.transposed)
    detail::gemm(ctx, false, true, cols, rows, rk, 1.0f, q, rk, p, rk, 0.0f, m, rows);
  else
    detail::gemm(ctx, false, true, rows, cols, rk, 1.0f, p, rk, q, rk, 0.0f, m, cols);
}

void orthogonalize(ExecContext& ctx, float* a, size_t rows, size_t r, float eps) {
  for (size_t i = 0; i < r; ++i) {
    detail::for_each_index(ctx, 1, NormaliseColumn{a, rows, r, i, eps});
    if (i + 1 < r) detail::for_each_index(ctx, r - i - 1, RemoveComponent{a, rows, r, i});
  }
}

}  // namespace asgd::lowrank
