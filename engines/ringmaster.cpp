// engines/ringmaster.cpp — Ringmaster ASGD (Maranjyan, Tyurin & Richtárik, ICML 2025, arXiv
// 2501.16168): asynchronous SGD whose server ignores a gradient of delay delta >= R.
// On the arrival of a gradient computed at x^{k - delta} (delta: the updates applied since
// its worker read the parameters, as this simulator's staleness):
//   delta <  R:  x^{k+1} = x^k - lr * g(x^{k - delta}); the worker starts again at x^{k+1}
//   delta >= R:  the gradient is ignored (dropped, counted); the worker starts again at x^k
// (the paper's Algorithm 4, "without calculation stops": late "drop"). Algorithm 5 ("with
// calculation stops": late "cancel") also stops, after each update, every computation whose
// delay has reached R, and restarts that worker at the current point; its time so far is
// wasted (Runtime::cancel), and a real run refuses it (a rank computing cannot be stopped).
// It is the async engine (engines/async.cpp) with a delay threshold: R larger than any
// delay is async bit for bit, and R = 1 is Rennala SGD with B = 1 (k_batch_sync k = 1,
// late "drop"), both tested. The step is train.optimizer's at the server, as async's.
#include <algorithm>
#include "engines/async.h"
#include "engines/engine_registry.h"

namespace asgd {

EngineType ringmaster_engine_type() {
  using C = AsyncConfig;
  return engine_type<C>(
      "ringmaster",
      "Ringmaster ASGD (Maranjyan et al. 2025): asynchronous SGD that ignores a gradient whose delay (updates "
      "since its read) reaches delay_threshold R; late \"cancel\" also stops a computation once its delay reaches R",
      {field(&C::delay_threshold,
             keys::integer("delay_threshold", 8,
                           "R: a gradient of delay >= R is ignored (the paper's theory takes R = max(1, ceil(sigma^2 / "
                           "epsilon)); R = 1 keeps only fresh gradients)",
                           1)),
       field<C>(
           keys::str("late", "drop",
                     "a computation whose delay reaches R: \"drop\" its gradient when it arrives (Algorithm 4); "
                     "\"cancel\" it at once and restart the worker on the current point (Algorithm 5)",
                     {"drop", "cancel"}),
           [](C& c, const json& v) { c.stop_stale = v == "cancel"; },
           [](const C& c) { return json(c.stop_stale ? "cancel" : "drop"); })},
      {[](C c) {
         c.type = "ringmaster";
         return std::make_unique<AsyncEngine>(c);
       },
       {},
       {},
       [](const C& c, Validator& v) {
         if (c.stop_stale) refuse_cancel_in_real_run(v);
       }});
}

}  // namespace asgd
