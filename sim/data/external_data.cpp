// sim/data/external_data.cpp — the one external data source slot.
#include "sim/data/external_data.h"
#include <mutex>

namespace asgd {
namespace {
std::mutex& slot_mutex() {
  static std::mutex m;
  return m;
}
std::shared_ptr<ExternalDataSource>& slot() {
  static std::shared_ptr<ExternalDataSource> p;
  return p;
}
}  // namespace

std::shared_ptr<ExternalDataSource> external_data_source() {
  std::lock_guard<std::mutex> lock(slot_mutex());
  return slot();
}

void set_external_data_source(std::shared_ptr<ExternalDataSource> source) {
  std::lock_guard<std::mutex> lock(slot_mutex());
  slot() = std::move(source);
}

std::string external_provider_missing(const std::string& key) {
  return key + " \"torch\" is a PyTorch " + (key == "model.type" ? "model" : "data set") +
         ": it runs from Python, where the module lives: python3 -m asgdsim run CONFIG.json [--model FILE.py:FACTORY] "
         "[--data FILE.py:FACTORY], or asgdsim.run(config, model=..., data=...) (docs/python.md)";
}

}  // namespace asgd
