// sim/net/collective.cpp — the collectives' steps over the topology (sim/net/collective.h).
#include "sim/net/collective.h"
#include <algorithm>
#include <stdexcept>

namespace asgd {

namespace {

struct Send {
  int from, to;
};

// One collective's steps over the topology, each message counted as it is sent.
class Steps {
 public:
  Steps(Topology& topology, MessageCounts& counts, const std::function<bool()>& go_on)
      : topology_(topology), counts_(counts), go_on_(go_on) {}

  // One step: every send of `sends` requested at `at`, `piece` bytes each; returns when the
  // last arrives. waited: set when a transfer started later than `at` (a link was busy).
  SimTime step(const std::vector<Send>& sends, SimTime at, double piece, bool* waited = nullptr) {
    SimTime end = at;
    for (const Send& s : sends) {
      const TransferTimes t = topology_.transfer(s.from, s.to, piece, at);
      end = std::max(end, t.arrival);
      if (waited && t.start != at) *waited = true;
      if (s.to == kServer) {
        counts_.messages_to_server++;
        counts_.bytes_to_server += piece;
      }
      if (s.to >= 0) {
        counts_.messages_to_workers++;
        counts_.bytes_to_workers += piece;
      }
    }
    return end;
  }

  // A ring of `nodes`: 2(n-1) steps, each one piece of bytes/n from every node to the next
  // (reduce-scatter, then all-gather). In O(n), not O(n^2): the first step may wait for
  // links busy before the collective; after it every link of the ring is free (each was
  // waited for), so when the second step starts every transfer at once (no link used twice
  // in a step), every later step is the second one again, one step's duration later: the
  // links are replayed (Topology::replay) and the counters advanced as the loop would have
  // (repeated_sum rounds the byte totals as it would).
  SimTime ring(const std::vector<int>& nodes, SimTime at, double bytes) {
    const size_t n = nodes.size();
    if (n < 2) return at;
    std::vector<Send> sends;
    for (size_t i = 0; i < n; ++i) sends.push_back({nodes[i], nodes[(i + 1) % n]});
    const double piece = bytes / double(n);
    at = step(sends, at, piece);
    const SimTime second = at;
    bool waited = false;
    topology_.record(true);
    at = step(sends, at, piece, &waited);
    topology_.record(false);
    uint64_t rest = 2 * (uint64_t(n) - 1) - 2;
    if (waited) {  // (not for a ring in worker order on these topologies) step by step
      for (; rest > 0 && go_on_(); --rest) at = step(sends, at, piece);
      return at;  // interrupted: the run stops at the next event, with this time
    }
    const SimTime period = at - second;
    topology_.replay(rest, period);
    uint64_t to_server = 0, to_workers = 0;
    for (const Send& s : sends) {
      to_server += s.to == kServer;
      to_workers += s.to >= 0;
    }
    counts_.messages_to_server += rest * to_server;
    counts_.bytes_to_server = repeated_sum(counts_.bytes_to_server, piece, rest * to_server);
    counts_.messages_to_workers += rest * to_workers;
    counts_.bytes_to_workers = repeated_sum(counts_.bytes_to_workers, piece, rest * to_workers);
    SimTime span;
    if (rest > uint64_t(kNever) || __builtin_mul_overflow(SimTime(rest), period, &span))
      throw TimeOverflow(time_overflow_text(double(rest) * sim_to_seconds(period)));
    return add_time(at, span);
  }

  // Every member to its box's host (up), or back (down), in one step.
  SimTime hosts_and_members(const std::vector<int>& members, bool up, SimTime at, double bytes) {
    std::vector<Send> sends;
    for (int w : members) {
      const int host = box_host(topology_.box_of(w));
      sends.push_back(up ? Send{w, host} : Send{host, w});
    }
    return step(sends, at, bytes);
  }

  // Every host to the servers (up), or back (down), in one step.
  SimTime hosts_and_servers(const std::vector<int>& hosts, bool up, SimTime at, double bytes) {
    std::vector<Send> sends;
    for (int h : hosts) sends.push_back(up ? Send{h, kServer} : Send{kServer, h});
    return step(sends, at, bytes);
  }

 private:
  Topology& topology_;
  MessageCounts& counts_;
  const std::function<bool()>& go_on_;
};

}  // namespace

SimTime run_collective(Topology& topology, Collective kind, const std::vector<int>& members, double bytes,
                       SimTime start, MessageCounts& counts, const std::function<bool()>& go_on) {
  if (kind != Collective::RingAllReduce && !topology.has_hosts())
    throw std::logic_error("collective: this topology has no box hosts");
  std::vector<int> hosts;  // the members' boxes' hosts, in box order (members are ascending)
  for (int w : members)
    if (const int h = box_host(topology.box_of(w)); hosts.empty() || hosts.back() != h) hosts.push_back(h);
  Steps steps(topology, counts, go_on);
  switch (kind) {
    case Collective::RingAllReduce:
      return steps.ring(members, start, bytes);
    case Collective::Hierarchical:
      return steps.hosts_and_members(
          members, false, steps.ring(hosts, steps.hosts_and_members(members, true, start, bytes), bytes), bytes);
    case Collective::HostReduceToServers:
      return steps.hosts_and_servers(hosts, true, steps.hosts_and_members(members, true, start, bytes), bytes);
    case Collective::ServersToHostsToMembers:
      return steps.hosts_and_members(members, false, steps.hosts_and_servers(hosts, false, start, bytes), bytes);
  }
  return start;
}

}  // namespace asgd
