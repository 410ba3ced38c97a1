// engines/registry.cpp — the engines, one line each; each describes itself (keys,
// checks, cost, factory) in its own file.
#include "engines/engine_registry.h"
#include "engines/single_replica_warmup.h"

namespace asgd {

EngineType async_engine_type();             // engines/async.cpp
EngineType sync_engine_type();              // engines/sync.cpp
EngineType sync_backup_engine_type();       // engines/sync.cpp
EngineType ssp_engine_type();               // engines/ssp.cpp
EngineType k_batch_sync_engine_type();      // engines/k_batch_sync.cpp
EngineType k_async_engine_type();           // engines/k_async.cpp
EngineType local_sgd_engine_type();         // engines/local_sgd.cpp
EngineType easgd_engine_type();             // engines/easgd.cpp
EngineType diloco_engine_type();            // engines/diloco.cpp
EngineType ringmaster_engine_type();        // engines/ringmaster.cpp
EngineType mindflayer_engine_type();        // engines/mindflayer.cpp
EngineType async_local_sgd_engine_type();   // engines/async_local_sgd.cpp
EngineType streaming_diloco_engine_type();  // engines/streaming_diloco.cpp
EngineType fedavg_engine_type();            // engines/federated.cpp
EngineType fedbuff_engine_type();           // engines/federated.cpp
EngineType fedasync_engine_type();          // engines/federated.cpp

const TypeFamily<EngineType>& engine_family() {
  static const TypeFamily<EngineType> family("engine type", "type",
                                             {
                                                 async_engine_type(),
                                                 sync_engine_type(),
                                                 sync_backup_engine_type(),
                                                 ssp_engine_type(),
                                                 k_batch_sync_engine_type(),
                                                 k_async_engine_type(),
                                                 local_sgd_engine_type(),
                                                 easgd_engine_type(),
                                                 diloco_engine_type(),
                                                 ringmaster_engine_type(),
                                                 mindflayer_engine_type(),
                                                 async_local_sgd_engine_type(),
                                                 streaming_diloco_engine_type(),
                                                 fedavg_engine_type(),
                                                 fedbuff_engine_type(),
                                                 fedasync_engine_type(),
                                             });
  return family;
}

const std::vector<EngineType>& engine_types() { return engine_family().types(); }
const EngineType* find_engine_type(const std::string& name) { return engine_family().find(name); }
const std::vector<ComponentInfo>& engine_catalog() { return engine_family().catalog(); }

void bind_entry(const nlohmann::json& engine, BoundEngine& bound) {
  if (engine.contains("name")) bound.name = engine["name"].get<std::string>();
  if (engine.contains("train")) bound.train = engine["train"];
}

std::shared_ptr<const BoundEngine> bind_engine(const nlohmann::json& spec) { return engine_family().bind(spec); }

// Every engine is wrapped in the single-replica warm-up, which only forwards unless
// train.single_replica_epochs > 0 (it reads that from the run's settings at start).
std::unique_ptr<Engine> make_engine(const BoundEngine& engine) {
  nlohmann::json config = engine.keys();
  config["type"] = engine.type();
  if (engine.name) config["name"] = *engine.name;
  if (!engine.train.empty()) config["train"] = engine.train;
  return std::make_unique<SingleReplicaWarmup>(engine.make(), std::move(config));
}

std::unique_ptr<Engine> make_engine(const nlohmann::json& spec) { return make_engine(*bind_engine(spec)); }

}  // namespace asgd
