// engines/registry.cpp — engine types, their parameters, and the factory.
#include "engines/engine_registry.h"
#include <stdexcept>
#include "engines/async.h"
#include "engines/sync.h"

namespace asgd {

const std::vector<ComponentInfo>& engine_catalog() {
  static const std::vector<ComponentInfo> catalog = {
      {"async", "asynchronous SGD, parameter server (Dean et al. 2012): apply each gradient on arrival", {}},
      {"sync", "synchronous SGD: all workers compute on the same parameters; apply the mean once all arrive", {}},
  };
  return catalog;
}

std::unique_ptr<Engine> make_engine(const nlohmann::json& spec) {
  const std::string type = spec.at("type").get<std::string>();
  if (type == "async") return std::make_unique<AsyncEngine>(spec);
  if (type == "sync") return std::make_unique<SyncEngine>(spec);
  std::string valid;
  for (const auto& e : engine_catalog()) valid += (valid.empty() ? "" : ", ") + e.name;
  throw std::invalid_argument("unknown engine type '" + type + "' (valid: " + valid + ")");
}

}  // namespace asgd
