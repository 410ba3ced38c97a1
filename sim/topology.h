// sim/topology.h — the platform the messages cross: links and the route each message
// takes over them. Engines never compute a cost; they say what they send (a pull, a push,
// an exchange) and the Simulation asks the Topology when it arrives.
//
// The model (cut-through at the bottleneck rate, FIFO per link). A link has a bandwidth
// (bytes per virtual second) and serves one transfer at a time, in the order transfers
// were requested. A message is sent as one or more pieces; each piece crosses a path of
// links together. A piece of b bytes requested at `now` starts when every link on its path
// is free (start = max(now, each link's free time)); from then each link l on the path is
// busy for b / bandwidth_l, and the piece has arrived when the slowest of them is done.
// The pieces of one message are requested in order, so pieces that share a link go one
// after another. The message starts when its first piece starts (for a pull: the moment
// the server serves it, whose parameters it carries) and arrives when its last piece
// arrives, plus the latency (once per message). So, uncontended, a message of B bytes over
// a path of bandwidths b_1..b_k takes latency + B / min(b_i): the bottleneck sets the rate,
// and a faster link is held only for its own share (B / b_i), free for other transfers
// after that. A link of bandwidth 0 is unlimited: it is not on any path. Not modelled:
// links shared fairly between concurrent flows (a link serves one transfer at a time),
// packet loss, and a per-link latency.
//
// Requests must come in event order at the virtual time they are made, so who waits behind
// whom never depends on threads: a transfer that depends on an earlier event (a gradient
// computed) is requested when that event pops, not when the work was launched.
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>
#include "sim/time.h"

namespace asgd {

// Endpoints: the parameter server (all its shards; the EASGD center, the local-SGD
// averager) or worker w >= 0.
inline constexpr int kServer = -1;

struct TransferTimes {
  SimTime start = 0;    // the first piece leaves (a pull: the server serves it now)
  SimTime arrival = 0;  // the last piece has arrived, latency included
};

// FIFO links, by index. One piece crosses a path of them (see above).
class Links {
 public:
  // bandwidth in bytes per virtual second, > 0; returns the link's index.
  int add(double bandwidth);
  size_t size() const { return bandwidth_.size(); }
  // One piece of `bytes` over links path[0..k) requested at `now` (see the model above);
  // reserves each link, returns its start and its end (no latency).
  TransferTimes cross(const int* path, size_t k, double bytes, SimTime now);
  // Virtual time link i has been busy so far.
  SimTime busy(int i) const { return busy_[size_t(i)]; }

 private:
  std::vector<double> bandwidth_;
  std::vector<SimTime> free_at_, busy_;
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
};

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
// downlink and an uplink. A message between worker w and the server goes as S pieces of
// B/S bytes, piece s over [shard s's link, w's NIC link] in its direction; between two
// workers as one piece over [the sender's NIC uplink, the receiver's NIC downlink]. So
// with S shards of bandwidth b and NICs of bandwidth n, one uncontended message of B bytes
// takes latency + B / min(S b, n) (the pieces share the NIC: one after another).
std::unique_ptr<Topology> make_star_topology(const NetworkSpec& spec, int workers);

}  // namespace asgd
