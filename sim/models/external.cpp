// sim/models/external.cpp — the one ExternalProvider slot.
#include "sim/models/external.h"
#include <mutex>
#include "sim/data/catalog.h"

namespace asgd {
namespace {
std::mutex& slot_mutex() {
  static std::mutex m;
  return m;
}
std::shared_ptr<ExternalProvider>& slot() {
  static std::shared_ptr<ExternalProvider> p;
  return p;
}
}  // namespace

std::shared_ptr<ExternalProvider> external_provider() {
  std::lock_guard<std::mutex> lock(slot_mutex());
  return slot();
}

void set_external_provider(std::shared_ptr<ExternalProvider> provider) {
  std::lock_guard<std::mutex> lock(slot_mutex());
  slot() = std::move(provider);
}

std::string external_key(const nlohmann::json& run_config) {
  auto type = [&](const char* section) {
    auto it = run_config.find(section);
    return it == run_config.end() ? std::string() : text_of(*it, "type");
  };
  const ModelType* m = find_model_type(type("model"));
  if (m && m->reads == ModelType::Reads::External) return "model.type";
  const DataType* d = find_data_type(type("data"));
  if (d && d->layout == DataType::Layout::External) return "data.type";
  return "";
}

std::string external_provider_missing(const std::string& key) {
  return key + " \"torch\" is a PyTorch " + (key == "model.type" ? "model" : "data set") +
         ": it runs from Python, where the module lives: python3 -m asgdsim run CONFIG.json [--model FILE.py:FACTORY] "
         "[--data FILE.py:FACTORY], or asgdsim.run(config, model=..., data=...) (docs/python.md)";
}

}  // namespace asgd
