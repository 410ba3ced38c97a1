// kernels/fp4_ref.h — scalar reference for kernels/fp4.h (tests/test_kernels.cpp).
#pragma once
#include <cmath>
#include <cstddef>

namespace asgd::fp4_ref {

// The E3M0 value of x at scale s: sign(x) s m, m in {0, 2^-6, ..., 1} nearest to |x|/s.
inline float round_e3m0(float x, float s) {
  if (!(s > 0)) return 0.0f;
  const double a = std::fabs(double(x)) / double(s);
  double best = 0, dist = a;  // m = 0
  for (int k = -6; k <= 0; ++k) {
    const double m = std::ldexp(1.0, k);
    if (std::fabs(a - m) <= dist) {  // (<=: a tie goes to the larger)
      best = m;
      dist = std::fabs(a - m);
    }
  }
  const float v = float(double(s) * best);
  return x < 0 ? -v : v;
}

}  // namespace asgd::fp4_ref
