// kernels/layers/activation.h — kernel-internal: the activations as scalar functions, f(x)
// and the gradient through f from its output y, d_in = df(y, d_out), for the activation
// layers (elementwise.cu) and for the kernels that apply one in the same pass as other
// work (a bias add: affine.h; a column sum: sums.h). One definition, so a fused kernel
// gives each value the bits the activation layer alone gives it.
#pragma once
#include <cmath>
#include "kernels/hd.h"
#include "kernels/layers/layer.h"

namespace asgd::layers {

struct Identity {
  ASGD_HD static float f(float v) { return v; }
  ASGD_HD static float df(float, float d) { return d; }
};
struct Relu {
  ASGD_HD static float f(float v) { return v < 0.0f ? 0.0f : v; }
  // d_out where the unit was active (y > 0), else 0 (a select: it vectorises)
  ASGD_HD static float df(float y, float d) { return y > 0.0f ? d : 0.0f; }
};
struct Tanh {
  ASGD_HD static float f(float v) { return tanhf(v); }
  ASGD_HD static float df(float y, float d) { return d * (1.0f - y * y); }  // 1 - tanh(x)^2
};

// fn(A{}) with A the functor of a (Identity for None): host code picks a kernel's
// instantiation once, so its inner loop has no branch on the kind.
template <class Fn>
decltype(auto) with_activation(Act a, Fn&& fn) {
  switch (a) {
    case Act::ReLU:
      return fn(Relu{});
    case Act::Tanh:
      return fn(Tanh{});
    default:
      return fn(Identity{});
  }
}

// df of the kind a, chosen per call (in a kernel that serves several kinds at once).
ASGD_HD inline float activation_df(Act a, float y, float d) {
  return a == Act::ReLU ? Relu::df(y, d) : a == Act::Tanh ? Tanh::df(y, d) : d;
}

}  // namespace asgd::layers
