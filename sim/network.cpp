// sim/network.cpp
#include "sim/network.h"
#include <algorithm>
#include <stdexcept>

namespace asgd {

NetworkModel::NetworkModel(const NetworkSpec& spec, size_t values) : spec_(spec) {
  if (spec_.shards < 1) throw std::invalid_argument("network shards must be >= 1");
  bytes_ = double(values) * spec_.bytes_per_value;
  latency_ = seconds_to_sim(spec_.latency);
  if (spec_.bandwidth > 0) shard_time_ = seconds_to_sim(bytes_ / spec_.shards / spec_.bandwidth);
  down_free_.assign(spec_.shards, 0);
  up_free_.assign(spec_.shards, 0);
}

SimTime NetworkModel::transfer(SimTime now, std::vector<SimTime>& queue_free) {
  SimTime done = now;
  if (spec_.bandwidth > 0) {
    for (auto& free_at : queue_free) {  // every shard carries its slice
      SimTime start = std::max(now, free_at);
      free_at = add_time(start, shard_time_);
      done = std::max(done, free_at);
    }
  }
  return add_time(done, latency_);
}

}  // namespace asgd
