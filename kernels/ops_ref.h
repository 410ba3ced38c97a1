// kernels/ops_ref.h — plain scalar references for kernels/ops.h, used only by tests.
// Deliberately naive: one loop each, double accumulation, no backend.
#pragma once
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace asgd::ops_ref {

inline void sgd_step(std::vector<float>& w, const std::vector<float>& g, float lr) {
  for (size_t i = 0; i < w.size(); ++i) w[i] = w[i] - lr * g[i];
}
inline void momentum_step(std::vector<float>& w, std::vector<float>& v, const std::vector<float>& g, float lr,
                          float mu) {
  for (size_t i = 0; i < w.size(); ++i) {
    v[i] = mu * v[i] + g[i];
    w[i] = w[i] - lr * v[i];
  }
}
inline void nesterov_step(std::vector<float>& w, std::vector<float>& v, const std::vector<float>& g, float lr,
                          float mu) {
  for (size_t i = 0; i < w.size(); ++i) {
    v[i] = mu * v[i] + g[i];
    w[i] = w[i] - lr * (g[i] + mu * v[i]);
  }
}
// Adam / AdamW step t (t >= 1) on the given elements, straight from Kingma & Ba's
// Algorithm 1 (and Loshchilov & Hutter's decoupled decay), in double with the bias
// corrections computed here; m, v and w rounded to float as they are stored.
inline void adam_step_rows(std::vector<float>& w, std::vector<float>& m, std::vector<float>& v,
                           const std::vector<float>& g, float lr, double beta1, double beta2, double eps,
                           double weight_decay, bool decoupled, int t, const std::vector<size_t>& elements) {
  const double c1 = 1.0 - std::pow(beta1, t), c2 = 1.0 - std::pow(beta2, t);
  for (size_t i : elements) {
    double gi = g[i];
    if (!decoupled) gi += weight_decay * w[i];
    m[i] = float(beta1 * m[i] + (1.0 - beta1) * gi);
    v[i] = float(beta2 * v[i] + (1.0 - beta2) * gi * gi);
    double d = (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
    if (decoupled) d += weight_decay * w[i];
    w[i] = float(w[i] - double(lr) * d);
  }
}
inline void adam_step(std::vector<float>& w, std::vector<float>& m, std::vector<float>& v, const std::vector<float>& g,
                      float lr, double beta1, double beta2, double eps, double weight_decay, bool decoupled, int t) {
  std::vector<size_t> all(w.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  adam_step_rows(w, m, v, g, lr, beta1, beta2, eps, weight_decay, decoupled, t, all);
}
inline void nesterov_step_rows(std::vector<float>& w, std::vector<float>& v, const std::vector<float>& g, float lr,
                               float mu, const std::vector<size_t>& elements) {
  for (size_t i : elements) {
    v[i] = mu * v[i] + g[i];
    w[i] = w[i] - lr * (g[i] + mu * v[i]);
  }
}
inline void dc_sgd_step(std::vector<float>& w, const std::vector<float>& g, const std::vector<float>& backup, float lr,
                        float lambda) {
  for (size_t i = 0; i < w.size(); ++i) w[i] = w[i] - lr * (g[i] + lambda * g[i] * g[i] * (w[i] - backup[i]));
}
inline void add_into(std::vector<float>& acc, const std::vector<float>& x) {
  for (size_t i = 0; i < acc.size(); ++i) acc[i] += x[i];
}
inline void scale(std::vector<float>& x, float s) {
  for (auto& v : x) v *= s;
}
inline void elastic_exchange(std::vector<float>& x, std::vector<float>& c, float alpha) {
  for (size_t i = 0; i < x.size(); ++i) {
    float e = alpha * (x[i] - c[i]);
    x[i] -= e;
    c[i] += e;
  }
}
inline void move_towards(std::vector<float>& c, const std::vector<float>& mean, float beta) {
  for (size_t i = 0; i < c.size(); ++i) c[i] += beta * (mean[i] - c[i]);
}
// The row forms (ops::Rows): the element indices of table rows `rows`, `width` each; the
// row kernels apply the rules above to these elements only.
inline std::vector<size_t> row_elements(const std::vector<int32_t>& rows, size_t width) {
  std::vector<size_t> e;
  for (int32_t r : rows)
    for (size_t c = 0; c < width; ++c) e.push_back(size_t(r) * width + c);
  return e;
}
inline void sgd_step_rows(std::vector<float>& w, const std::vector<float>& g, float lr,
                          const std::vector<size_t>& elements) {
  for (size_t i : elements) w[i] = w[i] - lr * g[i];
}
inline void momentum_step_rows(std::vector<float>& w, std::vector<float>& v, const std::vector<float>& g, float lr,
                               float mu, const std::vector<size_t>& elements) {
  for (size_t i : elements) {
    v[i] = mu * v[i] + g[i];
    w[i] = w[i] - lr * v[i];
  }
}
inline void dc_sgd_step_rows(std::vector<float>& w, const std::vector<float>& g, const std::vector<float>& backup,
                             float lr, float lambda, const std::vector<size_t>& elements) {
  for (size_t i : elements) w[i] = w[i] - lr * (g[i] + lambda * g[i] * g[i] * (w[i] - backup[i]));
}
inline double sum(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += v;
  return s;
}
inline double sq_norm(const std::vector<float>& x) {
  double s = 0;
  for (float v : x) s += double(v) * double(v);
  return s;
}
// bfloat16 round-to-nearest-even by bit manipulation (NaN kept quiet).
inline float round_bf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return f;
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7FFFu + lsb;
  u &= 0xFFFF0000u;
  float r;
  std::memcpy(&r, &u, 4);
  return r;
}
// IEEE binary16 round-to-nearest-even, computed by brute arithmetic on the value.
inline float round_fp16(float f) {
  if (std::isnan(f) || std::isinf(f)) return f;
  double a = std::fabs(double(f));
  if (a >= 65520.0) return std::copysign(INFINITY, f);  // rounds past the largest half
  int e;
  std::frexp(a, &e);                // a = m * 2^e, m in [0.5, 1)
  int exp2 = std::max(e - 1, -14);  // unbiased exponent, subnormals share -14
  double ulp = std::ldexp(1.0, exp2 - 10);
  double q = a / ulp;
  double r = std::nearbyint(q);  // default rounding mode: nearest-even
  return float(std::copysign(r * ulp, f));
}

// compress_topk / compress_int8 (ops.h), with an optional residual (empty: none).
inline void compress_topk(std::vector<float>& g, std::vector<float>& r, size_t k) {
  const size_t n = g.size();
  if (!r.empty())
    for (size_t i = 0; i < n; ++i) g[i] += r[i];
  std::vector<bool> keep(n, false);
  for (size_t j = 0; j < k; ++j) {  // k times: the largest |g| not kept yet, lowest index on ties
    size_t best = n;
    for (size_t i = 0; i < n; ++i)
      if (!keep[i] && (best == n || std::fabs(g[i]) > std::fabs(g[best]))) best = i;
    keep[best] = true;
  }
  for (size_t i = 0; i < n; ++i) {
    const float kept = keep[i] ? g[i] : 0.0f;
    if (!r.empty()) r[i] = g[i] - kept;
    g[i] = kept;
  }
}
inline void compress_int8(std::vector<float>& g, std::vector<float>& r) {
  const size_t n = g.size();
  if (!r.empty())
    for (size_t i = 0; i < n; ++i) g[i] += r[i];
  float mx = 0;
  for (float v : g) mx = std::fmax(mx, std::fabs(v));
  const float s = mx / 127.0f;
  for (size_t i = 0; i < n; ++i) {
    float kept = 0;
    if (s > 0) kept = std::fmin(127.0f, std::fmax(-127.0f, std::nearbyint(g[i] / s))) * s;
    if (!r.empty()) r[i] = g[i] - kept;
    g[i] = kept;
  }
}

}  // namespace asgd::ops_ref
