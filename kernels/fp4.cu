// kernels/fp4.cu — E3M0 rounding (see fp4.h): one pass each; the max in index order.
#include "kernels/fp4.h"
#include <cmath>
#include "kernels/detail/backend.h"

namespace asgd::fp4 {
namespace {

struct MaxAbs {
  const float* x;
  size_t n;
  float* out;
  ASGD_HD void operator()(size_t) const {
    float m = 0.0f;
    for (size_t i = 0; i < n; ++i) m = fabsf(x[i]) > m ? fabsf(x[i]) : m;
    *out = m;
  }
};

struct RoundE3M0 {
  float* x;
  float s;
  ASGD_HD void operator()(size_t i) const {
    if (!(s > 0.0f)) {
      x[i] = 0.0f;
      return;
    }
    const double a = fabs(double(x[i])) / double(s);
    double best = 0, dist = a;
    double m = 1.0 / 64.0;  // 2^-6 .. 1
    for (int k = -6; k <= 0; ++k, m *= 2) {
      const double d = fabs(a - m);
      if (d <= dist) {
        best = m;
        dist = d;
      }
    }
    const float v = float(double(s) * best);
    x[i] = x[i] < 0.0f ? -v : v;
  }
};

}  // namespace

float max_abs(ExecContext& ctx, const float* x, size_t n) {
  DeviceArray<float> out(1);
  detail::for_each_index(ctx, 1, MaxAbs{x, n, out.data()});
  return out.to_host()[0];
}

void round_e3m0(ExecContext& ctx, float* x, size_t n, float scale) {
  detail::for_each_index(ctx, n, RoundE3M0{x, scale});
}

}  // namespace asgd::fp4
