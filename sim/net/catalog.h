// sim/net/catalog.h — the topology family keyed by cluster.topology.type. Everything the
// program knows about one topology is its TopologyType here: its keys (declared once, with
// defaults, ranges and docs, and the ClusterSpec members they fill), its link levels (the
// sub-objects, each a section of its own), whether its boxes have hosts (what placement
// "host" and sync's comm "hierarchical" need), the worker count it fixes, its checks
// across sections, and how its Topology is made. Adding a topology is one entry in
// topology_family() plus its Topology class (sim/net/topology.h).
// What it is not: the link model and the routes (sim/net/topology.h), or what an engine
// does with boxes (engines/sync.cpp asks topology_facts()).
#pragma once
#include <functional>
#include <memory>
#include <string>
#include <vector>
#include <nlohmann/json.hpp>
#include "sim/config/field.h"
#include "sim/config/type_family.h"
#include "sim/net/topology.h"

namespace asgd {

// What topologies' checks across sections read of the run, typed (read from the bound
// cluster.network once it bound with no error: experiments/config, topology_run_view):
// the star's per-worker keys, latency and worker_bandwidth, written as brief() writes a
// number, "" where they are 0.
struct TopologyRunView {
  std::string network_latency, network_worker_bandwidth;
};

struct TopologyType {
  std::string name;
  std::string doc;
  std::vector<Field<ClusterSpec>> fields;
  // Sub-objects of its section, each bound by its own Section (named by its full path,
  // "cluster.topology.intra"); left out: its keys' defaults.
  std::vector<Section<ClusterSpec>> levels;
  // What the catalog shows: its fields' keys, then one key per level (the object of its
  // keys' defaults); filled by topology_family() from fields and levels.
  std::vector<ParamInfo> params;
  // Whether workers sit in boxes with a host endpoint each (box_host): placement "host"
  // and the hierarchical all-reduce need it.
  bool hosts = false;
  // Whether `asgdsim cluster` can run on it (a real run's links are the machines').
  bool real = false;
  // The worker count its bound keys fix (cluster.workers is then derived from it, or must
  // equal it). Optional: cluster.workers decides.
  std::function<int64_t(const ClusterSpec&)> workers;
  // Checks across sections, reported with their JSON paths, over its bound keys and the
  // run's typed view. Optional.
  std::function<void(const ClusterSpec& topology, const TopologyRunView& run, Validator& v)> check;
  // Its Topology for `workers` workers (throws std::invalid_argument on a spec its own
  // validation would refuse, as a spec built in code may be).
  std::function<std::unique_ptr<Topology>(const ClusterSpec& spec, const NetworkSpec& net, int workers)> make;
};

// Every topology, in the order `asgdsim list` shows them.
const TypeFamily<TopologyType>& topology_family();
// topology_family()'s types, find (nullptr for an unknown name) and catalog.
const std::vector<TopologyType>& topology_types();
const TopologyType* find_topology_type(const std::string& name);
const std::vector<ComponentInfo>& topology_catalog();

// Validates cluster.topology (`given`: the object as the config gave it; {} when left
// out) at `path`, with `run` what its checks read of the rest, and returns it resolved
// (type and every default filled). When nothing in it was reported, fills `out` (type,
// keys, levels); placement is the cluster section's key and is left as `out` holds it.
// Given without a "type", a section with keys of its own is a "boxes" topology (the form
// configs had before the type key).
nlohmann::json bind_topology(const nlohmann::json& given, const std::string& path, const TopologyRunView& run,
                             Validator& v, ClusterSpec& out);

// What engines' checks ask of a bound topology: whether its boxes have hosts, and how many
// boxes it has (1 for the star).
struct TopologyFacts {
  bool hosts = false;
  int64_t boxes = 1;
};
TopologyFacts topology_facts(const ClusterSpec& topology);

// The Topology of a bound spec: its member's make. Throws std::invalid_argument (a
// std::logic_error) for a type that is no member's.
std::unique_ptr<Topology> make_topology(const ClusterSpec& spec, const NetworkSpec& net, int workers);

}  // namespace asgd
