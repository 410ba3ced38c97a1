// engines/diloco.cpp — DiLoCo (Douillard et al. 2023, "DiLoCo: Distributed Low-Communication
// Training of Language Models", arXiv 2311.08105): each worker runs H = `steps` inner steps
// from the global w on its own copy with its own inner optimizer (train.optimizer: the
// paper uses adamw), then the server applies the averaged pseudo-gradient
// Delta = w - mean_i x_i with an outer SGD step with Nesterov momentum (the paper's
// outer_lr 0.7, outer_momentum 0.9). It is local SGD with an outer optimizer: one engine
// (engines/local_sgd.cpp, which documents the rules, the state, failures and messages)
// declared here with DiLoCo's defaults, so what is measured for one holds for the other.
// The messages are local_sgd's: per worker per round one pull and one push of the
// parameters (precision and compression apply as to every message).
// Streaming DiLoCo (Douillard et al. 2025: fragments at staggered times, overlapped with
// compute, over an all-reduce) is engines/streaming_diloco.cpp.
#include "engines/engine_registry.h"
#include "engines/local_sgd.h"

namespace asgd {

EngineType diloco_engine_type() {
  using C = LocalSgdConfig;
  return engine_type<C>(
      "diloco",
      "DiLoCo (Douillard et al. 2023): `steps` inner steps of train.optimizer (typically adamw) per worker on its "
      "own copy, then an outer Nesterov SGD step on the averaged pseudo-gradient w - mean_i x_i",
      local_sgd_fields(/*steps=*/500, /*outer_lr=*/0.7, /*outer_momentum=*/0.9, /*outer_nesterov=*/true),
      {[](const C& c) { return std::make_unique<LocalSgdEngine>("diloco", c); }, local_sgd_cost, check_local_sgd});
}

}  // namespace asgd
