// kernels/ops.cu — update rules and reductions (see ops.h). One small functor per rule,
// fused into a single pass each (no temporaries).
#include "kernels/ops.h"
#include <cmath>
#include <cstdint>
#include <cstring>
#include "kernels/detail/backend.h"
#if defined(ASGD_BACKEND_CUDA)
#include <thrust/functional.h>
#include <thrust/sequence.h>
#include <thrust/sort.h>
#include <thrust/transform_reduce.h>
#else
#include <algorithm>
#include <numeric>
#endif
// Streaming stores for large out-of-place steps on the CPU (see sgd_step). Only where the
// compiler cannot contract in - lr * g into an FMA: the vector code below must round
// exactly as the plain loop does.
#if !defined(ASGD_BACKEND_CUDA) && defined(__SSE2__) && !defined(__FMA__) && !defined(__FP_FAST_FMAF)
#include <emmintrin.h>
#define ASGD_STREAMING_STEP 1
#endif

namespace asgd::ops {
namespace {
#if defined(ASGD_STREAMING_STEP)
// Out-of-place steps from this size (256 KiB of floats) stream their output: a smaller
// vector's output is still in cache when it is read next.
constexpr size_t kStreamingFromFloats = size_t(1) << 16;
#endif

struct SgdStep {
  float* out;
  const float* in;
  const float* g;
  float lr;
  ASGD_HD void operator()(size_t i) const { out[i] = in[i] - lr * g[i]; }
};
struct MomentumStep {
  float* out;
  const float* in;
  float* v;
  const float* g;
  float lr;
  float mu;
  ASGD_HD void operator()(size_t i) const {
    float vi = mu * v[i] + g[i];
    v[i] = vi;
    out[i] = in[i] - lr * vi;
  }
};
struct NesterovStep {
  float* out;
  const float* in;
  float* v;
  const float* g;
  float lr;
  float mu;
  ASGD_HD void operator()(size_t i) const {
    float gi = g[i];
    float vi = mu * v[i] + gi;
    v[i] = vi;
    out[i] = in[i] - lr * (gi + mu * vi);
  }
};
// Adam's direction d at element i (ops.h), updating m[i] and v[i]: shared by the step and
// the direction kernels, so both give an element the same bits.
ASGD_HD inline float adam_direction_at(const AdamParams& p, float gi, float wi, float* m, float* v, size_t i) {
  if (!p.decoupled && p.weight_decay != 0.0f) gi = gi + p.weight_decay * wi;
  float mi = p.beta1 * m[i] + p.one_minus_beta1 * gi;
  float vi = p.beta2 * v[i] + p.one_minus_beta2 * (gi * gi);
  m[i] = mi;
  v[i] = vi;
  float d = (mi / p.c1) / (sqrtf(vi / p.c2) + p.eps);
  if (p.decoupled && p.weight_decay != 0.0f) d = d + p.weight_decay * wi;
  return d;
}
struct AdamStep {
  float* out;
  const float* in;
  float* m;
  float* v;
  const float* g;
  AdamParams p;
  ASGD_HD void operator()(size_t i) const {
    float wi = in[i];
    out[i] = wi - p.lr * adam_direction_at(p, g[i], wi, m, v, i);
  }
};
struct AdamDirection {
  float* u;
  const float* x;
  float* m;
  float* v;
  AdamParams p;
  ASGD_HD void operator()(size_t i) const { u[i] = adam_direction_at(p, u[i], x[i], m, v, i); }
};
struct MomentumDirection {
  float* u;
  float* v;
  float mu;
  bool nesterov;
  ASGD_HD void operator()(size_t i) const {
    float gi = u[i];
    float vi = mu * v[i] + gi;
    v[i] = vi;
    u[i] = nesterov ? gi + mu * vi : vi;
  }
};
struct DcSgdStep {
  float* out;
  const float* in;
  const float* g;
  const float* backup;
  float lr;
  float lambda;
  ASGD_HD void operator()(size_t i) const {
    float gi = g[i];
    out[i] = in[i] - lr * (gi + lambda * gi * gi * (in[i] - backup[i]));
  }
};
struct AddInto {
  float* acc;
  const float* x;
  ASGD_HD void operator()(size_t i) const { acc[i] += x[i]; }
};
struct Scale {
  float* x;
  float s;
  ASGD_HD void operator()(size_t i) const { x[i] *= s; }
};
struct Copy {
  float* out;
  const float* in;
  ASGD_HD void operator()(size_t i) const { out[i] = in[i]; }
};
struct ElasticExchange {
  float* x;
  float* c;
  float alpha;
  ASGD_HD void operator()(size_t i) const {
    float e = alpha * (x[i] - c[i]);
    x[i] -= e;
    c[i] += e;
  }
};
struct MoveTowards {
  float* c;
  const float* mean;
  float beta;
  ASGD_HD void operator()(size_t i) const { c[i] += beta * (mean[i] - c[i]); }
};

ASGD_HD inline uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}
ASGD_HD inline float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, 4);
  return f;
}

// bf16: keep the top 16 bits, rounding the dropped 16 to nearest-even.
struct RoundBf16 {
  float* x;
  ASGD_HD void operator()(size_t i) const {
    float f = x[i];
    if (f != f) return;  // NaN stays
    uint32_t u = float_bits(f);
    u += 0x7FFFu + ((u >> 16) & 1u);
    x[i] = bits_float(u & 0xFFFF0000u);
  }
};

// fp16: 10 mantissa bits, exponent range [-14, 15]; values past 65504 round to inf.
struct RoundFp16 {
  float* x;
  ASGD_HD void operator()(size_t i) const {
    float f = x[i];
    uint32_t u = float_bits(f);
    uint32_t sign = u & 0x80000000u;
    uint32_t mag = u & 0x7FFFFFFFu;
    if (mag >= 0x7F800000u) return;  // inf, NaN
    if (mag >= 0x477FF000u) {
      x[i] = bits_float(sign | 0x7F800000u);
      return;
    }  // >= 65520
    int exp = int(mag >> 23) - 127;
    if (exp >= -14) {
      // normal half: drop 13 mantissa bits with round-to-nearest-even
      uint32_t lsb = (mag >> 13) & 1u;
      mag += 0x0FFFu + lsb;
      mag &= ~0x1FFFu;
      x[i] = bits_float(sign | mag);
    } else {
      // subnormal half: quantum 2^-24; float arithmetic is exact here
      const float quantum = 5.9604644775390625e-08f;  // 2^-24
      float a = bits_float(mag) / quantum;            // exact (power-of-two scale)
      float r = nearbyintf(a);                        // ties to even (default mode)
      x[i] = bits_float(sign | float_bits(r * quantum));
    }
  }
};

// Compression (compress_topk, compress_int8).
struct AddResidual {  // g += r
  float* g;
  const float* r;
  ASGD_HD void operator()(size_t i) const { g[i] += r[i]; }
};
struct GatherKept {  // vals[j] = g[idx[j]]: the values kept
  float* vals;
  const float* g;
  const int32_t* idx;
  ASGD_HD void operator()(size_t j) const { vals[j] = g[idx[j]]; }
};
struct ZeroOrResidual {  // r = g (what is not sent), g = 0
  float* g;
  float* r;
  ASGD_HD void operator()(size_t i) const {
    if (r) r[i] = g[i];
    g[i] = 0.0f;
  }
};
struct ScatterKept {  // g[idx[j]] = vals[j]; r[idx[j]] = 0 (sent exactly)
  float* g;
  float* r;
  const float* vals;
  const int32_t* idx;
  ASGD_HD void operator()(size_t j) const {
    g[idx[j]] = vals[j];
    if (r) r[idx[j]] = 0.0f;
  }
};
// The order of top-k: larger magnitude first, then lower index (a total order, so the
// kept set is the same whatever the sort's algorithm).
struct TopkBefore {
  const float* g;
  ASGD_HD bool operator()(int32_t a, int32_t b) const {
    const float x = fabsf(g[a]), y = fabsf(g[b]);
    return x > y || (x == y && a < b);
  }
};
struct QuantizeInt8 {
  float* g;
  float* r;
  float s;
  ASGD_HD void operator()(size_t i) const {
    float kept = 0.0f;
    if (s > 0) kept = fminf(127.0f, fmaxf(-127.0f, nearbyintf(g[i] / s))) * s;
    if (r) r[i] = g[i] - kept;
    g[i] = kept;
  }
};

#if defined(ASGD_BACKEND_CUDA)
struct AbsFloat {
  ASGD_HD float operator()(float v) const { return fabsf(v); }
};
struct ToDouble {
  ASGD_HD double operator()(float v) const { return double(v); }
};
struct SquareDouble {
  ASGD_HD double operator()(float v) const { return double(v) * double(v); }
};
struct IsNonFinite {
  ASGD_HD int operator()(float v) const { return (v - v) != 0.0f ? 1 : 0; }
};
#endif

// f on the elements of a table's rows: i < count * width is element i % width of row
// rows[i / width]. The dense rules' own functors, so the same arithmetic per element.
template <class F>
struct OnRows {
  F f;
  const int32_t* rows;
  size_t width;
  ASGD_HD void operator()(size_t i) const { f(size_t(rows[i / width]) * width + i % width); }
};
template <class F>
struct OnRowsOfOne {  // width 1 (a logistic model's table): no division
  F f;
  const int32_t* rows;
  ASGD_HD void operator()(size_t i) const { f(size_t(rows[i])); }
};

}  // namespace

using detail::for_each_index;

namespace {
template <class F>
void for_rows(ExecContext& ctx, const Rows& r, const F& f) {
  if (r.count == 0 || r.width == 0) return;
  const int32_t* rows = ctx.stage_ids(r.rows, r.count);
  if (r.width == 1)
    for_each_index(ctx, r.count, OnRowsOfOne<F>{f, rows});
  else
    for_each_index(ctx, r.count * r.width, OnRows<F>{f, rows, r.width});
}
}  // namespace

void sgd_step(ExecContext& ctx, const Rows& rows, float* out, const float* in, const float* g, float lr) {
  for_rows(ctx, rows, SgdStep{out, in, g, lr});
}
void momentum_step(ExecContext& ctx, const Rows& rows, float* out, const float* in, float* v, const float* g, float lr,
                   float mu) {
  for_rows(ctx, rows, MomentumStep{out, in, v, g, lr, mu});
}
void nesterov_step(ExecContext& ctx, const Rows& rows, float* out, const float* in, float* v, const float* g, float lr,
                   float mu) {
  for_rows(ctx, rows, NesterovStep{out, in, v, g, lr, mu});
}
void adam_step(ExecContext& ctx, const Rows& rows, float* out, const float* in, float* m, float* v, const float* g,
               const AdamParams& p) {
  for_rows(ctx, rows, AdamStep{out, in, m, v, g, p});
}
void dc_sgd_step(ExecContext& ctx, const Rows& rows, float* out, const float* in, const float* g, const float* backup,
                 float lr, float lambda) {
  for_rows(ctx, rows, DcSgdStep{out, in, g, backup, lr, lambda});
}
void add_into(ExecContext& ctx, const Rows& rows, float* acc, const float* x) { for_rows(ctx, rows, AddInto{acc, x}); }
void scale(ExecContext& ctx, const Rows& rows, float* x, float s) { for_rows(ctx, rows, Scale{x, s}); }
void copy(ExecContext& ctx, const Rows& rows, float* out, const float* in) {
  if (out == in) return;
  for_rows(ctx, rows, Copy{out, in});
}

void sgd_step(ExecContext& ctx, float* out, const float* in, const float* g, float lr, size_t n) {
#if defined(ASGD_STREAMING_STEP)
  // A parameter server's step writes a new version into a recycled buffer that no cache
  // holds: an ordinary store first reads each line in (a read-for-ownership). Streaming
  // stores write whole lines without reading them; the next reader of the version, a
  // gradient job later on, finds it in memory either way (what it saved: docs/benchmarks.md,
  // "Measurements behind code choices"). Same arithmetic as SgdStep: a multiply, then a
  // subtract, in float.
  if (out != in && n >= kStreamingFromFloats && detail::one_cpu_thread_here()) {
    size_t i = 0;
    for (; i < n && (reinterpret_cast<uintptr_t>(out + i) & 15u) != 0; ++i) out[i] = in[i] - lr * g[i];
    const __m128 l = _mm_set1_ps(lr);
    for (; i + 4 <= n; i += 4)
      _mm_stream_ps(out + i, _mm_sub_ps(_mm_loadu_ps(in + i), _mm_mul_ps(l, _mm_loadu_ps(g + i))));
    for (; i < n; ++i) out[i] = in[i] - lr * g[i];
    _mm_sfence();  // the stores are visible before the caller hands the version on
    return;
  }
#endif
  for_each_index(ctx, n, SgdStep{out, in, g, lr});
}
void momentum_step(ExecContext& ctx, float* out, const float* in, float* v, const float* g, float lr, float mu,
                   size_t n) {
  for_each_index(ctx, n, MomentumStep{out, in, v, g, lr, mu});
}
void nesterov_step(ExecContext& ctx, float* out, const float* in, float* v, const float* g, float lr, float mu,
                   size_t n) {
  for_each_index(ctx, n, NesterovStep{out, in, v, g, lr, mu});
}
void adam_step(ExecContext& ctx, float* out, const float* in, float* m, float* v, const float* g, const AdamParams& p,
               size_t n) {
  for_each_index(ctx, n, AdamStep{out, in, m, v, g, p});
}
void momentum_direction(ExecContext& ctx, float* u, float* v, float mu, bool nesterov, size_t n) {
  for_each_index(ctx, n, MomentumDirection{u, v, mu, nesterov});
}
void adam_direction(ExecContext& ctx, float* u, const float* x, float* m, float* v, const AdamParams& p, size_t n) {
  for_each_index(ctx, n, AdamDirection{u, x, m, v, p});
}
void dc_sgd_step(ExecContext& ctx, float* out, const float* in, const float* g, const float* backup, float lr,
                 float lambda, size_t n) {
  for_each_index(ctx, n, DcSgdStep{out, in, g, backup, lr, lambda});
}
void add_into(ExecContext& ctx, float* acc, const float* x, size_t n) { for_each_index(ctx, n, AddInto{acc, x}); }
void scale(ExecContext& ctx, float* x, float s, size_t n) { for_each_index(ctx, n, Scale{x, s}); }
void copy(ExecContext& ctx, float* out, const float* in, size_t n) {
  if (out == in) return;
  for_each_index(ctx, n, Copy{out, in});
}
void elastic_exchange(ExecContext& ctx, float* x, float* c, float alpha, size_t n) {
  for_each_index(ctx, n, ElasticExchange{x, c, alpha});
}
void move_towards(ExecContext& ctx, float* c, const float* mean, float beta, size_t n) {
  for_each_index(ctx, n, MoveTowards{c, mean, beta});
}
void round_fp16(ExecContext& ctx, float* x, size_t n) { for_each_index(ctx, n, RoundFp16{x}); }
void round_bf16(ExecContext& ctx, float* x, size_t n) { for_each_index(ctx, n, RoundBf16{x}); }

double sum(ExecContext& ctx, const float* x, size_t n) {
  detail::count_reduction(ctx, n, sizeof(double));
#if defined(ASGD_BACKEND_CUDA)
  return thrust::transform_reduce(detail::policy(ctx), x, x + n, ToDouble{}, 0.0, thrust::plus<double>());
#else
  (void)ctx;
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += x[i];
  return s;
#endif
}

double sq_norm(ExecContext& ctx, const float* x, size_t n) {
  detail::count_reduction(ctx, n, sizeof(double));
#if defined(ASGD_BACKEND_CUDA)
  return thrust::transform_reduce(detail::policy(ctx), x, x + n, SquareDouble{}, 0.0, thrust::plus<double>());
#else
  (void)ctx;
  double s = 0;
  for (size_t i = 0; i < n; ++i) s += double(x[i]) * double(x[i]);
  return s;
#endif
}

bool all_finite(ExecContext& ctx, const float* x, size_t n) {
  detail::count_reduction(ctx, n, sizeof(int));
#if defined(ASGD_BACKEND_CUDA)
  return thrust::transform_reduce(detail::policy(ctx), x, x + n, IsNonFinite{}, 0, thrust::plus<int>()) == 0;
#else
  (void)ctx;
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
#endif
}

void compress_topk(ExecContext& ctx, float* g, float* residual, size_t n, size_t k) {
  if (k > n) k = n;
  if (residual) for_each_index(ctx, n, AddResidual{g, residual});
  Workspace::Frame frame(ctx.workspace());
  int32_t* idx = ctx.workspace().take<int32_t>("top-k order", n);
  float* vals = ctx.workspace().take<float>("top-k values", k > 0 ? k : 1);
  if (n > 0) detail::count_kernel(ctx);  // the sequence
  detail::count_merge_sort(ctx, n);
#if defined(ASGD_BACKEND_CUDA)
  thrust::sequence(detail::policy(ctx), idx, idx + n);
  thrust::sort(detail::policy(ctx), idx, idx + n, TopkBefore{g});
#else
  std::iota(idx, idx + n, 0);
  std::nth_element(idx, idx + (k > 0 ? k - 1 : 0), idx + n, TopkBefore{g});
#endif
  for_each_index(ctx, k, GatherKept{vals, g, idx});
  for_each_index(ctx, n, ZeroOrResidual{g, residual});
  for_each_index(ctx, k, ScatterKept{g, residual, vals, idx});
}

void compress_int8(ExecContext& ctx, float* g, float* residual, size_t n) {
  if (residual) for_each_index(ctx, n, AddResidual{g, residual});
  detail::count_reduction(ctx, n, sizeof(float));
#if defined(ASGD_BACKEND_CUDA)
  const float mx = thrust::transform_reduce(detail::policy(ctx), g, g + n, AbsFloat{}, 0.0f, thrust::maximum<float>());
#else
  float mx = 0.0f;
  for (size_t i = 0; i < n; ++i) mx = std::fmax(mx, std::fabs(g[i]));
#endif
  for_each_index(ctx, n, QuantizeInt8{g, residual, mx / 127.0f});
}

}  // namespace asgd::ops
