// sim/net/topology.cpp — FIFO links, the parameter-server star, and boxes of GPUs (with or
// without racks) (see topology.h).
#include "sim/net/topology.h"
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

namespace asgd {

int Links::add(double bandwidth) {
  if (!(bandwidth > 0)) throw std::invalid_argument("a link's bandwidth must be > 0");
  bandwidth_.push_back(bandwidth);
  free_at_.push_back(0);
  busy_.push_back(0);
  return int(bandwidth_.size() - 1);
}

TransferTimes Links::cross(const Hop* hops, size_t k, SimTime now) {
  SimTime start = now;
  for (size_t i = 0; i < k; ++i) start = std::max(start, free_at_[size_t(hops[i].link)]);
  SimTime end = start;
  for (size_t i = 0; i < k; ++i) {
    const size_t l = size_t(hops[i].link);
    const SimTime held = seconds_to_sim(hops[i].bytes / bandwidth_[l]);
    free_at_[l] = add_time(start, held);
    busy_[l] += held;
    end = std::max(end, free_at_[l]);
    if (recording_) recorded_.push_back({int(l), start, held});
  }
  return {start, end};
}

void Links::record(bool on) {
  if (on) recorded_.clear();
  recording_ = on;
}

void Links::replay(uint64_t times, SimTime period) {
  if (times == 0) return;
  SimTime shift;
  if (times > uint64_t(kNever) || __builtin_mul_overflow(SimTime(times), period, &shift))
    throw TimeOverflow(time_overflow_text(double(times) * sim_to_seconds(period)));
  for (const Reservation& r : recorded_) {
    const size_t l = size_t(r.link);
    SimTime total;
    if (__builtin_mul_overflow(SimTime(times), r.held, &total))
      throw TimeOverflow(time_overflow_text(double(times) * sim_to_seconds(r.held)));
    busy_[l] = add_time(busy_[l], total);
    free_at_[l] = std::max(free_at_[l], add_time(add_time(r.start, shift), r.held));
  }
  recorded_.clear();
}

double repeated_sum(double s, double p, uint64_t times) {
  while (times > 0) {
    int e;
    std::frexp(s, &e);  // s in [2^(e-1), 2^e)
    // s = 0, subnormal s, or p not below s's binade: one addition at a time (the sum
    // leaves such a state within a few additions)
    if (s == 0 || !std::isnormal(s) || !(p < std::ldexp(1.0, e - 1)) || times < 4) {
      s += p;
      --times;
      continue;
    }
    const uint64_t m = uint64_t(std::ldexp(s, 53 - e));  // s / ulp: exact, in [2^52, 2^53)
    const double r = std::ldexp(p, 53 - e);              // p / ulp: exact, < 2^52
    const double q = std::floor(r);
    uint64_t inc = uint64_t(q);
    if (r - q > 0.5) ++inc;
    if (r - q == 0.5) {  // a tie: rounds to an even multiple of ulp
      if (m % 2 != 0) {  // make s even with one addition first
        s += p;
        --times;
        continue;
      }
      if (inc % 2 != 0) ++inc;  // from an even s, the even neighbour of s + p
    }
    if (inc == 0) return s;  // p below half an ulp: s never moves
    // additions that stay below the binade's top 2^53 ulp (one step short of it)
    const uint64_t room = ((uint64_t(1) << 53) - m) / inc;
    const uint64_t jump = std::min(times, room > 1 ? room - 1 : 0);
    if (jump == 0) {
      s += p;
      --times;
      continue;
    }
    s = std::ldexp(double(m + jump * inc), e - 53);
    times -= jump;
  }
  return s;
}

double message_bytes(const NetworkSpec& spec, size_t values) {
  return spec.message_bytes > 0 ? spec.message_bytes : double(values) * spec.bytes_per_value;
}

namespace {

class StarTopology final : public Topology {
 public:
  StarTopology(const NetworkSpec& spec, int workers) : spec_(spec), latency_(seconds_to_sim(spec.latency)) {
    if (spec_.shards < 1) throw std::invalid_argument("network shards must be >= 1");
    if (workers < 1) throw std::invalid_argument("the star needs at least one worker");
    if (spec_.bandwidth > 0)
      for (int s = 0; s < spec_.shards; ++s) {
        shard_down_.push_back(links_.add(spec_.bandwidth));
        shard_up_.push_back(links_.add(spec_.bandwidth));
      }
    if (spec_.worker_bandwidth > 0)
      for (int w = 0; w < workers; ++w) {
        nic_down_.push_back(links_.add(spec_.worker_bandwidth));
        nic_up_.push_back(links_.add(spec_.worker_bandwidth));
      }
    workers_ = workers;
  }

  bool contended() const override { return links_.size() > 0; }
  bool free() const override { return links_.size() == 0 && latency_ == 0; }
  void record(bool on) override { links_.record(on); }
  void replay(uint64_t times, SimTime period) override { links_.replay(times, period); }
  void checkpoint(StateArchive& a) override { links_.checkpoint(a); }

  TransferTimes transfer(int from, int to, double bytes, SimTime now) override {
    if (links_.size() == 0) return {now, add_time(now, latency_)};
    check(from);
    check(to);
    if (from == to) throw std::invalid_argument("a transfer needs two endpoints");
    route_.clear();
    if (from != kServer && to != kServer) {  // worker to worker: NIC up, then NIC down
      if (!nic_up_.empty()) route_.push_back({nic_up_[size_t(from)], bytes});
      if (!nic_down_.empty()) route_.push_back({nic_down_[size_t(to)], bytes});
    } else {
      const bool down = from == kServer;
      const int worker = down ? to : from;
      for (int link : down ? shard_down_ : shard_up_) route_.push_back({link, bytes / spec_.shards});
      const std::vector<int>& nic = down ? nic_down_ : nic_up_;
      if (!nic.empty()) route_.push_back({nic[size_t(worker)], bytes});
    }
    TransferTimes t = links_.cross(route_.data(), route_.size(), now);
    t.arrival = add_time(t.arrival, latency_);
    return t;
  }

 private:
  void check(int endpoint) const {
    if (endpoint != kServer && (endpoint < 0 || endpoint >= workers_))
      throw std::out_of_range("no endpoint " + std::to_string(endpoint) + " in the star");
  }

  NetworkSpec spec_;
  SimTime latency_;
  int workers_ = 0;
  Links links_;
  std::vector<int> shard_down_, shard_up_, nic_down_, nic_up_;
  std::vector<Hop> route_;  // the route being built (reused)
};

class ClusterTopology final : public Topology {
 public:
  ClusterTopology(const ClusterSpec& c, const NetworkSpec& net)
      : c_(c),
        shards_(net.shards),
        per_rack_(c.per_rack > 0 ? c.per_rack : c.boxes),
        intra_latency_(seconds_to_sim(c.intra.latency)),
        inter_latency_(seconds_to_sim(c.inter.latency)),
        rack_latency_(seconds_to_sim(c.rack.latency)) {
    if (c_.boxes < 1 || c_.per_box < 1)
      throw std::invalid_argument("a cluster topology needs boxes >= 1 and per_box >= 1");
    if (c_.per_rack < 0 || c_.boxes % per_rack_ != 0)
      throw std::invalid_argument("a cluster topology's per_rack must divide its boxes");
    if (c_.per_rack == 0 && (c_.rack.bandwidth > 0 || c_.rack.latency > 0))
      throw std::invalid_argument("rack links need per_rack >= 1");
    if (shards_ < 1) throw std::invalid_argument("network shards must be >= 1");
    const int gpus = c_.boxes * c_.per_box;
    if (c_.intra.bandwidth > 0)
      for (int w = 0; w < gpus; ++w) {
        gpu_up_.push_back(links_.add(c_.intra.bandwidth));
        gpu_down_.push_back(links_.add(c_.intra.bandwidth));
      }
    if (c_.inter.bandwidth > 0)
      for (int b = 0; b < c_.boxes; ++b) {
        box_up_.push_back(links_.add(c_.inter.bandwidth));
        box_down_.push_back(links_.add(c_.inter.bandwidth));
      }
    if (net.bandwidth > 0)
      for (int s = 0; s < shards_; ++s) {
        shard_up_.push_back(links_.add(net.bandwidth));
        shard_down_.push_back(links_.add(net.bandwidth));
      }
    // after every link boxes have: without racks, the same links at the same indices
    if (c_.rack.bandwidth > 0)
      for (int r = 0; r < c_.boxes / per_rack_; ++r) {
        rack_up_.push_back(links_.add(c_.rack.bandwidth));
        rack_down_.push_back(links_.add(c_.rack.bandwidth));
      }
  }

  bool contended() const override { return links_.size() > 0; }
  bool free() const override {
    return links_.size() == 0 && intra_latency_ == 0 && inter_latency_ == 0 && rack_latency_ == 0;
  }
  int boxes() const override { return c_.boxes; }
  int box_of(int worker) const override { return worker / c_.per_box; }
  bool has_hosts() const override { return true; }
  void record(bool on) override { links_.record(on); }
  void replay(uint64_t times, SimTime period) override { links_.replay(times, period); }
  void checkpoint(StateArchive& a) override { links_.checkpoint(a); }

  TransferTimes transfer(int from, int to, double bytes, SimTime now) override {
    check(from);
    check(to);
    if (from == to) throw std::invalid_argument("a transfer needs two endpoints");
    // Under host placement a GPU's server is its own box's host.
    if (c_.host_placement && from == kServer && to >= 0) from = box_host(box_of(to));
    if (c_.host_placement && to == kServer && from >= 0) to = box_host(box_of(from));
    route_.clear();
    SimTime latency = 0;
    if (from >= 0 || to >= 0) latency += intra_latency_;
    if (from >= 0 && !gpu_up_.empty()) route_.push_back({gpu_up_[size_t(from)], bytes});
    if (to >= 0 && !gpu_down_.empty()) route_.push_back({gpu_down_[size_t(to)], bytes});
    const int box_from = box(from), box_to = box(to);  // -1: the servers
    if (box_from != box_to) {
      latency += inter_latency_;
      if (box_from >= 0 && !box_up_.empty()) route_.push_back({box_up_[size_t(box_from)], bytes});
      if (box_to >= 0 && !box_down_.empty()) route_.push_back({box_down_[size_t(box_to)], bytes});
      if (box_from < 0)
        for (int link : shard_down_) route_.push_back({link, bytes / shards_});
      if (box_to < 0)
        for (int link : shard_up_) route_.push_back({link, bytes / shards_});
      const int rack_from = rack(box_from), rack_to = rack(box_to);  // -1: the servers, on the spine
      if (rack_from != rack_to) {
        latency += rack_latency_;
        if (rack_from >= 0 && !rack_up_.empty()) route_.push_back({rack_up_[size_t(rack_from)], bytes});
        if (rack_to >= 0 && !rack_down_.empty()) route_.push_back({rack_down_[size_t(rack_to)], bytes});
      }
    }
    TransferTimes t = links_.cross(route_.data(), route_.size(), now);
    t.arrival = add_time(t.arrival, latency);
    return t;
  }

 private:
  int box(int endpoint) const {
    if (endpoint >= 0) return box_of(endpoint);
    if (endpoint == kServer) return -1;
    return -2 - endpoint;
  }
  int rack(int box) const { return box >= 0 ? box / per_rack_ : -1; }
  void check(int endpoint) const {
    const bool ok =
        endpoint >= 0 ? endpoint < c_.boxes * c_.per_box : endpoint == kServer || (-2 - endpoint) < c_.boxes;
    if (!ok) throw std::out_of_range("no endpoint " + std::to_string(endpoint) + " in the cluster topology");
  }

  ClusterSpec c_;
  int shards_;
  int per_rack_;  // boxes per rack (without racks: every box, one rack)
  SimTime intra_latency_, inter_latency_, rack_latency_;
  Links links_;
  std::vector<int> gpu_up_, gpu_down_, box_up_, box_down_, shard_up_, shard_down_, rack_up_, rack_down_;
  std::vector<Hop> route_;
};

}  // namespace

std::unique_ptr<Topology> make_cluster_topology(const ClusterSpec& cluster, const NetworkSpec& net) {
  return std::make_unique<ClusterTopology>(cluster, net);
}

std::unique_ptr<Topology> make_star_topology(const NetworkSpec& spec, int workers) {
  return std::make_unique<StarTopology>(spec, workers);
}

}  // namespace asgd
