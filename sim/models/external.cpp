// sim/models/external.cpp — the provider seen with its model half, and what a run config
// names outside the program.
#include "sim/models/external.h"
#include <fstream>
#include <iterator>
#include "sim/base/hash.h"
#include "sim/data/catalog.h"

namespace asgd {

std::shared_ptr<ExternalProvider> external_provider() {
  return std::dynamic_pointer_cast<ExternalProvider>(external_data_source());
}

void set_external_provider(std::shared_ptr<ExternalProvider> provider) {
  set_external_data_source(std::move(provider));
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

nlohmann::json external_sources(const nlohmann::json& c, const std::string& base_dir, Validator& v,
                                std::map<std::string, std::string>& cache) {
  nlohmann::json out = nlohmann::json::object();
  const ModelType* m = find_model_type(text_of(c.value("model", nlohmann::json()), "type"));
  const DataType* d = find_data_type(text_of(c.value("data", nlohmann::json()), "type"));
  std::vector<std::pair<const char*, const char*>> keys;
  if (m && m->reads == ModelType::Reads::External) keys = {{"model", "module"}, {"model", "loss"}};
  if (d && d->layout == DataType::Layout::External) keys.push_back({"data", "module"});
  for (const auto& [section, key] : keys) {
    const std::string spec = text_of(c[section], key), path = std::string(section) + "." + key;
    if (spec.empty()) continue;  // the caller hands the object in
    const size_t colon = spec.rfind(':');
    if (colon == std::string::npos || colon == 0 || colon + 1 == spec.size()) {
      v.error(path, "'" + spec + "' is not FILE.py:NAME (e.g. models.py:make_model)");
      continue;
    }
    const std::string file = data_path(spec.substr(0, colon), base_dir);
    auto it = cache.find(file);
    const bool fresh = it == cache.end();
    if (fresh) {
      std::ifstream in(file, std::ios::binary);
      std::string text;
      if (in) text.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
      it = cache.emplace(file, in && !in.bad() ? fnv1a64_hex(text) : std::string()).first;
    }
    if (it->second.empty() && fresh)  // said once, not once per run
      v.error(path, "'" + spec + "': " + file +
                        " cannot be read (no such file?; a relative FILE is from the config's "
                        "folder)");
    else if (!it->second.empty())
      out[path] = it->second;
  }
  return out;
}

}  // namespace asgd
