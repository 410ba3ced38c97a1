// kernels/ops.h — update rules and reductions used by the engines. Plain C++ signatures
// over backend memory; every function has a scalar twin in kernels/ops_ref.h and a test
// against it. Arrays are (n) floats unless said otherwise; out may alias in.
// Reductions run in a fixed order so results do not depend on the thread count.
#pragma once
#include <cstddef>
#include <cstdint>
#include "kernels/exec.h"

namespace asgd::ops {

// out = in - lr * g
void sgd_step(ExecContext& ctx, float* out, const float* in, const float* g, float lr, size_t n);
// heavy-ball momentum: v = mu * v + g; out = in - lr * v
void momentum_step(ExecContext& ctx, float* out, const float* in, float* v, const float* g, float lr, float mu,
                   size_t n);
// Nesterov momentum in PyTorch's form (Sutskever et al. 2013, reformulated so that w is
// the point gradients are taken at): v = mu * v + g; out = in - lr * (g + mu * v)
void nesterov_step(ExecContext& ctx, float* out, const float* in, float* v, const float* g, float lr, float mu,
                   size_t n);
// Adam (Kingma & Ba 2015) and AdamW (Loshchilov & Hutter 2019), step t >= 1 of a state
// (m, v), both (n) and +0 before step 1. Per element, all in float, in this order:
//   g' = g + weight_decay * in        (adam; adamw and weight_decay 0: g' = g)
//   m = beta1 * m + (1 - beta1) * g';  v = beta2 * v + (1 - beta2) * g' * g'
//   d = (m / c1) / (sqrt(v / c2) + eps)   (+ weight_decay * in: adamw)
//   out = in - lr * d
// with c1 = 1 - beta1^t, c2 = 1 - beta2^t (bias corrections, computed by the caller in
// double and rounded to float). AdamW's d + wd * in is PyTorch's w *= 1 - lr wd followed
// by the Adam step, in one rounding order.
struct AdamParams {
  float lr = 0.0f;  // step size
  float beta1 = 0.0f, beta2 = 0.0f;
  float one_minus_beta1 = 1.0f, one_minus_beta2 = 1.0f;  // float(1 - beta), rounded once
  float eps = 0.0f;
  float weight_decay = 0.0f;
  bool decoupled = false;      // AdamW
  float c1 = 1.0f, c2 = 1.0f;  // 1 - beta1^t, 1 - beta2^t
};
void adam_step(ExecContext& ctx, float* out, const float* in, float* m, float* v, const float* g, const AdamParams& p,
               size_t n);
// The directions alone, for a caller that applies x -= lr * d itself (local SGD keeps a
// worker's copy as a sum of such directions): u holds g on entry and d on return; the
// state is updated as by the steps above. x is the point the step would move ((n); read
// only for weight decay).
void momentum_direction(ExecContext& ctx, float* u, float* v, float mu, bool nesterov, size_t n);
void adam_direction(ExecContext& ctx, float* u, const float* x, float* m, float* v, const AdamParams& p, size_t n);
// out = in - lr * (g + lambda * g * g * (in - backup))   (DC-ASGD delay compensation)
void dc_sgd_step(ExecContext& ctx, float* out, const float* in, const float* g, const float* backup, float lr,
                 float lambda, size_t n);
// acc += x
void add_into(ExecContext& ctx, float* acc, const float* x, size_t n);
// x *= s
void scale(ExecContext& ctx, float* x, float s, size_t n);
// out = in
void copy(ExecContext& ctx, float* out, const float* in, size_t n);
// Elastic exchange (EASGD): e = alpha * (x - c); x -= e; c += e
void elastic_exchange(ExecContext& ctx, float* x, float* c, float alpha, size_t n);
// c += beta * (mean - c)
void move_towards(ExecContext& ctx, float* c, const float* mean, float beta, size_t n);
// Rows of a parameter table at the start of an array (Model::row_layout): `count` row
// indices in host memory, unique (callers pass them ascending, except copy's, for which
// order does not matter); row r is elements [r * width, (r + 1) * width).
struct Rows {
  const int32_t* rows = nullptr;
  size_t count = 0;
  size_t width = 0;
};
// The rules above on the elements of `rows` only, through the same per-element code as the
// whole-array calls (so each such element gets the bits that call gives it); every other
// element is left alone. Pointers are the whole arrays' (element 0), as above.
void sgd_step(ExecContext& ctx, const Rows& rows, float* out, const float* in, const float* g, float lr);
void momentum_step(ExecContext& ctx, const Rows& rows, float* out, const float* in, float* v, const float* g, float lr,
                   float mu);
void nesterov_step(ExecContext& ctx, const Rows& rows, float* out, const float* in, float* v, const float* g, float lr,
                   float mu);
void adam_step(ExecContext& ctx, const Rows& rows, float* out, const float* in, float* m, float* v, const float* g,
               const AdamParams& p);
void dc_sgd_step(ExecContext& ctx, const Rows& rows, float* out, const float* in, const float* g, const float* backup,
                 float lr, float lambda);
void add_into(ExecContext& ctx, const Rows& rows, float* acc, const float* x);
void scale(ExecContext& ctx, const Rows& rows, float* x, float s);
void copy(ExecContext& ctx, const Rows& rows, float* out, const float* in);
// Rounds every value through IEEE half (fp16) or bfloat16, nearest-even.
void round_fp16(ExecContext& ctx, float* x, size_t n);
void round_bf16(ExecContext& ctx, float* x, size_t n);
// Sum and squared norm accumulated in double, in index order (CPU) or by one fixed
// reduction tree (CUDA).
double sum(ExecContext& ctx, const float* x, size_t n);
double sq_norm(ExecContext& ctx, const float* x, size_t n);
bool all_finite(ExecContext& ctx, const float* x, size_t n);

// Gradient compression (cluster.network.compression), in place on g. With a residual r
// (null: none), g + r is compressed instead and r becomes (g + r) - what is kept (error
// feedback). Deterministic: the same bits on every thread count.
// Top-k: keeps the k values of largest magnitude (ties: the lower index first), zeroes the
// rest. Temporary buffers come from ctx's workspace.
void compress_topk(ExecContext& ctx, float* g, float* residual, size_t n, size_t k);
// int8: scale s = max |g| / 127; each value becomes nearbyint(g / s) (in [-127, 127]) x s,
// in float. All zeros stay zeros.
void compress_int8(ExecContext& ctx, float* g, float* residual, size_t n);

}  // namespace asgd::ops
