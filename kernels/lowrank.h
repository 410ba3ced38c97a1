// kernels/lowrank.h — the arithmetic of rank-r gradient compression (PowerSGD, Vogels,
// Karimireddy & Jaggi 2019; engines/powersgd.h composes it): the products of a matrix M
// (rows x cols, a ParamBlock: row-major, or stored transposed) with thin factors P (rows
// x r) and Q (cols x r), both row-major, and the Gram-Schmidt orthogonalisation of a
// factor's columns as torch.distributed's powerSGD_hook does it. Each has a scalar twin in
// kernels/lowrank_ref.h. Not here: which tensors are compressed, the all-reduces, the
// residuals (engines/powersgd.h).
#pragma once
#include <cstddef>
#include "kernels/exec.h"
#include "kernels/shape.h"

namespace asgd::lowrank {

// P (rows x r) = M Q, Q (cols x r). m points at the block's first parameter.
void project(ExecContext& ctx, const ParamBlock& b, const float* m, const float* q, float* p, size_t r);
// Q (cols x r) = M^T P, P (rows x r).
void back_project(ExecContext& ctx, const ParamBlock& b, const float* m, const float* p, float* q, size_t r);
// M = P Q^T, written into the block's storage (its transposed layout included).
void expand(ExecContext& ctx, const ParamBlock& b, const float* p, const float* q, float* m, size_t r);
// The columns of A (rows x r, row-major) made orthonormal in order, modified Gram-Schmidt:
// for each column i, a_i /= (||a_i|| + eps), then every later column a_j -= (a_i . a_j) a_i
// (norms and dots accumulated in double, in row order). With eps = 0 a column of norm 0
// is set to 0 (what powerSGD_hook intends; a division would give NaN).
void orthogonalize(ExecContext& ctx, float* a, size_t rows, size_t r, float eps);

}  // namespace asgd::lowrank
