// sim/network.h — what moving parameters and gradients costs in virtual time.
// A message of B bytes costs latency + B / bandwidth. The parameter server's link is
// shared: each of its S shards has its own full-duplex link (a downlink for pulls, an
// uplink for pushes) of the given bandwidth, and a message sends B/S bytes over every
// shard. Each direction of each shard is a FIFO queue: a transfer starts when it is
// requested or when the previous transfer on that queue ends, whichever is later, so
// concurrent transfers wait their turn and, past some number of workers, the link and not
// the compute sets the pace. Requests are made in event order, so queueing is
// deterministic. bandwidth = 0 means infinitely fast (latency only).
#pragma once
#include <cstdint>
#include <vector>
#include "sim/time.h"

namespace asgd {

struct NetworkSpec {
  double latency = 0;        // virtual seconds per message
  double bandwidth = 0;      // bytes per virtual second per shard link; 0 = unlimited
  int shards = 1;
  int bytes_per_value = 4;   // 4 (fp32) or 2 (fp16/bf16)
};

class NetworkModel {
 public:
  NetworkModel(const NetworkSpec& spec, size_t values);
  // Whether transfers queue (finite bandwidth): then pushes must be requested at the
  // moment the gradient is ready, in event order.
  bool contended() const { return spec_.bandwidth > 0; }
  bool free() const { return spec_.bandwidth <= 0 && spec_.latency <= 0; }
  // A pull requested at `now`; returns when the parameters have arrived.
  SimTime pull(SimTime now) { return transfer(now, down_free_); }
  // A push requested at `now`; returns when the gradient has arrived at the server.
  SimTime push(SimTime now) { return transfer(now, up_free_); }
  double message_bytes() const { return bytes_; }

 private:
  SimTime transfer(SimTime now, std::vector<SimTime>& queue_free);
  NetworkSpec spec_;
  double bytes_;
  SimTime shard_time_ = 0;   // bytes/S / bandwidth
  SimTime latency_ = 0;
  std::vector<SimTime> down_free_, up_free_;
};

}  // namespace asgd
