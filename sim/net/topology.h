// sim/net/topology.h — the platform the messages cross: links and the route each message
// takes over them. Engines never compute a cost; they say what they send (a pull, a push,
// an exchange) and the Simulation asks the Topology when it arrives.
//
// The model (cut-through, FIFO per link). A link has a bandwidth (bytes per virtual
// second) and carries one transfer at a time, in the order transfers were requested. A
// message crosses a route: a set of hops, each a link and the bytes the message puts on it
// (a message split over the server's S shards puts B/S bytes on each shard's link and B on
// the worker's NIC). Requested at `now`, it starts when every link of its route is free
// (start = max(now, each link's free time)); from then each link l is busy for
// bytes_l / bandwidth_l, and the message arrives when the last of them is done, plus the
// latency (once per message). So, uncontended, a message takes
//     latency + max over its hops of bytes_l / bandwidth_l
// (B bytes over S shards of bandwidth b and a NIC of bandwidth n: latency + B / min(S b, n));
// the bottleneck sets the rate, and a faster link is held only for its own share, free for
// other transfers after that. The start is also when the server serves a pull: the
// parameters it carries are those of that moment. A link of bandwidth 0 is unlimited: it
// is on no route. Not modelled: links shared fairly between concurrent flows (a link
// carries one transfer at a time), a message waiting for one link while holding none, a
// per-link latency, and loss.
//
// Requests must come in event order at the virtual time they are made, so who waits behind
// whom never depends on threads: a transfer that depends on an earlier event (a gradient
// computed) is requested when that event pops, not when the work was launched.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>
#include "sim/base/state_archive.h"
#include "sim/base/time.h"

namespace asgd {

// Endpoints: the parameter server (all its shards; the EASGD center, the local-SGD
// averager), worker w >= 0, or the host of box b (box_host(b); cluster topology only).
inline constexpr int kServer = -1;
inline constexpr int box_host(int box) { return -2 - box; }

struct TransferTimes {
  SimTime start = 0;    // the first piece leaves (a pull: the server serves it now)
  SimTime arrival = 0;  // the last piece has arrived, latency included
};

// One link of a route and the bytes a message puts on it.
struct Hop {
  int link = 0;
  double bytes = 0;
};

// FIFO links, by index (see the model above).
class Links {
 public:
  // bandwidth in bytes per virtual second, > 0; returns the link's index.
  int add(double bandwidth);
  size_t size() const { return bandwidth_.size(); }
  // A message over hops[0..k) requested at `now`: reserves each link, returns when it
  // starts and when its last hop is done (no latency).
  TransferTimes cross(const Hop* hops, size_t k, SimTime now);
  // Virtual time link i has been busy so far (reserved up to now and beyond).
  SimTime busy(int i) const { return busy_[size_t(i)]; }
  // Repeating a step of transfers without crossing each again (see Topology::record).
  void record(bool on);
  void replay(uint64_t times, SimTime period);
  // A checkpoint: when each link is free and how long it has been busy.
  void checkpoint(StateArchive& a) {
    a.io(free_at_);
    a.io(busy_);
    if (!a.saving() && (free_at_.size() != bandwidth_.size() || busy_.size() != bandwidth_.size()))
      a.fail("the links do not match this topology's " + std::to_string(bandwidth_.size()));
  }

 private:
  struct Reservation {
    int link;
    SimTime start, held;
  };
  std::vector<double> bandwidth_;
  std::vector<SimTime> free_at_, busy_;
  bool recording_ = false;
  std::vector<Reservation> recorded_;
};

class Topology {
 public:
  virtual ~Topology() = default;
  // A message of `bytes` from `from` to `to` (kServer or a worker), requested at `now`.
  virtual TransferTimes transfer(int from, int to, double bytes, SimTime now) = 0;
  // Whether any link has a finite bandwidth. Then transfers queue, and each must be
  // requested at the virtual time it is made, in event order; otherwise a transfer takes
  // exactly the latency and may be computed ahead.
  virtual bool contended() const = 0;
  // Whether every transfer is instantaneous (no finite link, no latency).
  virtual bool free() const = 0;
  // Boxes and the box of worker w (the star: one box, no host endpoint).
  virtual int boxes() const { return 1; }
  virtual int box_of(int worker) const { return 0; }
  virtual bool has_hosts() const { return false; }
  // A collective's steps repeat the same transfers: record(true), the transfers of one
  // step, record(false), then replay(times, period) makes the links as they would be had
  // those transfers been requested `times` more times, each `period` later than the time
  // before (each link's busy time and free time), in O(links used) instead of crossing
  // them again. Valid only when each repetition would start every transfer at its request
  // time (every link free by then, none used twice in one step); the caller checks that
  // the recorded step started every transfer when requested, and that `period` covers it.
  virtual void record(bool on) = 0;
  virtual void replay(uint64_t times, SimTime period) = 0;
  // A checkpoint of the links' state (between events: nothing recorded).
  virtual void checkpoint(StateArchive& a) = 0;
};

// The value of s after `times` repetitions of `s += p` in double, rounded as that loop
// rounds (to nearest, ties to even), in O(binades crossed) instead of O(times): within a
// binade every addition adds the same multiple of the binade's ulp. s >= 0, p >= 0, finite.
double repeated_sum(double s, double p, uint64_t times);

// The parameter-server star (cluster.network).
struct NetworkSpec {
  double latency = 0;           // virtual seconds per message
  double bandwidth = 0;         // bytes per virtual second of each shard link, each direction; 0 = unlimited
  int shards = 1;               // the server's shards: a message is split evenly over them
  double worker_bandwidth = 0;  // bytes per virtual second of each worker's NIC, each direction; 0 = unlimited
  double message_bytes = 0;     // bytes of a parameter or gradient message; 0 = values x bytes_per_value
  int bytes_per_value = 4;      // 4 (fp32) or 2 (fp16/bf16)
};

// Bytes of one parameter-sized message for a model of `values` parameters.
double message_bytes(const NetworkSpec& spec, size_t values);

// The star: shard s has a downlink (server -> workers) and an uplink, worker w's NIC a
// downlink and an uplink. A message of B bytes between worker w and the server crosses
// every shard's link in its direction with B/S bytes and w's NIC link with B; between two
// workers, the sender's NIC uplink and the receiver's NIC downlink with B each. So with S
// shards of bandwidth b and NICs of bandwidth n, one uncontended message takes
// latency + B / min(S b, n).
std::unique_ptr<Topology> make_star_topology(const NetworkSpec& spec, int workers);

// One level of the cluster topology: each link's bandwidth (bytes per virtual second, each
// direction; 0 = unlimited) and the latency a message pays for crossing the level.
struct LinkSpec {
  double bandwidth = 0;
  double latency = 0;
};

// The topology a spec names when none is chosen: what cluster.topology.type defaults to
// (sim/net/catalog.cpp declares it with this value).
inline constexpr const char* kDefaultTopologyType = "star";

// cluster.topology and cluster.placement: the member of the topology family
// (sim/net/catalog.h) and its keys (boxes: boxes, per_box, intra, inter; racks: those,
// per_rack and rack).
struct ClusterSpec {
  std::string type = kDefaultTopologyType;
  int boxes = 0;
  int per_box = 0;
  int per_rack = 0;             // boxes per rack; 0: no rack level (boxes: one switch)
  LinkSpec intra;               // each GPU's link to its box's host (PCIe, NVLink)
  LinkSpec inter;               // each box's NIC to its switch (boxes: the one switch; racks: its rack's)
  LinkSpec rack;                // each rack's uplink to the spine (racks only)
  bool host_placement = false;  // cluster.placement "host" (else "servers")
};

// Boxes of GPUs (see docs/architecture.md, "Boxes"). Worker w is GPU w % per_box of box
// w / per_box. Links: GPU w's intra uplink and downlink, box b's inter uplink and
// downlink, and the dedicated servers' shard links (network.bandwidth, network.shards).
// A message's route, from A to B:
//   - A's intra uplink if A is a GPU, B's intra downlink if B is a GPU (bytes each);
//   - if it leaves a box: the sending box's inter uplink and the receiving box's inter
//     downlink (a box that is an endpoint's), and every shard's link in its direction
//     (bytes / shards) if one end is the servers;
//   - latency: intra.latency if an end is a GPU, plus inter.latency if it leaves a box.
// kServer is the dedicated servers, except under host placement between a GPU and
// kServer: the parameters live in the GPU's own box's host, so the message stays inside
// the box (the GPU's intra link only). Uncontended, a GPU-server message (placement
// servers) takes intra.latency + inter.latency + B / min(intra bw, inter bw, S x shard bw).
//
// Racks (per_rack > 0; see docs/architecture.md, "Racks"): box b is in rack b / per_rack,
// each rack's switch has an uplink and a downlink of rack.bandwidth to a non-blocking
// spine, and the dedicated servers hang off the spine. A message that leaves a rack (to
// another rack or to the servers) also crosses the sending rack's uplink and the
// receiving rack's downlink (for the racks that are an end's), with bytes each, and pays
// rack.latency once; between two boxes of one rack it crosses their inter links only.
// Uncontended, a GPU-server message then takes intra.latency + inter.latency +
// rack.latency + B / min(intra bw, inter bw, rack bw, S x shard bw). per_rack = 0 is the
// boxes above: one rack holding every box, with no rack links and no rack latency (the
// same links, in the same order, and the same times).
std::unique_ptr<Topology> make_cluster_topology(const ClusterSpec& cluster, const NetworkSpec& net);

}  // namespace asgd
