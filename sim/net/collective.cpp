// sim/net/collective.cpp — the collectives' steps over the topology (sim/net/collective.h).
#include "sim/net/collective.h"
#include <algorithm>
#include <stdexcept>

namespace asgd {

SimTime run_collective(Topology& topology, Collective kind, const std::vector<int>& members, double bytes,
                       SimTime start, MessageCounts& counts, const std::function<bool()>& go_on) {
  // the boxes of the members, ascending (members are ascending)
  std::vector<int> boxes;
  for (int w : members) {
    const int b = topology.box_of(w);
    if (boxes.empty() || boxes.back() != b) boxes.push_back(b);
  }
  // One step: every (from, to, bytes) requested at `at`; returns when the last arrives.
  // waited: set when a transfer started later than `at` (a link was busy).
  struct Send {
    int from, to;
  };
  std::vector<Send> sends;
  auto step = [&](SimTime at, double piece, bool* waited = nullptr) {
    SimTime end = at;
    for (const Send& s : sends) {
      const TransferTimes t = topology.transfer(s.from, s.to, piece, at);
      end = std::max(end, t.arrival);
      if (waited && t.start != at) *waited = true;
      if (s.to == kServer) {
        counts.messages_to_server++;
        counts.bytes_to_server += piece;
      }
      if (s.to >= 0) {
        counts.messages_to_workers++;
        counts.bytes_to_workers += piece;
      }
    }
    return end;
  };
  // A ring of `ring` endpoints: 2(n-1) steps, each one piece of bytes/n from every
  // endpoint to the next (reduce-scatter, then all-gather). In O(n), not O(n^2): the
  // first step may wait for links busy before the collective; after it every link of the
  // ring is free (each was waited for), so when the second step starts every transfer at
  // once (no link used twice in a step), every later step is the second one again, one
  // step's duration later: the links are replayed (Topology::replay) and the counters
  // advanced as the loop would have (repeated_sum rounds the byte totals as it would).
  auto ring = [&](SimTime at, const std::vector<int>& nodes) {
    const size_t n = nodes.size();
    if (n < 2) return at;
    sends.clear();
    for (size_t i = 0; i < n; ++i) sends.push_back({nodes[i], nodes[(i + 1) % n]});
    const double piece = bytes / double(n);
    const uint64_t steps = 2 * (uint64_t(n) - 1);
    at = step(at, piece);
    const SimTime second = at;
    bool waited = false;
    topology.record(true);
    at = step(at, piece, &waited);
    topology.record(false);
    uint64_t rest = steps - 2;
    if (waited) {  // (not for a ring in worker order on these topologies) step by step
      for (; rest > 0 && go_on(); --rest) at = step(at, piece);
      return at;  // interrupted: the run stops at the next event, with this time
    }
    const SimTime period = at - second;
    topology.replay(rest, period);
    uint64_t to_server = 0, to_workers = 0;
    for (const Send& s : sends) {
      to_server += s.to == kServer;
      to_workers += s.to >= 0;
    }
    counts.messages_to_server += rest * to_server;
    counts.bytes_to_server = repeated_sum(counts.bytes_to_server, piece, rest * to_server);
    counts.messages_to_workers += rest * to_workers;
    counts.bytes_to_workers = repeated_sum(counts.bytes_to_workers, piece, rest * to_workers);
    SimTime span;
    if (rest > uint64_t(kNever) || __builtin_mul_overflow(SimTime(rest), period, &span))
      throw TimeOverflow(time_overflow_text(double(rest) * sim_to_seconds(period)));
    return add_time(at, span);
  };
  auto to_hosts = [&](SimTime at) {
    sends.clear();
    for (int w : members) sends.push_back({w, box_host(topology.box_of(w))});
    return step(at, bytes);
  };
  auto from_hosts = [&](SimTime at) {
    sends.clear();
    for (int w : members) sends.push_back({box_host(topology.box_of(w)), w});
    return step(at, bytes);
  };
  std::vector<int> hosts;
  for (int b : boxes) hosts.push_back(box_host(b));
  if (kind != Collective::RingAllReduce && !topology.has_hosts())
    throw std::logic_error("collective: this topology has no box hosts");
  SimTime end = start;
  switch (kind) {
    case Collective::RingAllReduce:
      end = ring(start, members);
      break;
    case Collective::Hierarchical:
      end = from_hosts(ring(to_hosts(start), hosts));
      break;
    case Collective::HostReduceToServers:
      end = to_hosts(start);
      sends.clear();
      for (int h : hosts) sends.push_back({h, kServer});
      end = step(end, bytes);
      break;
    case Collective::ServersToHostsToMembers:
      sends.clear();
      for (int h : hosts) sends.push_back({kServer, h});
      end = from_hosts(step(start, bytes));
      break;
  }
  return end;
}

}  // namespace asgd
