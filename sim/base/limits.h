// sim/base/limits.h — the size limits a config is checked against that more than one
// component needs (the topology's machine counts, RunSettings' workers, the experiment's
// run count). A limit one component alone uses stays beside that component.
#pragma once

namespace asgd {

// The most runs one config may make (engines x sweep points x repeats): each holds its
// resolved config (~20 KB), and a config is split long before this.
inline constexpr double kMaxRuns = 50000;
// Workers of one simulated cluster: per-worker state is kept for each (docs/reliability.md).
inline constexpr double kMaxWorkers = 1000000;

}  // namespace asgd
