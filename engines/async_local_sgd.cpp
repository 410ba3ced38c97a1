// engines/async_local_sgd.cpp — asynchronous local SGD (Liu, Chhaparia, Douillard, Kale,
// Rusu, Shen, Szlam & Ranzato 2024, "Asynchronous Local-SGD Training for Language
// Modeling", arXiv 2401.09135): DiLoCo's workers without the round barrier. Each worker
// reads the server's w, runs its H_i inner steps of train.optimizer on its own copy (its
// own optimizer state, kept across windows), and pushes its pseudo-gradient
// Delta_i = w_read - x_i; the server applies each one as it arrives, to the current w,
// with the outer optimizer (DiLoCo's Nesterov: lr 0.7, momentum 0.9 by default), and the
// worker reads the new w and starts its next window. Two options of the paper:
//   nesterov_period N > 1    Delayed Nesterov (its Algorithm 3, momentum activation c = 0):
//                            the outer momentum is updated and applied once every N pushes,
//                            plain steps of Delta / N between
//   dynamic_local_updates    DyLU: H_i = floor(v_i / max_j v_j * H), v_i the worker's local
//                            steps per second measured over its last window (pull and push
//                            included), so slow workers push as often as fast ones
// One implementation with local_sgd and diloco (engines/local_sgd.cpp: the inner steps,
// the displacements, the state, failures); messages per window: one pull, one push.
#include "engines/engine_registry.h"
#include "engines/local_sgd.h"

namespace asgd {

EngineType async_local_sgd_engine_type() {
  using C = LocalSgdConfig;
  std::vector<Field<C>> fields =
      local_sgd_fields(/*steps=*/50, /*outer_lr=*/0.7, /*outer_momentum=*/0.9, /*outer_nesterov=*/true);
  fields.push_back(field(&C::nesterov_period,
                         keys::integer("nesterov_period", 1,
                                       "N of Delayed Nesterov (Liu et al. 2024): the outer momentum is updated and "
                                       "applied once every N pushes, plain steps of Delta/N between (1: Nesterov at "
                                       "every push); needs outer_nesterov",
                                       1)));
  fields.push_back(field(&C::dynamic_local_updates,
                         keys::boolean("dynamic_local_updates", false,
                                       "DyLU (Liu et al. 2024): each worker's H_i = floor(v_i / max_j v_j * steps), "
                                       "v_i its measured local steps per second")));
  return engine_type<C>(
      "async_local_sgd",
      "asynchronous local SGD / DiLoCo (Liu et al. 2024): each worker's pseudo-gradient after its `steps` inner "
      "steps is applied by the outer optimizer as it arrives, with no round barrier; Delayed Nesterov and Dynamic "
      "Local Updates as options",
      std::move(fields),
      {[](C c) {
         c.asynchronous = true;
         return std::make_unique<LocalSgdEngine>("async_local_sgd", c);
       },
       [](const C& c, int workers) {
         EngineCost cost = local_sgd_cost(c, workers);
         cost.gradients_per_update = std::max(1, c.steps);  // one worker's window per update
         return cost;
       },
       [](const C& c, const EngineRunView& run, Validator& v) {
         check_local_sgd(c, run, v);
         if (c.nesterov_period > 1 && !c.outer_nesterov)
           v.error("engine.nesterov_period",
                   "Delayed Nesterov delays a Nesterov outer step: set outer_nesterov true "
                   "(and outer_momentum > 0), or nesterov_period 1");
       }});
}

}  // namespace asgd
