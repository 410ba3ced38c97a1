// sim/net/catalog.cpp — the topologies (see catalog.h): each one's keys, levels, checks and
// factory, in one entry of topology_family().
#include "sim/net/catalog.h"
#include <stdexcept>
#include "sim/base/limits.h"

namespace asgd {
namespace {

using keys::integer;
using keys::num;
using keys::seconds;
using S = ClusterSpec;

// One level of boxes' links (cluster.topology.intra, .inter).
Section<S> link_level(const std::string& path, const std::string& doc, LinkSpec S::*level) {
  return {path,
          doc,
          {field<S>(num("bandwidth", 0.0, "bytes per virtual second of each link, each direction (0 = unlimited)", 0),
                    [level](S& s, const json& v) { (s.*level).bandwidth = v.get<double>(); }),
           field<S>(seconds("latency", 0.0, "virtual seconds a message pays for crossing this level"),
                    [level](S& s, const json& v) { (s.*level).latency = v.get<double>(); })}};
}

// The last part of a section's path: its key in the member's object.
std::string level_key(const Section<S>& level) { return level.name.substr(level.name.rfind('.') + 1); }

std::vector<ParamInfo> params_of_type(const TopologyType& t) {
  std::vector<ParamInfo> p = params_of(t.fields);
  for (const auto& level : t.levels) {  // its default: the object of its keys' defaults
    json defaults = json::object();
    for (const auto& f : level.fields) defaults[f.info.name] = f.info.default_value;
    p.push_back(keys::any(level_key(level), defaults, level.doc + " (its keys: " + level.name + ")"));
  }
  return p;
}

TopologyType star() {
  TopologyType t;
  t.name = kDefaultTopologyType;
  t.doc =
      "the parameter-server star: every worker's NIC and the server's shard links, as cluster.network sets them "
      "(docs/architecture.md, Time model)";
  t.real = true;
  t.make = [](const S&, const NetworkSpec& net, int workers) { return make_star_topology(net, workers); };
  return t;
}

// Boxes' keys, levels, worker count and check: "boxes" is these, "racks" these and a rack
// level.
TopologyType boxes_of_gpus(const std::string& name, const std::string& doc) {
  TopologyType t;
  t.name = name;
  t.doc = doc;
  t.fields = {field<S>(integer("boxes", nullptr, "machines", 1, kMaxWorkers),
                       [](S& s, const json& v) { s.boxes = v.get<int>(); }),
              field<S>(integer("per_box", nullptr, "GPUs (workers) per machine", 1, kMaxWorkers),
                       [](S& s, const json& v) { s.per_box = v.get<int>(); })};
  t.levels = {
      link_level("cluster.topology.intra", name + ": each GPU's link to its box's host (PCIe, NVLink)", &S::intra)};
  t.hosts = true;
  t.workers = [](const S& s) { return int64_t(s.boxes) * int64_t(s.per_box); };
  // The links of a GPU are its box's: the star's per-worker keys have no meaning here.
  t.check = [](const S&, const TopologyRunView& run, Validator& v) {
    const std::pair<const char*, const std::string*> given[] = {{"latency", &run.network_latency},
                                                                {"worker_bandwidth", &run.network_worker_bandwidth}};
    for (const auto& [key, value] : given)
      if (!value->empty())
        v.error(std::string("cluster.network.") + key,
                "is replaced by cluster.topology.intra and .inter when a topology is given (leave it out or 0); got " +
                    *value);
  };
  t.make = [](const S& s, const NetworkSpec& net, int workers) {
    if (int64_t(s.boxes) * int64_t(s.per_box) != workers)
      throw std::invalid_argument("workers must equal topology boxes x per_box");
    return make_cluster_topology(s, net);
  };
  return t;
}

TopologyType boxes() {
  TopologyType t = boxes_of_gpus(
      "boxes",
      "boxes of GPUs (docs/architecture.md, Boxes): worker w is GPU w % per_box of box w / per_box; "
      "cluster.workers is derived (boxes x per_box) or must equal it; cluster.network's bandwidth and shards "
      "are then the dedicated servers' links");
  t.levels.push_back(link_level("cluster.topology.inter", "boxes: each box's NIC to a non-blocking switch", &S::inter));
  return t;
}

// Boxes behind racks' oversubscribed uplinks (leaf-spine): the same class, a rack level.
TopologyType racks() {
  TopologyType t = boxes_of_gpus(
      "racks",
      "boxes of GPUs in racks (docs/architecture.md, Racks): as boxes, and box b is in rack b / per_rack, "
      "whose switch reaches the spine (and the dedicated servers on it) over the rack's uplink and downlink");
  t.fields.push_back(field<S>(integer("per_rack", nullptr, "boxes per rack (must divide boxes)", 1, kMaxWorkers),
                              [](S& s, const json& v) { s.per_rack = v.get<int>(); }));
  t.levels.push_back(
      link_level("cluster.topology.inter", "racks: each box's NIC to its rack's (non-blocking) switch", &S::inter));
  t.levels.push_back(link_level("cluster.topology.rack",
                                "racks: each rack's uplink and downlink to the (non-blocking) spine", &S::rack));
  const auto boxes_check = t.check;
  t.check = [boxes_check](const S& s, const TopologyRunView& run, Validator& v) {
    boxes_check(s, run, v);
    if (s.per_rack > 0 && s.boxes % s.per_rack != 0)
      v.error("cluster.topology.per_rack", "must divide cluster.topology.boxes (" + std::to_string(s.boxes) +
                                               ") into whole racks; got " + std::to_string(s.per_rack));
  };
  return t;
}

}  // namespace

const TypeFamily<TopologyType>& topology_family() {
  static const TypeFamily<TopologyType> family("topology type", "type", [] {
    std::vector<TopologyType> types = {star(), boxes(), racks()};
    for (TopologyType& t : types) t.params = params_of_type(t);
    return types;
  }());
  return family;
}

const std::vector<TopologyType>& topology_types() { return topology_family().types(); }
const TopologyType* find_topology_type(const std::string& name) { return topology_family().find(name); }
const std::vector<ComponentInfo>& topology_catalog() { return topology_family().catalog(); }

json bind_topology(const json& given, const std::string& path, const TopologyRunView& run, Validator& v,
                   ClusterSpec& out) {
  json user = given;
  if (user.is_object() && !user.contains("type") && !user.empty()) user["type"] = "boxes";  // the form before "type"
  const size_t before = v.issues().size();
  json resolved = v.component(user, path, "type", topology_catalog(), {}, kDefaultTopologyType);
  if (v.issues().size() != before) return resolved;  // (with none, it is an object naming a type)
  const TopologyType* t = find_topology_type(resolved["type"].get<std::string>());
  ClusterSpec bound = out;
  bound.type = t->name;
  set_fields(t->fields, resolved, bound);
  for (const auto& level : t->levels) {
    const std::string key = level_key(level);
    resolved[key] = level.bind(resolved[key], level.name, v, bound);
  }
  if (t->check && v.issues().size() == before) t->check(bound, run, v);
  if (v.issues().size() == before) out = bound;
  return resolved;
}

TopologyFacts topology_facts(const ClusterSpec& topology) {
  TopologyFacts f;
  const TopologyType* t = find_topology_type(topology.type);
  if (!t || !t->hosts) return f;
  f.hosts = true;
  f.boxes = topology.boxes;
  return f;
}

std::unique_ptr<Topology> make_topology(const ClusterSpec& spec, const NetworkSpec& net, int workers) {
  return topology_family().at(spec.type).make(spec, net, workers);
}

}  // namespace asgd
