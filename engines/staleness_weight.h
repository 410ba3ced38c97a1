// engines/staleness_weight.h — the weight w(tau) an asynchronous engine gives a gradient of
// staleness tau, one place for every engine that takes it (async, ssp, k_async): its
// three keys, declared once (staleness_weight_fields), and the formula.
//   none          w = 1
//   inverse_sqrt  w = 1 / sqrt(1 + tau)                      FedBuff (Nguyen et al. 2022)
//   polynomial    w = (1 + tau)^(-a)                         FedAsync (Xie et al. 2019)
//   hinge         w = 1 if tau <= b, else 1 / (a (tau - b) + 1)   FedAsync
// Invariants: w(0) = 1 for every rule, 0 < w <= 1 for tau >= 0 and the ranges the keys
// allow (a >= 0, b >= 0), and `none` never touches the arithmetic (engines skip the
// weighting entirely, so a run without weights is bit for bit what it was before).
// How an engine applies w: a gradient applied on its own (async, k_async with k = 1)
// scales the step size, lr * w; gradients summed into one update (ssp, k_async) are each
// scaled by their own w before the sum. Beside async's lr_staleness "divide" the two
// multiply: lr * w(tau) / max(tau, 1).
#pragma once
#include <cmath>
#include <cstdint>
#include <vector>
#include "sim/config/field.h"

namespace asgd {

struct StalenessWeight {
  enum class Rule { None, InverseSqrt, Polynomial, Hinge };
  Rule rule{};
  double a{};  // polynomial's exponent; hinge's slope
  double b{};  // hinge's threshold (updates)

  bool active() const { return rule != Rule::None; }
  double operator()(uint64_t tau) const {
    const double t = double(tau);
    switch (rule) {
      case Rule::None:
        return 1.0;
      case Rule::InverseSqrt:
        return 1.0 / std::sqrt(1.0 + t);
      case Rule::Polynomial:
        return std::pow(1.0 + t, -a);
      case Rule::Hinge:
        return t <= b ? 1.0 : 1.0 / (a * (t - b) + 1.0);
    }
    return 1.0;
  }
};

// The keys, for an engine whose config C holds a StalenessWeight at `member`.
template <class C>
std::vector<Field<C>> staleness_weight_fields(StalenessWeight C::*member, const char* default_rule = "none") {
  using R = StalenessWeight::Rule;
  const std::vector<std::pair<std::string, R>> words = {
      {"none", R::None}, {"inverse_sqrt", R::InverseSqrt}, {"polynomial", R::Polynomial}, {"hinge", R::Hinge}};
  ParamInfo rule =
      keys::str("staleness_weight", default_rule,
                "weight w(tau) of a gradient of staleness tau: \"inverse_sqrt\" 1/sqrt(1+tau) (FedBuff, "
                "Nguyen et al. 2022); \"polynomial\" (1+tau)^-a, \"hinge\" 1 if tau <= b else "
                "1/(a(tau-b)+1) (FedAsync, Xie et al. 2019); multiplies the step (and lr_staleness's rate)",
                {"none", "inverse_sqrt", "polynomial", "hinge"});
  return {
      field<C>(
          rule,
          [member, words](C& c, const json& v) {
            for (const auto& w : words)
              if (w.first == v.get<std::string>()) (c.*member).rule = w.second;
          },
          [member, words](const C& c) { return json(word_of(words, (c.*member).rule)); }),
      field<C>(
          keys::num("staleness_a", 0.5, "a of staleness_weight polynomial and hinge (FedAsync)", 0),
          [member](C& c, const json& v) { (c.*member).a = v.get<double>(); },
          [member](const C& c) { return json((c.*member).a); }),
      field<C>(
          keys::num("staleness_b", 4.0, "b of staleness_weight hinge: staleness it leaves unweighted", 0),
          [member](C& c, const json& v) { (c.*member).b = v.get<double>(); },
          [member](const C& c) { return json((c.*member).b); }),
  };
}

}  // namespace asgd
