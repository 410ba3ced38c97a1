// engines/engine_registry.h — the engine factory keyed by the config's "type": the list of
// engines with their parameters (for validation, `asgdsim list` and the docs) and
// make_engine, which throws on an unknown type naming the valid ones.
#pragma once
#include <memory>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/engine.h"
#include "sim/config/param.h"

namespace asgd {

const std::vector<ComponentInfo>& engine_catalog();
// spec: a validated engine object {"type": ..., params with defaults filled}.
std::unique_ptr<Engine> make_engine(const nlohmann::json& spec);

}  // namespace asgd
